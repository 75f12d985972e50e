"""Claiming: match idle jobs against a slot in priority order, then claim one atomically.

Candidates are read from the idle set in batches (small first, growing up to
BROKER_CLAIM_SCAN_BATCH), paging by score so a long run of jobs that do not
match is walked to its end. The first match is claimed by claim.lua, which
succeeds only while the job is still idle; a lost race moves on to the next
candidate. With `wait_s` > 0 and nothing claimable, the claimer blocks on
the event stream (XREAD BLOCK) from the last event seen before the scan and
scans again when a job became IDLE, until the deadline: no busy polling.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

import classad2
import msgpack

from fetchwork.config.ads import from_dict
from fetchwork.errors import AdError

from . import codec
from .matching import job_matches_slot, slot_name
from .store import Store

log = logging.getLogger(__name__)

FIRST_BATCH = 8
# Matched candidates offered to one claim.lua call: fewer round trips lost
# when many slots race for the head of the queue.
CLAIM_GROUP = 4
GROWTH = 4
# Longest single XREAD BLOCK (the wait loops until its deadline): well inside
# a client's socket timeout (redis-py's default is 5 s).
MAX_BLOCK_MS = 2000


class Claimer:
    """Claims jobs of one pool for slots; leases last `default_lease_s` unless the job
    says JobLeaseDuration; scans read at most `scan_batch` idle jobs at a time."""

    def __init__(self, store: Store, default_lease_s: float, scan_batch: int):
        self.store = store
        self.default_lease_s = default_lease_s
        self.scan_batch = scan_batch

    def claim(self, slot_ad: classad2.ClassAd | Mapping[str, Any],
              wait_s: float = 0.0) -> classad2.ClassAd | None:
        slot = slot_ad if isinstance(slot_ad, classad2.ClassAd) else from_dict(slot_ad)
        name = slot_name(slot)
        if wait_s <= 0:
            return self._scan(slot, name)
        deadline = time.monotonic() + wait_s
        last_id = self.store.last_event_id()
        while True:
            job = self._scan(slot, name)
            if job is not None:
                return job
            next_id = self._wait_for_idle(last_id, deadline)
            if next_id is None:
                return None
            last_id = next_id

    def _scan(self, slot: classad2.ClassAd, name: str) -> classad2.ClassAd | None:
        keys = self.store.keys
        client = self.store.client
        low: str = "-inf"
        batch = FIRST_BATCH
        while True:
            rows = client.zrangebyscore(keys.idle, low, "+inf", start=0, num=batch,
                                        withscores=True)
            if not rows:
                return None
            ids = [codec.text(member) for member, _score in rows]
            matched: list[str] = []
            for job_id, data in self.store.hashes(ids):
                if self._fits(job_id, data, slot):
                    matched.append(job_id)
                if len(matched) == CLAIM_GROUP:
                    claimed = self._claim_first(matched, name)
                    if claimed is not None:
                        return claimed
                    matched = []
            if matched:
                claimed = self._claim_first(matched, name)
                if claimed is not None:
                    return claimed
            if len(rows) < batch:
                return None
            low = f"({rows[-1][1]!r}"
            batch = min(batch * GROWTH, max(self.scan_batch, FIRST_BATCH))

    @staticmethod
    def _fits(job_id: str, data: dict[str, Any], slot: classad2.ClassAd) -> bool:
        try:
            job = from_dict(data)
        except AdError as exc:
            log.warning("skipping job %s: unreadable ad: %s", job_id, exc)
            return False
        return job_matches_slot(job, slot)

    def _claim_first(self, job_ids: list[str], name: str) -> classad2.ClassAd | None:
        """claim.lua on matched candidates: the first one still idle is ours."""
        token = uuid.uuid4().hex
        reply = self.store.run("claim", job_ids,
                                [token, name, str(self.default_lease_s), *job_ids])
        if reply is None:
            return None
        job_id, flat = msgpack.unpackb(reply, raw=True)
        log.debug("job %s claimed by %s", job_id.decode(), name)
        return from_dict(codec.decode_flat(flat))

    def _wait_for_idle(self, last_id: str, deadline: float) -> str | None:
        """Block until an event shows a job becoming IDLE; its id, or None at the deadline."""
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                return None
            events = self.store.events(last_id, block_ms=min(remaining_ms, MAX_BLOCK_MS),
                                        count=100)
            for event_id, fields in events:
                last_id = event_id
                if fields.get("state") == "IDLE":
                    # Read on to the newest event before scanning again.
                    return self._newest(last_id)

    def _newest(self, last_id: str) -> str:
        while True:
            more = self.store.events(last_id, count=1000)
            if not more:
                return last_id
            last_id = more[-1][0]
