"""Claiming: match idle jobs against a slot in priority order, then claim one atomically.

Idle jobs are grouped into autoclusters (autoclusters.py): the claimer reads
the groups in the order of their best job, evaluates one representative per
group (each member instead when the slot's START reads a job attribute the
groups do not hold) and offers the head of the first group that matches to
claim.lua, so a claim costs the same behind 100,000 jobs the slot does not
match as behind none. Idle jobs in no group (queued before groups existed)
are matched by the scan of the idle set below.

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

from . import autoclusters, codec
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
    says JobLeaseDuration; scans read at most `scan_batch` idle jobs at a time;
    `significant_attrs` are ADD_SIGNIFICANT_ATTRIBUTES."""

    def __init__(self, store: Store, default_lease_s: float, scan_batch: int,
                 significant_attrs: tuple[str, ...] = ()):
        self.store = store
        self.default_lease_s = default_lease_s
        self.scan_batch = scan_batch
        # Representatives never change for a group id (it is their digest).
        self._reps: dict[str, classad2.ClassAd | None] = {}
        self._common = (*autoclusters.SIGNIFICANT_ATTRS, *significant_attrs)

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
        pipe = self.store.client.pipeline(transaction=False)
        pipe.zrange(keys.ac_groups, 0, -1)
        pipe.zcard(keys.idle)
        pipe.zcard(keys.ac_members)
        groups, idle_count, grouped_count = pipe.execute()
        job = self._scan_groups(slot, name, self.store.ids(groups))
        if job is None and idle_count > grouped_count:
            job = self._scan_idle(slot, name)
        return job

    def _scan_groups(self, slot: classad2.ClassAd, name: str,
                     gids: list[str]) -> classad2.ClassAd | None:
        """The head of the first group, in the order of their best jobs, that fits the slot."""
        self._load_reps([gid for gid in gids if gid not in self._reps])
        by_representative = autoclusters.start_reads_only(slot, self._common)
        for gid in gids:
            rep = self._reps.get(gid)
            if rep is None:
                continue
            if by_representative and not job_matches_slot(rep, slot):
                continue
            job = self._claim_in_group(gid, slot, name, by_representative)
            if job is not None:
                return job
        return None

    def _load_reps(self, gids: list[str]) -> None:
        if not gids:
            return
        for gid, raw in zip(gids, self.store.client.hmget(self.store.keys.ac_reps, gids),
                            strict=True):
            try:
                self._reps[gid] = from_dict(codec.unpack(raw)) if raw is not None else None
            except (AdError, ValueError) as exc:
                log.warning("autocluster %s has an unreadable representative: %s", gid, exc)
                self._reps[gid] = None

    def _claim_in_group(self, gid: str, slot: classad2.ClassAd, name: str,
                        by_representative: bool) -> classad2.ClassAd | None:
        """Claim the group's best job that fits (each member checked when START reads more)."""
        low = f"[{gid}{autoclusters.SEPARATOR}"
        high = f"[{gid}{autoclusters.SEPARATOR}~"
        batch = CLAIM_GROUP if by_representative else FIRST_BATCH
        while True:
            rows = self.store.client.zrangebylex(self.store.keys.ac_members, low, high,
                                                 start=0, num=batch)
            if not rows:
                return None
            ids = [autoclusters.parse_member(codec.text(row))[2] for row in rows]
            if not by_representative:
                ids = [job_id for job_id, data in self.store.hashes(ids)
                       if self._fits(job_id, data, slot)]
            claimed = self._claim_first(ids, name) if ids else None
            if claimed is not None:
                return claimed
            # Other slots took those first (or none fit): the group's next ones.
            if len(rows) < batch:
                return None
            low = f"({codec.text(rows[-1])}"
            batch = min(batch * GROWTH, max(self.scan_batch, FIRST_BATCH))

    def _scan_idle(self, slot: classad2.ClassAd, name: str) -> classad2.ClassAd | None:
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
