"""Maui-style scheduling policy as pure functions of a queue snapshot and `now`.

- `settings`: the policy knobs, read once into a `SchedulingSettings`;
- `snapshot`: a queue snapshot (`QueuedJob`s) built from job ads;
- `limits`: per-user and per-project counts, processor-second (PS) budgets,
  the walltime cap and the start check a claim re-does;
- `priority` and `fairshare`: the weighted priority with each factor's part;
- `partition`: which queued jobs are IDLE and which BLOCKED, and why;
- `showq` and `analyze`: the text `fetchwork q -showq` and `q -analyze` print.

Nothing here talks to Redis or reads the clock: callers pass `now`.
"""
