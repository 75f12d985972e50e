"""fetchwork.hooks"""
