"""Run until cancelled (the scheduler text's /rununtilcanceled): the decisions.

A job whose ad says `RunUntilCanceled = true` holds its resources after its
command exits, until its run time is used up or it is cancelled: the starter
keeps the slot (the job stays RUNNING at the broker, its lease renewed by
the update hook; the slot's Activity is Idle) until AllowedJobDuration has
passed since the job started, then ends it as the command ended (`exit`).
A removal, hold or vacate meanwhile ends it with that word instead. Without
an AllowedJobDuration the slot is kept until the job is cancelled.

These are pure functions of the ad, the control word and the clocks; the
starter's own loop keeps the slot (`Starter._keep_slot`).
"""

from __future__ import annotations

from typing import Any

from fetchwork.config.ads import as_bool, as_number, evaluate_attr
from fetchwork.config.protocol import EVICT, HOLD, KILL, REMOVE, VACATE

# The JobState (and slot activity) of a job that holds its slot after its command ended.
IDLE_STATE = "Idle"
# How a control word ends a kept slot (suspend and continue change nothing).
_STOP_HOW = {REMOVE: REMOVE, HOLD: HOLD, VACATE: EVICT, KILL: EVICT}


def keeps_slot(ad: Any) -> bool:
    """Whether the job asked to run until cancelled."""
    return as_bool(evaluate_attr(ad, "RunUntilCanceled")) is True


def end_at(ad: Any, now_wall_s: float, now_mono_s: float) -> float | None:
    """The monotonic time its run time is used up: AllowedJobDuration from the job's start
    (JobCurrentStartDate, the broker's, else JobStartDate); None without a run time."""
    duration_s = as_number(evaluate_attr(ad, "AllowedJobDuration"))
    if duration_s is None or duration_s <= 0:
        return None
    started = as_number(evaluate_attr(ad, "JobCurrentStartDate"))
    if started is None:
        started = as_number(evaluate_attr(ad, "JobStartDate"))
    started_s = now_wall_s if started is None else started
    return now_mono_s + (started_s + duration_s - now_wall_s)


def stop_how(word: str) -> str | None:
    """How a control word received while the slot is kept ends the job, or None."""
    return _STOP_HOW.get(word)
