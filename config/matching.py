"""The two-sided match of a job and a slot: one rule for the broker and the startd.

HTCondor's matchmaking: the job's `Requirements` with MY = job and TARGET =
slot, and the slot's `START` with MY = slot and TARGET = job. An absent
expression accepts (HTCondor treats a missing START as true); one that is
undefined, an error or not true refuses.
"""

from __future__ import annotations

from typing import Any

from fetchwork.config.ads import as_bool, evaluate_attr
from fetchwork.errors import AdError


def _refusal(ad: Any, name: str, target: Any, who: str) -> str | None:
    if name not in ad:
        return None
    try:
        if as_bool(evaluate_attr(ad, name, target)):
            return None
    except AdError as exc:
        return f"cannot evaluate {who}: {exc}"
    return f"{who} is not true"


def mismatch(slot_ad: Any, job_ad: Any) -> str | None:
    """Why the job and the slot do not match, or None when they do."""
    return (_refusal(slot_ad, "Start", job_ad, "START for this job")
            or _refusal(job_ad, "Requirements", slot_ad, "the job's Requirements for this slot"))


def matches(job_ad: Any, slot_ad: Any) -> bool:
    """True when the job's Requirements accept the slot and the slot's START accepts the job."""
    return mismatch(slot_ad, job_ad) is None
