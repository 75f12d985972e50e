"""Accept, preempt or reject a fetched job: the slot's START and RANK (pure).

The job/slot match itself is `config.matching.mismatch`, the one rule the
broker uses too; this module adds the slot's state and RANK against the
running job.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.config.matching import mismatch
from fetchwork.errors import AdError
from fetchwork.startd.states import Activity, SlotStatus, State


class Verdict(enum.Enum):
    ACCEPT = "accept"      # a new claim, or the slot's idle claim reused
    PREEMPT = "preempt"    # accepted; the running job is evicted first
    REJECT = "reject"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    rank: float = 0.0

    @property
    def reply(self) -> str:
        """The reply hook's argument."""
        return "reject" if self.verdict is Verdict.REJECT else "accept"


def job_rank(slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd, rank: Any = None) -> float:
    """The slot's RANK of the job (MY = slot, TARGET = job); not a number counts as 0.
    `rank`: the slot ad's Rank as it was set, evaluated rather than read back (as
    `start_is_false`'s `start`); None: read it."""
    try:
        value = (ads.evaluate_attr(slot_ad, "Rank", job_ad) if rank is None
                 else _value_of_set(rank, slot_ad, job_ad))
    except AdError:
        return 0.0
    number = ads.as_number(value, 0.0)
    return 0.0 if number is None or math.isnan(number) else number


def decide(status: SlotStatus, slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd,
           current_rank: float | None, rank: Any = None) -> Decision:
    """What the slot does with a fetched job (`current_rank`: the running job's RANK;
    `rank`: the slot's Rank as set, for `job_rank`)."""
    pair = status.pair
    idle_claim = pair == (State.CLAIMED, Activity.IDLE)
    running = pair in ((State.CLAIMED, Activity.BUSY), (State.CLAIMED, Activity.SUSPENDED))
    if pair != (State.UNCLAIMED, Activity.IDLE) and not idle_claim and not running:
        return Decision(Verdict.REJECT, f"slot is unavailable ({status})")
    reason = mismatch(slot_ad, job_ad)
    rank = job_rank(slot_ad, job_ad, rank)
    if reason is not None:
        return Decision(Verdict.REJECT, reason, rank)
    if not running:
        # Unclaimed: a new claim. Claimed/Idle: the claim is reused for the next
        # job, as HTCondor does after a fetched job completes.
        return Decision(Verdict.ACCEPT, "slot is available", rank)
    current = current_rank if current_rank is not None else 0.0
    if rank > current:
        return Decision(Verdict.PREEMPT, f"RANK {rank:g} beats the running job's {current:g}",
                        rank)
    return Decision(Verdict.REJECT, f"RANK {rank:g} does not beat the running job's {current:g}",
                    rank)


def start_is_false(slot_ad: classad2.ClassAd, start: Any = None) -> bool:
    """HTCondor's IS_OWNER: START evaluates to false without any job (`START =?= false`).

    `start`: the ad's Start as it was set (an expression object or a literal), to
    evaluate in the ad rather than read back out of it; None: read it."""
    try:
        value = (ads.evaluate_attr(slot_ad, "Start", None) if start is None
                 else _value_of_set(start, slot_ad, None))
    except AdError:
        return False
    return value is False


def _value_of_set(value: Any, my: classad2.ClassAd, target: classad2.ClassAd | None) -> Any:
    """What an attribute set to `value` evaluates to: an expression object is
    evaluated (MY = `my`), a literal (a string too) is itself, as `evaluate_attr`."""
    if isinstance(value, classad2.ExprTree):
        return ads.evaluate(value, my, target)
    return value
