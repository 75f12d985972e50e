"""HTCondor's job policy expressions: on_exit_remove/hold, periodic_hold,
periodic_release and periodic_remove, and what they decide for one job.

`expressions` holds the pure decisions; `onexit` judges a job at its exit;
`periodic` is the leader's pass over the periodic expressions.
"""
