"""The rq bridge: startd slots that work the queues of an existing rq deployment.

Selected with `STARTD_JOB_HOOK_KEYWORD = RQ` (config/examples/rq.conf); the
hooks are in hooks.py, the job's process in horse.py. rq is an optional
dependency (`pip install 'fetchwork[rq]'`): needrq.py is the one importer.
"""
