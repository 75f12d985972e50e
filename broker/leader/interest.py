"""A duty that reads the event stream only while the pool uses its feature.

A pool with no dependencies and no user logs asks nothing of the dependency
resolver or the user log writer, yet each of them would read every
transition (a round trip per batch, the user log writer every job's
fields). `WhenInUse` wraps such
a duty: every PROBE_S it asks a cheap question of Redis (`in_use`, one
small call), and only while the answer is yes does the duty read events
(`reads_events`) and run its passes. While no duty reads events the
leader's reader reads none either (leader/reader.py), so a plain pool costs
the leader nothing per job.

When the answer turns to yes the reader hands the duty over exactly as on
taking the lead (`on_lead(since)`, then the events after `since`), and the
duty catches up on what came before on its own, as it does then: the
dependency resolver sweeps every waiting job, the user log writer reads on
from its stored position (which `idle` kept at the newest event while no
job used a user log). A feature that comes
into use is therefore acted on within PROBE_S (plus the duty's own pass);
once in use, the duty behaves as if unwrapped.

The questions (`dependencies_in_use`, `UserLogQuestion`):

- dependencies: a job waits on others (the depwait set is not empty);
- user logs: some submission named one (`userlog:used`, set by the submit
  transaction itself, before any event of its jobs).

The backfill pass is not wrapped: whether an idle job waits for a
reservation cannot be told from the pool's features (a job of the only idle
shape may still wait behind a running job of another). It asks its own
cheap question instead (backfill/waiting.py: a pass reads the head of the
idle set, and computes a reservation only when a job waits behind a busy
pool), and lets the reader gather events for BACKFILL_MIN_INTERVAL while no
reservation stands (reader.py); its cost per job is in docs/benchmarks.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from fetchwork.broker.dependencies.resolver import DependencyResolver
from fetchwork.broker.store import Store, codec
from fetchwork.broker.userlog.writer import UserLogWriter

from .duty import Duty, Event

log = logging.getLogger(__name__)

# Seconds between two questions of a wrapped duty (while it leads).
PROBE_S = 0.25
# Seconds between two moves of the user log writer's stored position while no job
# uses a user log (each move is a read and a script call).
SKIP_S = 5.0


class WhenInUse:
    """`duty`, reading events and running its passes only while `in_use()` says so;
    `idle()` runs instead of the question's no (may be None)."""

    def __init__(self, duty: Duty, in_use: Callable[[], bool],
                 idle: Callable[[], None] | None = None, probe_s: float = PROBE_S):
        self.duty = duty
        self.in_use = in_use
        self.idle = idle
        self.probe_s = probe_s
        self.active = False
        # Called when `active` turns true, so a reader reading nothing wakes (set by it).
        self.wake: Callable[[], None] = lambda: None
        self._leading = False
        self._probe_at = 0.0
        self._handed = False  # the reader handed the duty over since it became active

    @property
    def name(self) -> str:
        return self.duty.name

    @property
    def reads_events(self) -> bool:
        return self.active and self.duty.reads_events

    def on_lead(self, since: str) -> None:
        self._leading, self._probe_at = True, 0.0
        if self.active:
            self._handed = True
            self.duty.on_lead(since)

    def on_lose(self) -> None:
        self._leading, self._handed = False, False
        self.active = False  # asked again on the next lead
        self.duty.on_lose()

    def on_events(self, events: Sequence[Event]) -> object:
        return self.duty.on_events(events) if self._handed else None

    def due_in_s(self, now_s: float) -> float:
        probe_in_s = max(0.0, self._probe_at - now_s)
        if not self._handed:
            return probe_in_s
        return min(probe_in_s, self.duty.due_in_s(now_s))

    def run_due(self, now_s: float) -> object:
        if now_s >= self._probe_at:
            self._probe_at = now_s + self.probe_s
            self._ask()
        if self._handed and self.duty.due_in_s(now_s) <= 0:
            return self.duty.run_due(now_s)
        return None

    def close(self) -> None:
        self.duty.close()

    def _ask(self) -> None:
        used = self.in_use()
        if used and not self.active:
            log.info("leader duty %s: its feature is in use; reading events", self.name)
            self.active = True
            self.wake()  # the reader hands the duty over (on_lead) from its next read
        elif not used and self.active:
            log.info("leader duty %s: its feature is no longer in use", self.name)
            self.active, self._handed = False, False
        if not used and self.idle is not None:
            self.idle()


def dependencies_in_use(store: Store) -> Callable[[], bool]:
    return lambda: bool(store.client.scard(store.keys.dep_waiting))


class UserLogQuestion:
    """Whether any job uses a user log; while none does, the writer's stored position
    follows the newest event (read before the question, in the same round trip, so no
    event of a job with a log can be before it: the mark comes in the transaction that
    queues the job), at most every SKIP_S: a writer that comes into use reads on from
    there, at most SKIP_S of events no job logs."""

    def __init__(self, store: Store, writer: UserLogWriter, skip_s: float = SKIP_S):
        self.store = store
        self.writer = writer
        self.skip_s = skip_s
        self._newest = ""
        self._skipped_at: float | None = None

    def in_use(self) -> bool:
        pipe = self.store.client.pipeline(transaction=False)
        pipe.xrevrange(self.store.keys.events, count=1)
        pipe.exists(self.store.keys.userlog_used)
        newest, used = pipe.execute()
        self._newest = codec.text(newest[0][0]) if newest else "0-0"
        return bool(used)

    def idle(self) -> None:
        now = time.monotonic()
        if self._skipped_at is not None and now - self._skipped_at < self.skip_s:
            return
        self._skipped_at = now
        self.writer.skip_to(self._newest)


def wrapped(duty: Duty, store: Store) -> Duty:
    """`duty` wrapped in `WhenInUse` when it serves a feature a pool may not use."""
    if isinstance(duty, UserLogWriter):
        question = UserLogQuestion(store, duty)
        return WhenInUse(duty, question.in_use, question.idle)
    if isinstance(duty, DependencyResolver):
        return WhenInUse(duty, dependencies_in_use(store))
    return duty

