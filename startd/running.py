"""SUSPEND, CONTINUE and PREEMPT for a slot's running job (pure).

HTCondor's policy expressions, evaluated with MY = slot and TARGET = job.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import classad2

from fetchwork.config import ads
from fetchwork.errors import AdError
from fetchwork.startd.states import Activity, SlotStatus, State


@dataclass(frozen=True)
class RunningPolicy:
    """HTCondor's policy expressions for a claimed slot (MY = slot, TARGET = job)."""

    want_suspend: str = "false"
    suspend: str = "false"
    continue_: str = "true"
    preempt: str = "false"


class RunAction(enum.Enum):
    SUSPEND = "suspend"
    CONTINUE = "continue"
    VACATE = "vacate"


def _true(text: str, slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd) -> bool:
    try:
        return ads.as_bool(ads.evaluate(text, slot_ad, job_ad))
    except AdError:
        return False


def running_action(status: SlotStatus, slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd,
                   rules: RunningPolicy) -> RunAction | None:
    """What HTCondor's startd does with the running job now, or None.

    Claimed/Busy: SUSPEND (only when WANT_SUSPEND) suspends, else PREEMPT
    vacates. Claimed/Suspended: CONTINUE resumes, else PREEMPT vacates.
    Undefined counts as false.
    """
    if status.state is not State.CLAIMED:
        return None
    if status.activity is Activity.BUSY:
        if _true(rules.want_suspend, slot_ad, job_ad) and _true(rules.suspend, slot_ad, job_ad):
            return RunAction.SUSPEND
    elif status.activity is Activity.SUSPENDED:
        if _true(rules.continue_, slot_ad, job_ad):
            return RunAction.CONTINUE
    else:
        return None
    return RunAction.VACATE if _true(rules.preempt, slot_ad, job_ad) else None
