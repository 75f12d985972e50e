"""fetchwork.broker"""
