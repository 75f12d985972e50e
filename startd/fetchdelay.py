"""When a slot fetches next: FetchWorkDelay and the slot's fetch clock (pure).

FetchWorkDelay (MY = slot, TARGET = current job), FETCH_WORK_MIN_INTERVAL
between the starts of two fetches when the first found nothing, one
outstanding fetch per slot, and a fetch at once when a job ends on a claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import classad2

from fetchwork.config import ads
from fetchwork.errors import AdError
from fetchwork.startd.states import SlotStatus, State

# HTCondor's delay when FetchWorkDelay is undefined or not a number.
DEFAULT_FETCH_DELAY_S = 300.0


def fetch_delay_s(expr: str | classad2.ExprTree, slot_ad: classad2.ClassAd,
                  job_ad: classad2.ClassAd | None) -> tuple[float, str | None]:
    """FetchWorkDelay with MY = slot, TARGET = current job; (seconds, problem or None).

    Anything but a number gives HTCondor's default of 300 s and a problem text.
    """
    try:
        value = ads.evaluate(expr, slot_ad, job_ad)
    except AdError as exc:
        return DEFAULT_FETCH_DELAY_S, str(exc)
    number = ads.as_number(value)
    if isinstance(value, bool) or number is None or math.isnan(number):
        return DEFAULT_FETCH_DELAY_S, f"FetchWorkDelay is not a number ({value!r})"
    return number, None


@dataclass
class FetchClock:
    """The fetch bookkeeping of one slot (monotonic seconds)."""

    outstanding: bool = False
    last_start_at: float | None = None
    last_end_at: float | None = None
    last_found_work: bool = False   # the last fetch brought a job that was accepted
    last_empty: bool = False        # the last fetch printed nothing at all
    due_now: bool = False           # a job just ended on a claim

    def started(self, now: float | None = None) -> None:
        self.outstanding = True
        self.last_start_at = now
        self.due_now = False

    def finished(self, now: float, found_work: bool, empty: bool = False) -> None:
        self.outstanding = False
        self.last_end_at = now
        self.last_found_work = found_work
        self.last_empty = empty


def may_fetch(status: SlotStatus, start_false: bool) -> bool:
    """Unclaimed or Claimed (not Preempting, not Owner), and START not false."""
    return status.state in (State.UNCLAIMED, State.CLAIMED) and not start_false


def fetch_due_at(clock: FetchClock, delay_s: float, min_interval_s: float) -> float | None:
    """When the next fetch is due (monotonic), or None while one is outstanding.

    The delay counts from the end of the previous fetch; a slot that never
    fetched, or whose job just ended on a claim, is due at once. After a fetch
    that found nothing the next one starts at least `min_interval_s` after
    it started, so a hook that answers "no work" instantly cannot make the
    slot spin, while a long poll that waited that long already is followed at
    once: an idle slot is never deaf to new work between two long polls.
    """
    if clock.outstanding:
        return None
    if clock.last_end_at is None or clock.due_now:
        return -math.inf
    due = clock.last_end_at + max(delay_s, 0.0)
    if clock.last_found_work:
        return due
    started_at = clock.last_start_at if clock.last_start_at is not None else clock.last_end_at
    return max(due, started_at + min_interval_s)
