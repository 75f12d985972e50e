"""Pure decisions of the broker: does a job fit a slot, and what do submitted ads say.

The match itself is `config.matching`, the rule the startd uses too.
"""

from __future__ import annotations

import logging
from typing import Any

import classad2

from fetchwork.config.ads import as_bool, as_number, evaluate_attr
from fetchwork.config.matching import matches
from fetchwork.errors import AdError

from .states import clamp_prio

log = logging.getLogger(__name__)


def job_matches_slot(job: classad2.ClassAd, slot: classad2.ClassAd) -> bool:
    """True when the job's Requirements accept the slot and the slot's START accepts the job."""
    return matches(job, slot)


def slot_name(slot: classad2.ClassAd) -> str:
    """The slot's Name (what a claimed job records as RemoteHost)."""
    value = slot.get("Name")
    return value if isinstance(value, str) and value else "unnamed-slot"


def ad_bool(ad: classad2.ClassAd, name: str, default: bool) -> bool:
    """Attribute `name` evaluated in `ad` as a boolean; `default` when absent or not boolean."""
    if name not in ad:
        return default
    try:
        return as_bool(evaluate_attr(ad, name), default)
    except AdError:
        return default


def ad_prio(ad: classad2.ClassAd) -> int:
    """JobPrio evaluated in `ad`, clamped for ordering; 0 when absent or not a number."""
    if "JobPrio" not in ad:
        return 0
    try:
        value: Any = as_number(evaluate_attr(ad, "JobPrio"))
    except AdError:
        return 0
    return clamp_prio(value)
