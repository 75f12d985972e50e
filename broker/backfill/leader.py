"""The leader's backfill pass: compute the reservation, store it, count bypasses.

Each pass reads the published slot ads (the machines), the running jobs
(what each machine has busy, until when) and the head of the idle set, best
first, in growing batches until the job to reserve for is found (at most
plan.DEPTH jobs). A job's machines are those with a slot whose ideal ad (as
configured, nothing running) its Requirements and the slot's START accept.
The reservation goes into the pool's `backfill` key (msgpack), where claims
read it in their first round trip; no reservation, no key. A pass first
asks whether any idle job waits behind a busy pool at all (waiting.py: the
head of the idle set stayed the head for a second, or a claim passed a job
over); while none does (a queue that flows) it reads nothing
more and no reservation stands.

Bypasses: the transition events since the previous pass are read first;
every job that started meanwhile and was neither the reserved job nor one of
the idle jobs ahead of it (or passed over, fitting no machine) is a lower job
started ahead of the reserved one, which then gains as much `BypassCount`
(bypass.lua) while it is still idle.

The backfill pass is one of the leader's duties (leader/duty.py): the
leader's reader hands it the events, and a pass is due at once on taking
the lead, after transitions (at most every BACKFILL_MIN_INTERVAL, at once
on an event about the reserved job: `next_pass_at`) and at least every
POLICY_INTERVAL. The events are read only while they matter
(`reads_events`): while a reservation stands, or the idle set is empty
(a new job is passed at once). While jobs flow past a head that no
reservation holds, no event is read: a pass comes every
BACKFILL_MIN_INTERVAL, tells a pass-over from its looks (waiting.py), and
reads afresh the hashes it caches, since no event named the changed ones.
`run_pass` is a pass on its own: it reads the events since the last one
itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import classad2

from fetchwork.broker.autoclusters import signature, start_job_reads
from fetchwork.broker.store import Store, calls, codec
from fetchwork.broker.store.states import State
from fetchwork.config.ads import from_dict
from fetchwork.config.matching import matches
from fetchwork.errors import AdError

from .plan import DEPTH, Machine, Plan, Reservation, Running, Waiting, plan, to_record
from .pool import ideal_slots_by_machine, machines_of, running_of, waiting_of
from .waiting import SETTLE_S, WINDOW, Look, left_behind, look

log = logging.getLogger(__name__)

FIRST_BATCH = 16
EVENTS_READ = 1000
# The served passes come at most this often without an event, whatever POLICY_INTERVAL says.
MIN_PERIOD_S = 0.05
# An unchanged reservation is written again after this many seconds (another leader
# may have written its own meanwhile).
RESTORE_S = 1.0
# Longest a reservation outlives the moment its job could start (seconds).
STICKY_S = 2.0
# Seconds between full reads of the running jobs (between them, only new ones are read).
RUNNING_REFRESH_S = 10.0
# Seconds between full reads of the idle head (between them, a job is read again only
# after an event about it).
IDLE_REFRESH_S = 10.0


class BackfillLeader:
    """Computes the reservation of one pool while this replica leads."""

    name = "backfill"

    def __init__(self, store: Store, default_walltime_s: float, min_interval_s: float = 0.0,
                 interval_s: float = 5.0, settle_s: float | None = None):
        self.store = store
        self.default_walltime_s = default_walltime_s
        self.min_interval_s = min_interval_s
        self.interval_s = interval_s
        # How long the head of the idle set stays the head before it is known to wait
        # (waiting.py): SETTLE_S, or BACKFILL_MIN_INTERVAL when that is longer.
        self.settle_s = max(min_interval_s, SETTLE_S) if settle_s is None else settle_s
        # Served: when the last pass ended (monotonic; None: one is due), whether a
        # transition came since, and whether one was about the reserved job.
        self._passed_at: float | None = None
        self._pending = False
        self._urgent = False
        self._last_event: str | None = None
        self._started: list[str] = []  # jobs started since the last pass (read, not counted)
        self._stored_at = -RESTORE_S  # monotonic time the reservation was last written
        self._startable_since: float | None = None  # the reserved job could start since
        self._running_known: dict[str, Running | None] = {}
        self._running_read_at = -RUNNING_REFRESH_S
        self._idle_known: dict[str, dict[str, Any]] = {}  # the idle head's hashes
        self._idle_read_at = -IDLE_REFRESH_S
        self._reservation: Reservation | None = None
        self._not_bypass: frozenset[str] = frozenset()
        self.last_plan: Plan | None = None
        # The cheap question (waiting.py): the last look at the idle head, the jobs
        # started and those named by any transition since, and when a head seen
        # without a reservation has waited long enough for one (monotonic; None: none).
        self._look = Look()
        self._seen_started: set[str] = set()
        self._named: set[str] = set()
        self._settle_at: float | None = None
        # Whether this replica leads (an on_lead while it does is a hand-over of the
        # events, not a new lead), and whether some of the time since the last look
        # went without events (the look then reads the states of the jobs it needs).
        self._leading = False
        self._blind = True
        # Called when the events become worth reading (set by the leader's reader, so
        # it hands them over at once rather than after its wait).
        self.reading_changed: Callable[[], None] = lambda: None

    @classmethod
    def from_config(cls, store: Store, config: Any) -> BackfillLeader:
        return cls(store, config.get_duration_s("DEFAULT_JOB_WALLTIME"),
                   config.get_duration_s("BACKFILL_MIN_INTERVAL"),
                   config.get_duration_s("POLICY_INTERVAL"))

    @property
    def reads_events(self) -> bool:
        """Whether the transitions are worth reading: while a reservation stands (its
        bypasses, an event about its job), while the idle head is empty (a new job's
        pass comes at once) or has stayed the head for the settle time (the queue does
        not flow: events are few, and each brings a pass), or with no minimum
        interval; not while jobs flow past a head that no reservation holds: a pass
        then comes every BACKFILL_MIN_INTERVAL, and tells a pass-over from its looks
        (waiting.py)."""
        return (self._reservation is not None or not self._look.ids
                or self.min_interval_s <= 0
                or time.monotonic() - self._look.head_since >= self.settle_s)

    @property
    def events_batch_s(self) -> float:
        """How long the leader's reader may let events gather for this duty: while no
        reservation stands, up to BACKFILL_MIN_INTERVAL (the passes come no oftener);
        while one stands, none (an event about its job brings a pass at once)."""
        return 0.0 if self._reservation is not None else self.min_interval_s

    def is_backfill_start(self, job_id: str, order: float | None = None) -> bool:
        """Whether starting `job_id` (at idle score `order`, when known) now starts a
        lower job ahead of the reserved one. A job whose score comes before the
        reserved job's is never one (plan.decide's rule): a job under evaluation is
        out of the idle set, so a pass that ran meanwhile did not list it ahead."""
        reservation = self._reservation
        if order is not None and reservation is not None and order < reservation.order:
            return False
        return (reservation is not None and job_id != reservation.job_id
                and job_id not in self._not_bypass)

    # -- as a duty of the leader (leader/duty.py) ---------------------------------------

    def on_lead(self, since: str) -> None:
        """Count from `since`, and read afresh what another leader may have changed
        meanwhile (its own reservation is written over at the next pass). While this
        replica leads already, the reader hands the events over from `since` (they
        became worth reading, or the inbox dropped some): the pass comes as after an
        event, and the look after it reads the states it needs."""
        if self._leading:
            self._last_event, self._started = since, []
            self._pending, self._blind = True, True
            return
        self._leading, self._blind = True, True
        self._last_event = since
        self._started = []
        self._running_known, self._running_read_at = {}, -RUNNING_REFRESH_S
        self._idle_known, self._idle_read_at = {}, -IDLE_REFRESH_S
        self._stored_at = -RESTORE_S
        self._passed_at = None
        self._look, self._seen_started, self._named = Look(), set(), set()
        self._settle_at = None

    def on_lose(self) -> None:
        self._started = []
        self._leading = False

    def on_events(self, events: Sequence[tuple[str, dict[str, str]]]) -> None:
        """Take a batch; an event about the reserved job itself (it started, or left
        the queue) makes the pass due at once: a claim judges every job behind it by
        the reservation, and one whose job is no longer waiting would hold them all
        back until the next pass."""
        self._pending = True
        if self._take(events):
            self._urgent = True

    def due_in_s(self, now_s: float) -> float:
        if self._passed_at is None or self._urgent:
            return 0.0
        interval_s = max(MIN_PERIOD_S, self.interval_s)
        # Reading no event, a pass comes as if one came: jobs flow past the head.
        pending = self._pending or not self.reads_events
        due_at = next_pass_at(self._passed_at, interval_s, self.min_interval_s, pending)
        if self._settle_at is not None:
            due_at = min(due_at, self._settle_at)
        return max(0.0, due_at - now_s)

    def run_due(self, now_s: float) -> Plan:
        """A pass over the events taken since the last one (the reader handed them);
        the next is timed from this one's end (`next_pass_at`)."""
        result = self._pass(ask=True)
        self._passed_at, self._pending, self._urgent = time.monotonic(), False, False
        return result

    def close(self) -> None:
        pass

    def run_pass(self, now: float | None = None) -> Plan:
        """One pass on its own: read the events since the last pass, count the bypasses
        among them, then compute and store the reservation; `now` is Unix time."""
        self._read_events()
        return self._pass(now)

    def _pass(self, now: float | None = None, ask: bool = False) -> Plan:
        """Count the bypasses among the events taken, then compute and store the
        reservation; with `ask` (the served passes), only when an idle job waits
        behind a busy pool (`_waits`), else whenever a job is idle."""
        now = time.time() if now is None else now
        self._count_bypasses()
        blind = self._blind
        if self._waits() if ask else self.store.client.zcard(self.store.keys.idle):
            if blind:  # no event named the jobs that changed: read them all again
                self._idle_known, self._idle_read_at = {}, -IDLE_REFRESH_S
                self._running_known, self._running_read_at = {}, -RUNNING_REFRESH_S
            slots = self._slot_ads()
            machines = machines_of(slots)
            ideal = {machine: [ad for ad in (_ad(one) for one in ads) if ad is not None]
                     for machine, ads in ideal_slots_by_machine(slots).items()}
            running = self._running(now)
            result = self._plan(machines, ideal, running, now, _MachineMemo(ideal))
        else:
            result = Plan(None)  # no job waits behind a busy pool: nothing to reserve
        # What claims see: the plan, or a reservation kept while its job has yet to start.
        standing = self._sticky(result, time.monotonic())
        self._store(standing.reservation)
        self._reservation = standing.reservation
        self._not_bypass = frozenset(standing.ahead) | frozenset(standing.unplaceable)
        self.last_plan = result
        reads = self.reads_events
        if reads and self._blind:
            self.reading_changed()
        self._blind = not reads
        return result

    def _waits(self) -> bool:
        """Whether an idle job waits behind a busy pool (waiting.py), from one read
        of the idle head; when the head is not yet known to wait, the pass after
        BACKFILL_MIN_INTERVAL is due even without an event."""
        ids = self.store.ids(self.store.client.zrange(self.store.keys.idle, 0, WINDOW - 1))
        mono = time.monotonic()
        started, named = self._seen_started, self._named
        if self._blind:
            started, named = self._left(ids)
        self._look, waits = look(self._look, ids, started, named, mono, self.settle_s)
        self._seen_started, self._named = set(), set()
        self._settle_at = None
        if ids and not waits:
            self._settle_at = self._look.head_since + self.settle_s
        return waits

    def _left(self, ids: list[str]) -> tuple[set[str], set[str]]:
        """(started, named) between the last look and `ids` when no event told: every
        job gone from the head was named; those gone from behind a job still there are
        read, and count as started unless they are idle, held or gone."""
        before = self._look.ids
        named = set(before) - set(ids)
        behind = left_behind(before, ids)
        if not behind:
            return set(), named
        states = [row[0] for row in self.store.fields(behind, ["FetchworkState"])]
        return {job for job, state in zip(behind, states, strict=True)
                if state in _STARTED}, named

    def _sticky(self, result: Plan, now_mono: float) -> Plan:
        """A reserved job the new plan would start at once keeps its reservation until
        it starts, for at most STICKY_S: the slots that freed for it may not have asked
        yet, and a lower job (reserved next, behind it) must not take them first."""
        old = self._reservation
        if old is None or old.job_id not in result.ahead:
            self._startable_since = None
            return result
        if self._startable_since is None:
            self._startable_since = now_mono
        if now_mono - self._startable_since >= STICKY_S:
            return result
        before = result.ahead[:result.ahead.index(old.job_id)]
        return Plan(old, before, result.unplaceable)

    # -- reading ---------------------------------------------------------------

    def _slot_ads(self) -> list[dict[str, Any]]:
        client, keys = self.store.client, self.store.keys
        names = self.store.ids(client.zrangebyscore(keys.slots, int(time.time() * 1000), "+inf"))
        if not names:
            return []
        raws = client.mget([keys.slot(name) for name in sorted(names)])
        return [codec.unpack(raw) for raw in raws if raw is not None]

    def _running(self, now: float) -> list[Running]:
        """The running jobs: each read once when it starts (its machine, start and
        walltime hold while it runs), all read again every RUNNING_REFRESH_S."""
        ids = self.store.ids(self.store.client.zrange(self.store.keys.running, 0, -1))
        known, mono = self._running_known, time.monotonic()
        if mono - self._running_read_at >= RUNNING_REFRESH_S:
            known.clear()
            self._running_read_at = mono
        for gone in set(known) - set(ids):
            del known[gone]
        for job_id, data in self.store.hashes([job for job in ids if job not in known]):
            known[job_id] = running_of(job_id, data, self.default_walltime_s, now)
        return [one for one in (known.get(job) for job in ids) if one is not None]

    def _plan(self, machines: Sequence[Machine], ideal: Mapping[str, list[classad2.ClassAd]],
              running: Sequence[Running], now: float, memo: _MachineMemo) -> Plan:
        """The plan over the idle head, read in growing batches (the order and
        priorities each pass, a job's hash once until an event names it)."""
        waiting: list[Waiting] = []
        batch, offset = FIRST_BATCH, 0
        known = self._idle_head()
        seen: dict[str, dict[str, Any] | None] = {}
        try:
            while True:
                rows = self.store.scored_by_rank(self.store.keys.idle, offset,
                                                 offset + batch - 1)
                offset += len(rows)
                scores = {codec.text(member): score for member, score in rows}
                for job_id, data in self.store.hashes([job for job in scores
                                                       if job not in known]):
                    known[job_id] = data
                for job_id, score in scores.items():
                    ad = seen[job_id] = known.get(job_id)
                    if ad is not None:  # None: removed since the ZRANGE
                        waiting.append(waiting_of(job_id, ad, score, self.default_walltime_s,
                                                  memo.machines_for(ad)))
                result = plan(waiting, machines, running, now)
                if result.reservation is not None or len(rows) < batch or offset >= DEPTH:
                    return result
                batch = min(batch * 4, DEPTH - offset)
        finally:
            # Only the head this pass read stays known.
            self._idle_known = {job: data for job, data in seen.items() if data is not None}

    def _idle_head(self) -> dict[str, dict[str, Any]]:
        """The hashes of the idle head the previous pass read, all forgotten every
        IDLE_REFRESH_S (an edit that no event names is then seen)."""
        mono = time.monotonic()
        if mono - self._idle_read_at >= IDLE_REFRESH_S:
            self._idle_known = {}
            self._idle_read_at = mono
        return self._idle_known

    # -- writing ---------------------------------------------------------------

    def _store(self, reservation: Reservation | None) -> None:
        key = self.store.keys.backfill
        now = time.monotonic()
        if reservation == self._reservation and now - self._stored_at < RESTORE_S:
            return  # unchanged, and written a moment ago
        self._stored_at = now
        if reservation is None:
            self.store.client.delete(key)
            return
        self.store.client.set(key, codec.pack(to_record(reservation)))
        if reservation != self._reservation:
            log.debug("job %s reserved on %s from %.0f", reservation.job_id,
                      reservation.machine, reservation.start_at)

    def _take(self, events: Sequence[tuple[str, dict[str, Any]]]) -> bool:
        """Move past `events`, keeping the starts a reservation in force may count;
        whether one of them is about the reserved job."""
        self._last_event = events[-1][0]
        reserved = self._reservation.job_id if self._reservation is not None else None
        about_reserved = False
        for _id, fields in events:
            job = fields.get("job", "")
            about_reserved = about_reserved or job == reserved
            self._idle_known.pop(job, None)  # it changed: read it again
            self._named.add(job)
            if fields.get("state") != "RUNNING":
                continue
            self._seen_started.add(job)
            self._running_known.pop(job, None)  # a job that started again is read again
            if self._reservation is not None and fields.get("type") == "claim":
                self._started.append(job)
        return about_reserved

    def _read_events(self) -> None:
        """Take every event since the last one taken (none the first time: counting
        starts at the newest)."""
        if self._last_event is None:
            self._last_event = self.store.last_event_id()
            return
        while True:
            events = self.store.events(self._last_event, count=EVENTS_READ)
            if not events:
                break
            self._take(events)

    def _count_bypasses(self) -> None:
        """Starts since the last pass of jobs below the reservation then in force."""
        started, self._started = self._started, []
        reservation = self._reservation
        if reservation is None:
            return
        bypasses = sum(1 for job in started
                       if job != reservation.job_id and job not in self._not_bypass)
        if bypasses:
            grown = calls.bypass(self.store, job_id=reservation.job_id, started_ahead=bypasses)
            if grown:
                log.info("%d job(s) started ahead of reserved job %s (BypassCount %s)",
                         bypasses, reservation.job_id, grown)


def next_pass_at(passed_at: float, interval_s: float, min_interval_s: float,
                 pending: bool) -> float:
    """When the pass after the one that ended at `passed_at` is due: `interval_s`
    later, or, once a transition event is `pending`, `min_interval_s` after that
    pass (at once when that is past). Under a stream of starts and finishes the passes then
    come at most every `min_interval_s`, each counting every event since the last
    one, instead of one pass (some milliseconds of reading) per batch of events;
    HTCondor's NEGOTIATOR_MIN_INTERVAL spaces its negotiation cycles likewise."""
    periodic_at = passed_at + interval_s
    if not pending:
        return periodic_at
    return min(periodic_at, passed_at + min_interval_s)


# The states of a job a claim took (it left the idle set for them, or ran and ended).
_STARTED = frozenset(state.value for state in (State.ACTIVATING, State.RUNNING,
                                               State.SUSPENDED, State.COMPLETED))


class _MachineMemo:
    """`_machines_for` over one pass, once per shape of job: jobs whose significant
    attributes (autoclusters.py, with what the slots' START reads) are equal match the
    same slots. Where a START's reads cannot be told, each job is matched."""

    def __init__(self, ideal: Mapping[str, list[classad2.ClassAd]]):
        self.ideal = ideal
        reads = [start_job_reads(slot) for slots in ideal.values() for slot in slots]
        self.extra: tuple[str, ...] | None = None
        if all(one is not None for one in reads):
            self.extra = tuple(sorted(set().union(*(one for one in reads if one is not None))))
        self.known: dict[tuple[Any, ...], frozenset[str]] = {}

    def machines_for(self, job: Mapping[str, Any]) -> frozenset[str]:
        if self.extra is None:
            return _machines_for(job, self.ideal)
        key = signature(job, self.extra)
        found = self.known.get(key)
        if found is None:
            found = self.known[key] = _machines_for(job, self.ideal)
        return found


def _ad(data: Mapping[str, Any]) -> classad2.ClassAd | None:
    try:
        return from_dict(data)
    except AdError as exc:
        log.debug("unreadable slot ad left out of backfill: %s", exc)
        return None


def _machines_for(job: Mapping[str, Any], ideal: Mapping[str, list[classad2.ClassAd]]
                  ) -> frozenset[str]:
    """The machines with a slot that would take the job (nothing running there)."""
    ad = _ad(job)
    if ad is None:
        return frozenset()
    return frozenset(machine for machine, slots in ideal.items()
                     if any(matches(ad, slot) for slot in slots))
