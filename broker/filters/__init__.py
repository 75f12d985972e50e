"""Submission and activation filters and job templates (Windows HPC's controls).

Filters are site programs (or `python:package.module:function` callables)
that the leader broker replica runs when a job is submitted (they may change
or fail it) and when a slot's claim picks a job (they decide whether it may
start now). The code tables are pure (`codes.py`); `runner.py` runs one
filter; `chain.py` runs a chain with its reverts; `templates.py` reads and
applies job templates; `settings.py` reads the knobs.
"""
