"""Run until cancelled (the scheduler text's /rununtilcanceled).

A job whose ad says `RunUntilCanceled = true` holds its resources after its
command exits, until its run time is used up or it is cancelled: the starter
keeps the slot (the job stays RUNNING at the broker, its lease renewed by
the update hook; the slot's Activity is Idle) until AllowedJobDuration has
passed since the job started, then ends it as the command ended (`exit`).
A removal, hold or vacate meanwhile ends it with that word instead. Without
an AllowedJobDuration the slot is kept until the job is cancelled.
"""

from __future__ import annotations

import logging
import selectors
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fetchwork.config.ads import as_bool, as_number, evaluate_attr
from fetchwork.config.protocol import EVICT, EXIT, HOLD, KILL, REMOVE, VACATE

if TYPE_CHECKING:
    from fetchwork.starter.starter import Starter

log = logging.getLogger(__name__)

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


def hold(starter: Starter) -> None:
    """Keep the slot after the command exited, while the job asks for it (see above);
    a stop request sets the starter's `how`."""
    if starter.status.how != EXIT or not keeps_slot(starter.ad):
        return  # stopped by a request (removal, hold, vacate): nothing to keep
    deadline = end_at(starter.ad, time.time(), time.monotonic())
    log.info("the command ended; keeping the slot until %s", "the job is cancelled"
             if deadline is None else f"its run time ends in {deadline - time.monotonic():.0f}s")
    starter.ad["JobState"] = IDLE_STATE
    starter.events.emit("state", state=IDLE_STATE)
    readers = [starter._wake, starter._stdin]
    selector = selectors.DefaultSelector()
    for reader in readers:
        if not reader.eof:
            selector.register(reader.fd, selectors.EVENT_READ, reader)
    next_update = time.monotonic()
    try:
        while selector.get_map():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                log.info("the job's run time is used up; releasing the slot")
                return
            if now >= next_update:
                starter._update()
                next_update = now + starter.update_interval_s
            wait_s = min(t for t in (next_update, deadline) if t is not None) - now
            for key, _ in selector.select(max(0.0, wait_s)):
                how = _read(selector, key.data, starter._stdin)
                if how is not None:
                    log.info("the job was cancelled (%s); releasing the slot", how)
                    starter.status = replace(starter.status, how=how)
                    return
    finally:
        selector.close()
    starter.status = replace(starter.status, how=EVICT)  # both inputs gone


def _read(selector: selectors.BaseSelector, reader: Any, stdin: Any) -> str | None:
    """The end a ready reader asks for: its first stop word, or evict when the
    startd closed stdin."""
    for word in reader.read():
        how = stop_how(word)
        if how is not None:
            return how
    if reader.eof:
        selector.unregister(reader.fd)
        if reader is stdin:
            return EVICT
    return None
