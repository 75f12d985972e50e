"""Starters as the startd sees them: the zygote that forks them, their
processes and events, sandboxes, kept outcomes, and the eviction deadlines.
"""
