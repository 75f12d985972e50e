"""fetchwork.startd"""
