"""One policy pass: priorities, then the queue's idle and blocked parts.

Queued jobs (IDLE or BLOCKED) are taken best first (JobPrio group, weighted
priority, first come first served). Each is admitted to the idle part unless a
limit refuses it: MAX_JOBS_PER_USER (running plus idle), MAX_IDLE_JOBS_PER_USER,
MAX_IDLE_JOBS_PER_PROJECT, MAX_WALLTIME, then its PS budget. A job above only
its soft PS limit is BLOCKED but marked `soft`: it holds its place in the
counts, and a slot no IDLE job can use may still take it. So the first jobs a
limit allows are the highest-priority ones, earliest among equals, and when
a job starts, the best blocked job of its user or project moves up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fetchwork.broker.store.states import State

from .fairshare import FairShare
from .limits import Counts, Fit, Ledger, walltime_refusal
from .priority import Priority, job_priority, sort_key
from .settings import SchedulingSettings
from .snapshot import QUEUED, QueuedJob, Usage, running_usage


@dataclass(frozen=True, slots=True)
class Placement:
    """Where policy puts a queued job: IDLE, or BLOCKED with a reason."""

    state: State
    reason: str | None = None
    # BLOCKED only by a soft PS limit.
    soft: bool = False


IDLE = Placement(State.IDLE)


@dataclass
class SchedulingPass:
    """The result of one pass over a queue snapshot."""

    placements: dict[str, Placement] = field(default_factory=dict)
    priorities: dict[str, Priority] = field(default_factory=dict)
    # Queued job ids, best first.
    order: list[str] = field(default_factory=list)

    def idle_ids(self) -> list[str]:
        return [job_id for job_id in self.order if self.placements[job_id].state is State.IDLE]

    def blocked_ids(self) -> list[str]:
        return [job_id for job_id in self.order
                if self.placements[job_id].state is State.BLOCKED]


@dataclass(frozen=True, slots=True)
class Change:
    """A queued job whose state, reason or soft mark the pass changes."""

    job_id: str
    placement: Placement


def scheduling_pass(jobs: Sequence[QueuedJob], settings: SchedulingSettings, now: float,
                usage: Iterable[Usage] = ()) -> SchedulingPass:
    """Priorities and the idle/blocked partition of every queued job in `jobs`.

    `usage` is the CPU time finished jobs used (fair share adds running jobs).
    """
    queued = [job for job in jobs if job.state in QUEUED]
    result = SchedulingPass()
    fairshare = None
    if settings.weights.fairshare:
        fairshare = FairShare([*usage, *running_usage(jobs, now)], settings, now)
    if settings.priority_on():
        priorities = {job.job_id: job_priority(job, settings, now, fairshare) for job in queued}
        queued.sort(key=lambda job: sort_key(job, priorities[job.job_id]))
    else:
        priorities = {job.job_id: Priority(job.prio_group) for job in queued}
        queued.sort(key=lambda job: (-job.prio_group, job.order))
    result.priorities = priorities
    result.order = [job.job_id for job in queued]
    if not settings.limits_on() and not settings.max_walltime_s:
        result.placements = dict.fromkeys(result.order, IDLE)
        return result
    ledger = Ledger(jobs, settings, now)
    counts = Counts(ledger)
    for job in queued:
        result.placements[job.job_id] = _place(job, settings, ledger, counts)
    return result


def _place(job: QueuedJob, settings: SchedulingSettings, ledger: Ledger,
           counts: Counts) -> Placement:
    refusal = counts.refusal(job) or walltime_refusal(job.walltime_s, settings)
    if refusal is not None:
        return Placement(State.BLOCKED, refusal)
    check = ledger.ps_check(job)
    if check.fit is Fit.OVER:
        return Placement(State.BLOCKED, check.reason)
    counts.admit(job)
    if check.fit is Fit.SOFT:
        return Placement(State.BLOCKED, check.reason, soft=True)
    return IDLE


def changes(jobs: Iterable[QueuedJob], result: SchedulingPass) -> list[Change]:
    """The transitions a pass asks for: queued jobs whose state or reason differ."""
    out = []
    for job in jobs:
        placement = result.placements.get(job.job_id)
        if placement is None:
            continue
        if (placement.state is not job.state or placement.reason != job.blocked_reason
                or placement.soft != job.soft_blocked):
            out.append(Change(job.job_id, placement))
    return out
