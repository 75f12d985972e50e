"""Pure decisions of the broker: does a job fit a slot, and what do submitted ads say.

The two-sided match of HTCondor: the job's `Requirements` with MY = job and
TARGET = slot, and the slot's `START` with MY = slot and TARGET = job. An
absent expression accepts; undefined or an error refuses.
"""

from __future__ import annotations

import logging
from typing import Any

import classad2

from fetchwork.config.ads import as_bool, as_number, evaluate_attr
from fetchwork.errors import AdError

from .states import clamp_prio

log = logging.getLogger(__name__)


def _accepts(ad: classad2.ClassAd, name: str, target: classad2.ClassAd) -> bool:
    if name not in ad:
        return True
    try:
        return as_bool(evaluate_attr(ad, name, target))
    except AdError as exc:
        log.debug("%s does not evaluate: %s", name, exc)
        return False


def job_matches_slot(job: classad2.ClassAd, slot: classad2.ClassAd) -> bool:
    """True when the job's Requirements accept the slot and the slot's START accepts the job."""
    return _accepts(job, "Requirements", slot) and _accepts(slot, "START", job)


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
