"""Submitting clusters of jobs: all or nothing, shaped once per distinct ad,
each job placed in its autocluster, its dependencies and limits checked.
"""
