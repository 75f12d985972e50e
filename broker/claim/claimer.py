"""The claim: match idle jobs against a slot in priority order, then claim one atomically.

The claimer owns the whole claim, in two steps over one cache of verdicts
per slot ad and autocluster (claim/index.py SlotVerdicts):

1. The quiet step, the common case in one round trip: a pool with no
   activation filters and no slot sorting window needs no job read before
   its claim. claim_quiet.lua walks the autoclusters with idle jobs best
   first and claims the head of the first one whose representative matches
   the slot for all its jobs, skipping those that cannot match. It answers
   with the autoclusters the claimer has not judged yet when it meets one
   (the claimer judges them and asks again, up to JUDGING_ROUNDS times), and
   hands anything else to the full claim: activation, slot reservations,
   blocks, a head after the job of the leader's backfill reservation, jobs
   to judge one by one, a head the checks hold back.
2. The full claim: candidates are the idle jobs of the autoclusters that
   match the slot (claim/index.py), read in batches (small first, growing up
   to BROKER_CLAIM_SCAN_BATCH) in idle order, paging by score. The first
   matches are offered to claim.lua, which takes the first one still idle; a
   lost race moves on to the next candidates. With `wait_s` > 0 and nothing
   claimable, the claimer blocks on the event stream (XREAD BLOCK) from the
   last event seen before the scan and scans again when a job became IDLE,
   until the deadline: no busy polling. The waiting claims of one client
   share a room (claim/wakeroom.py): one new job is looked for by one of
   them at a time, not by all at once.

Activation (claim/activation.py): the full claim's first read also brings
what the leader's activation filters left for this slot (reservation,
blocks); jobs they hold back are not offered, and a job that claim.lua made
ACTIVATING ends the claim with the leader's verdict: the job, or None.

Backfill (broker/backfill): each candidate also passes the backfill check
against the leader's reservation, which the first read brings already
judged (read_backfill.lua, by the rule claim_quiet.lua applies: a
reservation whose job is no longer idle holds nothing back): a job below
the reserved one is offered only when it does not delay its start. With
MATCH_SORT_WINDOW set, a waiting claim registers its slot, and a claim gives
way to a better waiting slot (more Memory, then Mips) for up to that window.

Scheduling policy (broker/scheduling): with limits set, a slot no IDLE job fits
may take a job BLOCKED only by a soft PS limit (the soft set), as a last
resort; both claim scripts re-check every job's PS budget.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import classad2
import msgpack

from fetchwork.broker.filters.gate import ClaimView, block_floor, group_of, may_offer
from fetchwork.broker.store import Store, calls, codec, eventbatch
from fetchwork.broker.store.jobads import slot_name
from fetchwork.config import latencytrace
from fetchwork.config.ads import from_dict, values_of
from fetchwork.config.keptad import KeptAd
from fetchwork.config.loader import Config
from fetchwork.config.matching import matches
from fetchwork.config.protocol import ad_job_id
from fetchwork.errors import AdError

from .activation import ActivationClaims, is_activation
from .backfill import BackfillCheck
from .index import GroupIndex, GroupWalk, IdleWalk
from .sorting import SlotSorting
from .wakeroom import WakeRoom

log = logging.getLogger(__name__)

FIRST_BATCH = 8
# Matched candidates offered to one claim.lua call: fewer round trips lost
# when many slots race for the head of the queue.
CLAIM_GROUP = 4
GROWTH = 4
# Longest single XREAD BLOCK (the wait loops until its deadline): well inside
# a client's socket timeout (redis-py's default is 5 s).
MAX_BLOCK_MS = 2000
# Stream entries one wake-up reads at most; a read that brings fewer was all there was.
WAKE_COUNT = 100
# Rounds of judging newly met autoclusters before the quiet step leaves the claim
# to the full one.
JUDGING_ROUNDS = 4
_scratch = threading.local()
# A claimed job as the store holds it (codec.decode_flat), or None.
Job = dict[str, Any] | None


class Claimer:
    """Claims jobs of one pool for slots; leases last `default_lease_s` unless the job
    says JobLeaseDuration; scans read at most `scan_batch` idle jobs at a time."""

    def __init__(self, store: Store, default_lease_s: float, scan_batch: int,
                 soft_tier: bool = False, backfill: BackfillCheck | None = None,
                 sorting: SlotSorting | None = None):
        self.store = store
        # The check of each candidate against the leader's backfill reservation.
        self.backfill = backfill or BackfillCheck()
        # MATCH_SORT_WINDOW: a waiting claim registers its slot; a claim gives way to
        # a better waiting slot before it takes a job (off by default).
        self.sorting = sorting or SlotSorting(store)
        self.default_lease_s = default_lease_s
        self.scan_batch = scan_batch
        self.activation = ActivationClaims(store)
        self.groups = GroupIndex(store)
        # The waiting claims of this client, woken one look per new job (wakeroom.py).
        self.room = WakeRoom()
        # The autoclusters claim_quiet.lua last named (best first): a new slot ad
        # judges them before its first call, which then usually needs no second one.
        self._named: list[str] = []
        # Scheduling policy limits are set: scan the soft set when nothing else fits.
        self.soft_tier = soft_tier

    @classmethod
    def from_config(cls, store: Store, default_lease_s: float, config: Config,
                    soft_tier: bool) -> Claimer:
        """A claimer with the configured scan batch, backfill check and resource sorting."""
        return cls(store, default_lease_s, max(1, config.get_int("BROKER_CLAIM_SCAN_BATCH")),
                   soft_tier=soft_tier, backfill=BackfillCheck.from_config(config),
                   sorting=SlotSorting(store, config.get_float("MATCH_SORT_WINDOW")))

    def claim(self, slot_ad: classad2.ClassAd | Mapping[str, Any],
              wait_s: float = 0.0) -> classad2.ClassAd | None:
        """The job claimed for `slot_ad` as a ClassAd, or None (see claim_attrs)."""
        attrs = self.claim_attrs(slot_ad, wait_s)
        return None if attrs is None else from_dict(attrs)

    def claim_attrs(self, slot_ad: classad2.ClassAd | Mapping[str, Any],
                    wait_s: float = 0.0) -> dict[str, Any] | None:
        """The job claimed for `slot_ad` as its stored values (expressions as
        {"$expr": text}), or None when there is none within `wait_s` seconds. A
        long-running caller that only passes the ad on (a fetch hook) makes no
        ClassAd of each job: classad2 keeps a little memory of every one."""
        slot = slot_ad if isinstance(slot_ad, classad2.ClassAd) else from_dict(slot_ad)
        name = slot_name(slot)
        deadline = time.monotonic() + wait_s
        job, final = self._find(slot, name)
        if job is not None or final or wait_s <= 0:
            return job
        # Nothing now: note where the event stream is, then look once more (a job
        # that became idle between the two is found by that look, not waited for).
        # A busy queue claims at the first look and never reads the stream.
        last_id = self.store.last_event_id()
        look: int | None = None
        try:
            while True:
                job, final = self._find(slot, name)
                if look is not None:
                    self.room.looked(look, ad_job_id(job) if job is not None else None)
                    look = None
                if job is not None or final:
                    return job
                self.sorting.register(slot, name, deadline)
                woken = self._wait_for_idle(last_id, deadline)
                if woken is None:
                    return None
                last_id, look = woken
        finally:
            if look is not None:  # the look failed: the jobs it was for are still open
                self.room.looked(look, None)
            self.sorting.unregister(name)

    def _find(self, slot: classad2.ClassAd, name: str) -> tuple[Job, bool]:
        """The quiet step first, in one call; then the scan of the idle set; then, with
        the soft tier, of the soft set (with the activation view the first read
        brought)."""
        if not self.sorting.on:
            decided, job = self._quiet(slot, name)
            if decided and (job is not None or not self.soft_tier):
                return job, False
        rows, view, groups = self.activation.first_read(name, FIRST_BATCH, self.groups.read)
        walk = self.groups.walk(slot, rows, groups[0])
        claimed = self._scan(slot, name, walk.rows_after(None, FIRST_BATCH), view, walk)
        if claimed != (None, False) or not self.soft_tier:
            return claimed
        rows = self.store.scored(self.store.keys.soft, count=max(self.scan_batch, FIRST_BATCH))
        return self._offer(rows, slot, name, view, last_resort=True) if rows else claimed

    def _quiet(self, slot: classad2.ClassAd, name: str) -> tuple[bool, Job]:
        """The quiet step: (whether it decided, the job claimed); not decided: the full
        claim must."""
        verdicts = self.groups.verdicts(slot)
        if not any(verdicts.args()) and self._named:
            self.groups.judge(slot, self._named)
        for _round in range(JUDGING_ROUNDS):
            matching, refusing, judged = verdicts.args()
            reply = calls.claim_quiet(self.store, token=uuid.uuid4().hex, slot=name,
                                      default_lease_s=self.default_lease_s, matching=matching,
                                      refusing=refusing, judged=judged)
            if reply == b"none":
                return True, None
            if not isinstance(reply, list):
                return False, None
            if reply[0] == b"job":
                _job_id, flat = msgpack.unpackb(reply[1], raw=True)
                return True, codec.decode_flat(flat)
            unknown = self._named = [codec.text(gid) for gid in reply[1:]]
            if not self.groups.judge(slot, unknown):
                return False, None
        return False, None

    def _scan(self, slot: classad2.ClassAd, name: str, rows: list[tuple[bytes, float]],
              view: ClaimView, walk: GroupWalk | IdleWalk
              ) -> tuple[Job, bool]:
        """(the claimed job or None, whether an activation verdict ended the claim), from
        the first `rows` of the walk on."""
        batch = FIRST_BATCH
        if not view.quiet:
            return self._scan_held_back(slot, name, view, rows, walk)
        while True:
            if not rows:
                return None, False
            claimed = self._offer(rows, slot, name, view, prechecked=walk.prechecked)
            if claimed != (None, False) or len(rows) < batch \
                    or self.backfill.all_held_back(rows[-1][1], view.backfill):
                return claimed
            batch = min(batch * GROWTH, max(self.scan_batch, FIRST_BATCH))
            rows = walk.rows_after(rows[-1][1], batch)

    def _scan_held_back(self, slot: classad2.ClassAd, name: str, view: ClaimView,
                        rows: list[tuple[bytes, float]], walk: GroupWalk | IdleWalk
                        ) -> tuple[Job, bool]:
        """The scan when activation may hold jobs back: a reserved slot looks at its job
        only; past the first blocked priority group, only the blockers remain; jobs
        reserved for other slots or not due for evaluation are passed over."""
        client, keys = self.store.client, self.store.keys
        if view.reserved_job is not None:
            score = client.zscore(keys.idle, view.reserved_job)
            rows = [] if score is None else [(view.reserved_job.encode(), score)]
            return self._offer(rows, slot, name, view) if rows else (None, False)
        floor = block_floor(view)
        batch = FIRST_BATCH
        while rows:
            before = [row for row in rows if floor is None or group_of(row[1]) < floor]
            claimed = (self._offer(before, slot, name, view, prechecked=walk.prechecked)
                       if before else (None, False))
            if claimed != (None, False):
                return claimed
            if len(before) < len(rows) or len(rows) < batch:
                break
            batch = min(batch * GROWTH, max(self.scan_batch, FIRST_BATCH))
            rows = walk.rows_after(rows[-1][1], batch)
        blockers = [job for job, _group in view.blocks]
        scores = client.zmscore(keys.idle, blockers) if blockers else []
        rows = [(job.encode(), score) for job, score in zip(blockers, scores, strict=True)
                if score is not None]
        return self._offer(sorted(rows, key=lambda row: row[1]), slot, name, view)

    def _offer(self, rows: list[tuple[bytes, float]], slot: classad2.ClassAd, name: str,
               view: ClaimView, last_resort: bool = False, prechecked: set[str] | None = None
               ) -> tuple[Job, bool]:
        """Offer the matching jobs among `rows` to claim.lua, a few at a time (jobs in
        `prechecked` matched through their autocluster)."""
        reservation = self.backfill.reservation_of(view.backfill)
        offerable = self.backfill.offerable(rows, reservation, last_resort)
        scores = {codec.text(member): score for member, score in offerable}
        now_ms = time.time() * 1000
        matched: list[str] = []
        for job_id, data in self.store.hashes(list(scores)):
            if view.quiet or may_offer(job_id, data, scores[job_id], view, name, now_ms):
                order = None if last_resort else scores[job_id]
                allowed = self.backfill.verdict(job_id, data, order, name, reservation,
                                                now_ms / 1000).allowed
                if allowed and ((prechecked and job_id in prechecked)
                                or self._fits(job_id, data, slot)):
                    matched.append(job_id)
            if len(matched) == CLAIM_GROUP:
                claimed = self._claim_first(matched, slot, name, view, last_resort)
                if claimed != (None, False):
                    return claimed
                matched = []
        if matched:
            return self._claim_first(matched, slot, name, view, last_resort)
        return None, False

    @staticmethod
    def _fits(job_id: str, data: dict[str, Any], slot: classad2.ClassAd) -> bool:
        # One kept ad per thread, loaded with each candidate in place: classad2 keeps
        # a little memory of every ad made, and a claim may read many candidates.
        job = getattr(_scratch, "ad", None)
        if job is None:
            job = _scratch.ad = KeptAd()
        try:
            job.load(values_of(data))
        except AdError as exc:
            log.warning("skipping job %s: unreadable ad: %s", job_id, exc)
            return False
        return matches(job, slot)

    def _claim_first(self, job_ids: list[str], slot: classad2.ClassAd, name: str,
                     view: ClaimView, last_resort: bool = False
                     ) -> tuple[Job, bool]:
        """claim.lua on matched candidates: the first one still idle is ours (or, with an
        activation chain, the leader's verdict on it decides, and ends the claim)."""
        self.sorting.give_way(job_ids[0], slot, name)
        token = uuid.uuid4().hex
        reply = calls.claim(self.store, job_ids=job_ids, token=token, slot=name,
                            default_lease_s=self.default_lease_s,
                            slot_ad=self.activation.slot_ad_arg(view, slot),
                            last_resort=last_resort)
        if reply is None:
            return None, False
        job_id, flat = msgpack.unpackb(reply, raw=True)
        if is_activation((job_id, flat)):
            ad = self.activation.await_verdict(job_id.decode(), token, view.summary.wait_ms)
            return ad, True
        log.debug("job %s claimed by %s", job_id.decode(), name)
        return codec.decode_flat(flat), False

    def _wait_for_idle(self, last_id: str, deadline: float) -> tuple[str, int | None] | None:
        """Block until an event shows a job becoming IDLE and the claim is to look again:
        (the id to wait from next, the room's number of the look, None without the
        room), or None at the deadline. With the room (no MATCH_SORT_WINDOW, under
        which a claim gives way to a better waiting slot, which must then look too),
        a wake-up whose jobs the process's other woken claims took waits again."""
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                return None
            # Entries, not events: the jobs an entry names share its state, and the
            # events of a submission of N jobs are N dicts made at once by each
            # waiting slot's fetch (in a startd, Python's heap keeps their room).
            entries = self.store.event_entries(
                last_id, block_ms=min(remaining_ms, MAX_BLOCK_MS), count=WAKE_COUNT)
            if not entries:
                continue
            last_id = entries[-1][0]
            idle = [(entry_id, fields) for entry_id, fields in entries
                    if fields.get("state") == "IDLE"]
            if not idle:
                continue
            latencytrace.mark("claim.woken")
            # A full read may have more behind it: read on to the newest entry before
            # scanning again. A short one was all there was: the scan that follows sees
            # what it showed, with no round trip first.
            complete = len(entries) < WAKE_COUNT
            if not complete:
                last_id = self._newest(last_id)
            if self.sorting.on:
                return last_id, None
            # The room weighs one job's entries; an entry naming a batch of jobs has
            # work for every waiting claim, which then looks as without the room.
            named = [(entry_id, fields.get("job", "")) for entry_id, fields in idle
                     if eventbatch.JOBS_FIELD not in fields]
            look = self.room.woken(named, complete and len(named) == len(idle), deadline)
            if look is not None:
                return last_id, look

    def _newest(self, last_id: str) -> str:
        while True:
            more = self.store.event_entries(last_id, count=1000)
            if not more:
                return last_id
            last_id = more[-1][0]
