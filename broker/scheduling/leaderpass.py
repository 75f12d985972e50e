"""The leader's policy pass: read the queue, decide with broker/scheduling, apply with Lua.

Each pass reads every unfinished job, builds the policy snapshot, and runs
`scheduling_pass`; the jobs it moves go through block.lua (IDLE -> BLOCKED, or a
new reason) and unblock.lua (BLOCKED -> IDLE), and every waiting job gets the
attributes the claim's re-check reads. With priority weights set, the idle set
is re-scored in the pass's order (JobPrio groups first) and each idle job's
ad shows its `FetchworkPriority`. A pass is due after any transition event
and at least every POLICY_INTERVAL. Only the leader runs passes: the
runner is one of its duties (leader/duty.py), handed the events by the
leader's reader.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fetchwork.broker.store import Store, calls
from fetchwork.broker.store.states import PRIO_SCALE, WAITING_ATTR, State

from .eligibility import SchedulingPass, changes, scheduling_pass
from .limits import claim_attrs, overrun, walltime_remove_reason
from .settings import SchedulingSettings
from .snapshot import QueuedJob, Usage, build_snapshot, usage_of

log = logging.getLogger(__name__)

BATCH = 500
# The served runner passes at most this often without an event, whatever POLICY_INTERVAL says.
MIN_INTERVAL_S = 0.05
BUDGET_ATTR = "FetchworkBudget"


@dataclass
class SchedulingResult:
    blocked: int = 0
    unblocked: int = 0
    jobs: int = 0
    # Running jobs marked to stop for running past their walltime.
    overrun: list[str] = field(default_factory=list)


class SchedulingRunner:
    """Runs policy passes for one pool."""

    name = "policy"
    reads_events = True

    def __init__(self, store: Store, settings: SchedulingSettings):
        self.store = store
        self.settings = settings
        # The newest event when the last pass began (that pass saw what it did).
        self._last_event: str | None = None
        self._last_pass_s: float | None = None
        # An event came after the last pass began (or the lead was just taken).
        self._changed = True

    @classmethod
    def for_settings(cls, store: Store, settings: SchedulingSettings | None
                     ) -> SchedulingRunner | None:
        """The runner of a pool's scheduling policy, or None when it has no limit or
        weight set."""
        if settings is None or not (settings.limits_on() or settings.priority_on()):
            return None
        return cls(store, settings)

    # -- as a duty of the leader (leader/duty.py) ---------------------------------------

    def on_lead(self, since: str) -> None:
        self._changed = True

    def on_lose(self) -> None:
        pass

    def on_events(self, events: Sequence[tuple[str, dict[str, str]]]) -> None:
        """A pass is due when the newest of `events` came after the last pass began."""
        if self._last_event is None or _entry_after(events[-1][0], self._last_event):
            self._changed = True

    def due_in_s(self, now_s: float) -> float:
        if self._changed or self._last_pass_s is None:
            return 0.0
        interval_s = max(MIN_INTERVAL_S, self.settings.interval_s)
        return max(0.0, self._last_pass_s + interval_s - now_s)

    def run_due(self, now_s: float) -> SchedulingResult:
        return self.run_pass(monotonic_s=now_s)

    def close(self) -> None:
        pass

    def due(self, now_s: float) -> bool:
        """True when a transition happened since the last pass or POLICY_INTERVAL passed."""
        if self._last_pass_s is None or now_s - self._last_pass_s >= self.settings.interval_s:
            return True
        return self.store.last_event_id() != self._last_event

    def run_pass(self, now: float | None = None, monotonic_s: float | None = None
                 ) -> SchedulingResult:
        """One pass over the queue; `now` is Unix time (the ads' clock)."""
        now = time.time() if now is None else now
        self._changed = False
        self._last_event = self.store.last_event_id()
        self._last_pass_s = time.monotonic() if monotonic_s is None else monotonic_s
        ids = self.store.ids(self.store.client.zrange(self.store.keys.queue, 0, -1))
        # Jobs waiting on dependencies are the resolver's (broker/dependencies/resolver.py).
        rows = [row for row in self.store.hashes(ids) if WAITING_ATTR not in row[1]]
        jobs = build_snapshot((data for _id, data in rows), self.settings.default_walltime_s)
        usage = self._usage(now) if self.settings.weights.fairshare else []
        result = scheduling_pass(jobs, self.settings, now, usage)
        with_attrs = {job_id for job_id, data in rows if BUDGET_ATTR in data}
        outcome = self._apply(jobs, result, with_attrs)
        outcome.overrun = self._stop_overrun(jobs, now)
        if self.settings.priority_on():
            self._reorder(jobs, result)
        outcome.jobs = len(jobs)
        return outcome

    def _apply(self, jobs: Sequence[QueuedJob], result: SchedulingPass,
               with_attrs: set[str]) -> SchedulingResult:
        moved = {change.job_id for change in changes(jobs, result)}
        block: list[list[Any]] = []
        unblock: list[list[Any]] = []
        for job in jobs:
            placement = result.placements.get(job.job_id)
            if placement is None:
                continue
            if job.job_id not in moved and job.job_id in with_attrs:
                continue
            attrs = claim_attrs(job, self.settings, placement.soft)
            if placement.state is State.BLOCKED:
                block.append([job.job_id, placement.reason, placement.soft, attrs])
            else:
                unblock.append([job.job_id, attrs])
        self._run(calls.block, block)
        self._run(calls.unblock, unblock)
        blocked = sum(1 for item in block if item[0] in moved)
        unblocked = sum(1 for item in unblock if item[0] in moved)
        if blocked or unblocked:
            log.info("policy pass: %d job(s) blocked, %d made idle", blocked, unblocked)
        return SchedulingResult(blocked, unblocked)

    def _stop_overrun(self, jobs: Sequence[QueuedJob], now: float) -> list[str]:
        """overrun.lua on running jobs past their walltime (they end FAILED)."""
        marked: list[str] = []
        late = overrun(jobs, self.settings, now)
        for start in range(0, len(late), BATCH):
            chunk = late[start:start + BATCH]
            marked += calls.overrun(self.store, reasons=[
                (job.job_id, walltime_remove_reason(job)) for job in chunk])
        if marked:
            log.info("stopping %d job(s) past their walltime: %s", len(marked), marked)
        return marked

    def _run(self, script: Callable[..., int], items: list[list[Any]]) -> None:
        for start in range(0, len(items), BATCH):
            script(self.store, items=items[start:start + BATCH])

    def _reorder(self, jobs: Sequence[QueuedJob], result: SchedulingPass) -> None:
        """Idle scores in the pass's order (groups first); FetchworkPriority in each ad."""
        groups = {job.job_id: job.prio_group for job in jobs}
        # reorder.lua moves the idle set and its autocluster index together.
        self._run(calls.reorder, [[job_id, str(-groups[job_id] * PRIO_SCALE + position),
                                   round(result.priorities[job_id].total, 3)]
                                  for position, job_id in enumerate(result.idle_ids())])

    def _usage(self, now: float) -> list[Usage]:
        """CPU time of the jobs that finished within FAIRSHARE_WINDOW."""
        since_ms = (now - self.settings.fairshare_window_s) * 1000
        ids = self.store.ids(self.store.client.zrangebyscore(self.store.keys.history,
                                                             since_ms, "+inf"))
        records = (usage_of(data) for _id, data in self.store.hashes(ids))
        return [record for record in records if record is not None]


def _entry_after(entry_id: str, other_id: str) -> bool:
    """Whether stream entry `entry_id` (`ms-seq`) comes after `other_id`."""
    ms, _, seq = entry_id.partition("-")
    other_ms, _, other_seq = other_id.partition("-")
    return (int(ms), int(seq or 0)) > (int(other_ms), int(other_seq or 0))


def release_blocked(store: Store) -> int:
    """BLOCKED -> IDLE for every blocked job (unblock.lua): with no policy in force,
    nothing may keep a job out of scheduling. Returns how many were waiting."""
    ids = store.ids(store.client.zrange(store.keys.queue, 0, -1))
    blocked = [[job_id, {}] for job_id, data in store.hashes(ids)
               if data.get("FetchworkState") == State.BLOCKED and WAITING_ATTR not in data]
    for start in range(0, len(blocked), BATCH):
        calls.unblock(store, items=blocked[start:start + BATCH])
    if blocked:
        log.info("no scheduling policy in force: %d blocked job(s) made idle", len(blocked))
    return len(blocked)
