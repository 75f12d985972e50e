"""Resource sorting in a pull model (MATCH_SORT_WINDOW): the best waiting slot gets the job.

The scheduler text sorts candidate nodes by memory, then by processor speed.
Here slots ask for work one at a time, so the sort is a short, bounded
delay: a slot waiting in a long-poll claim registers itself (its ad, with
`Memory` and `Mips`) in the pool's `sortslots` hash until it leaves; a claim
about to take a job first looks for a registered slot that is better (more
Memory, then more Mips) and would take the job too, and if there is one it
gives way, waiting up to MATCH_SORT_WINDOW for that slot to claim the job
(the job's IDLE event woke it) before it takes the job itself. With the
window 0 (the default) nothing registers and nothing waits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import classad2

from fetchwork.broker.backfill.pool import number
from fetchwork.broker.store import Store, codec
from fetchwork.config.ads import from_dict, to_dict
from fetchwork.config.matching import matches
from fetchwork.errors import AdError

log = logging.getLogger(__name__)

# Longest single XREAD BLOCK while giving way.
MAX_BLOCK_MS = 500


def rank(slot: Mapping[str, Any]) -> tuple[float, float]:
    """A slot's place in the text's sort: Memory, then Mips (higher is better)."""
    return number(slot, "Memory") or 0.0, number(slot, "Mips") or 0.0


def better_slots(me: str, my_rank: tuple[float, float],
                 registered: Mapping[str, tuple[float, Mapping[str, Any]]],
                 now_ms: float) -> list[Mapping[str, Any]]:
    """The registered slot ads (not expired, not `me`) that rank above `my_rank`."""
    return [ad for name, (until_ms, ad) in registered.items()
            if name != me and until_ms > now_ms and rank(ad) > my_rank]


class SlotSorting:
    """The registrations and the giving way of one claimer (window in ms; 0: off)."""

    def __init__(self, store: Store, window_ms: float = 0.0):
        self.store = store
        self.window_ms = window_ms

    @property
    def on(self) -> bool:
        return self.window_ms > 0

    def register(self, slot: classad2.ClassAd, name: str, until_s: float) -> None:
        """The slot waits for work until `until_s` (time.monotonic() based deadline)."""
        if not self.on:
            return
        until_ms = (time.time() + max(0.0, until_s - time.monotonic())) * 1000
        self.store.client.hset(self.store.keys.sortslots, name,
                               codec.pack([until_ms, to_dict(slot)]))

    def unregister(self, name: str) -> None:
        if self.on:
            self.store.client.hdel(self.store.keys.sortslots, name)

    def give_way(self, job_id: str, slot: classad2.ClassAd, name: str) -> None:
        """Wait, at most the window, while a better waiting slot may claim `job_id`."""
        if not self.on:
            return
        now_ms = time.time() * 1000
        registered = self._registered(now_ms)
        better = better_slots(name, rank(to_dict(slot)), registered, now_ms)
        if not better or not self._taken_by_any(job_id, better):
            return
        log.debug("slot %s gives way on job %s to a better waiting slot", name, job_id)
        deadline = time.monotonic() + self.window_ms / 1000
        last_id = self.store.last_event_id()
        while self.store.client.zscore(self.store.keys.idle, job_id) is not None:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                return
            for entry_id, _fields in self.store.event_entries(
                    last_id, block_ms=min(left_ms, MAX_BLOCK_MS)):
                last_id = entry_id

    def _registered(self, now_ms: float) -> dict[str, tuple[float, Mapping[str, Any]]]:
        out: dict[str, tuple[float, Mapping[str, Any]]] = {}
        stale = []
        for raw_name, raw in self.store.client.hgetall(self.store.keys.sortslots).items():
            name = codec.text(raw_name)
            try:
                until_ms, ad = codec.unpack(raw)
            except (ValueError, TypeError):
                stale.append(name)
                continue
            if until_ms <= now_ms:
                stale.append(name)
            else:
                out[name] = (float(until_ms), ad)
        if stale:
            self.store.client.hdel(self.store.keys.sortslots, *stale)
        return out

    def _taken_by_any(self, job_id: str, slots: list[Mapping[str, Any]]) -> bool:
        """Whether one of `slots` would take the job (its Requirements, their START)."""
        for _job, data in self.store.hashes([job_id]):
            try:
                job = from_dict(data)
                return any(matches(job, from_dict(ad)) for ad in slots)
            except AdError:
                return False
        return False
