"""The slot ads the reference hooks publish for `fetchwork status`, and withdraw.

A slot ad is published when it changed, and again after a third of
SLOT_AD_LIFETIME so it never lapses while its startd lives; a startd that
exits withdraws it at once. `connect` is the caller's broker client getter,
called only when the broker must be written to.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.config.loader import get_config
from fetchwork.errors import FetchworkError
from fetchwork.hooks import inprocess, slotadtext

log = logging.getLogger(__name__)

# Slot ad attributes that change without the slot changing (clocks, load, the
# job of the moment, the machine's count of running jobs, which moves with each
# job of any slot: about one fetch in four with two slots); a slot ad that
# differs only in these is not published again. Backfill reads none of them
# from a published ad (broker/backfill/pool.py takes the count as 0).
_VOLATILE = frozenset(name.lower() for name in (
    "MyCurrentTime", "LoadAvg", "TotalLoadAvg", "EnteredCurrentState", "EnteredCurrentActivity",
    "JobId", "JobStart", "CurrentRank", "FetchworkRunningJobs"))
_published: dict[str, tuple[str, float]] = {}
_published_lock = threading.Lock()


def forget() -> None:
    """Forget what was published (after a configuration reload, or in tests)."""
    with _published_lock:
        _published.clear()


def text_shape(text: str) -> str:
    """What `publish` compares of a slot ad, from the text it was parsed from: reading
    its expressions back out of the ad would make an ExprTree object each, which
    classad2 never gives back (the fetch hook publishes at every fetch)."""
    found = []
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        key = name.strip().lower()
        if sep and key and key not in _VOLATILE:
            found.append(f"{key}={value.strip()}")
    return "\n".join(sorted(found))


def publish(slot_ad: classad2.ClassAd, config: Any, connect: Callable[[], Any],
            text: str | None = None) -> None:
    """Show the slot to `fetchwork status` for SLOT_AD_LIFETIME seconds: when it
    changed, and again after a third of that lifetime, so it never lapses. `text`:
    the text `slot_ad` was parsed from, when it is at hand."""
    name = slot_ad.get("Name")
    if not isinstance(name, str):
        return
    lifetime_s = config.get_duration_s("SLOT_AD_LIFETIME")
    shape = text_shape(text) if text is not None else slotadtext.shape(
        slot_ad, lambda ad: "\n".join(sorted(
            f"{key.lower()}={ads.attr_text(ad, key)}" for key in ad.keys()
            if key.lower() not in _VOLATILE)))
    now = time.monotonic()
    with _published_lock:
        last = _published.get(name)
        if last is not None and last[0] == shape and now - last[1] < lifetime_s / 3:
            return
    connect().publish_slot(slot_ad, lifetime_s)
    with _published_lock:
        _published[name] = (shape, now)


def publish_running_slot(job_ad: classad2.ClassAd, job_id: str,
                         connect: Callable[[], Any]) -> None:
    """A busy slot seldom fetches; the starter's machine ad, marked busy with
    this job, keeps it visible between fetches."""
    call = inprocess.current_call()  # in-process, the hook's own environment
    path = ((call.env if call is not None and call.env else None) or os.environ).get(
        "_CONDOR_MACHINE_AD")
    if not path or not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as handle:
            slot_ad = ads.parse_ad(handle.read(), source=path)
    except (OSError, FetchworkError) as exc:
        log.debug("cannot read the machine ad %s: %s", path, exc)
        return
    slot_ad["State"] = "Claimed"
    state = job_ad.get("JobState")  # Idle: kept after the command (RunUntilCanceled)
    slot_ad["Activity"] = state if state in ("Suspended", "Idle") else "Busy"
    slot_ad["JobId"] = job_id
    publish(slot_ad, get_config(), connect)


def withdraw(name: str, connect: Callable[[], Any]) -> None:
    """Take slot `name` off `fetchwork status` now; a later publish shows it again."""
    with _published_lock:
        _published.pop(name, None)
    connect().withdraw_slot(name)
