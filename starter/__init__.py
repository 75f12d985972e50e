"""fetchwork.starter"""
