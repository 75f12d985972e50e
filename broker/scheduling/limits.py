"""Policy limits: job counts per user and project, processor-second budgets, walltime.

A job's PS is its walltime x its CPUs; a running job's PS is its *remaining*
walltime x its CPUs. Each job charges one budget: its project's when the
project has its own limits (`MAXPS_SOFT_<PROJECT>`), else its user's (with
MAXPS_SOFT and MAXPS_HARD). A job may start when its PS plus the running PS of
its budget is within the soft limit; between soft and hard only on a slot no
other job can use; never above the hard limit. Every refusal is a sentence
that names the knob and the numbers.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fetchwork.broker.store.states import State

from .settings import Budget, SchedulingSettings
from .snapshot import ACTIVE, QueuedJob

BudgetKey = tuple[str, str]


class Fit(enum.Enum):
    """How a job's PS sits against its budget."""

    WITHIN = "within"      # within the soft limit (or no limit)
    SOFT = "soft"          # above soft, within hard: only where nothing else can start
    OVER = "over"          # above the hard limit: never


@dataclass(frozen=True)
class PsCheck:
    fit: Fit
    reason: str | None = None



def number(value: float) -> str:
    """A count or a number of seconds as people write it: `72000`, not `72000.0`."""
    return f"{value:.0f}"


def budget_key(job: QueuedJob, settings: SchedulingSettings) -> BudgetKey:
    """The budget a job charges: ("project", name) with a project budget, else ("user", owner)."""
    if job.project is not None and settings.budget_of_project(job.project) is not None:
        return ("project", job.project.lower())
    return ("user", job.owner)


def _limits(key: BudgetKey, settings: SchedulingSettings) -> tuple[Budget, str, str]:
    """The budget of `key` and the names of its soft and hard knobs."""
    if key[0] == "project":
        budget = settings.project_maxps[key[1]]
        soft_name, hard_name = f"MAXPS_SOFT_{key[1]}", f"MAXPS_HARD_{key[1]}"
        return budget, soft_name, hard_name
    return settings.maxps, "MAXPS_SOFT", "MAXPS_HARD"


class Ledger:
    """What the running jobs use: job counts per user, remaining PS per budget."""

    def __init__(self, jobs: Iterable[QueuedJob], settings: SchedulingSettings, now: float):
        self.settings = settings
        self.now = now
        self.running_by_user: Counter[str] = Counter()
        self.ps_by_budget: defaultdict[BudgetKey, float] = defaultdict(float)
        for job in jobs:
            if job.state in ACTIVE:
                self.add_running(job)

    def add_running(self, job: QueuedJob) -> None:
        self.running_by_user[job.owner] += 1
        self.ps_by_budget[budget_key(job, self.settings)] += job.running_ps(self.now)

    def ps_check(self, job: QueuedJob) -> PsCheck:
        """Where the job's PS plus its budget's running PS falls against soft and hard."""
        key = budget_key(job, self.settings)
        budget, soft_name, hard_name = _limits(key, self.settings)
        if not budget.soft and not budget.hard:
            return PsCheck(Fit.WITHIN)
        running = self.ps_by_budget.get(key, 0.0)
        total = running + job.ps
        sum_text = (f"PS {number(running)} of the running jobs of {key[0]} {key[1]} + "
                    f"{number(job.ps)} of this job ({job.cpus} CPUs x {number(job.walltime_s)} s)"
                    f" = {number(total)}")
        if budget.hard and total > budget.hard:
            return PsCheck(Fit.OVER, f"{sum_text} > {hard_name} = {number(budget.hard)}")
        if budget.soft and total > budget.soft:
            hard = f"{hard_name} = {number(budget.hard)}" if budget.hard else "no hard limit"
            return PsCheck(Fit.SOFT, f"{sum_text} > {soft_name} = {number(budget.soft)}; "
                                     f"it may start only on a slot no other job can use "
                                     f"({hard})")
        return PsCheck(Fit.WITHIN)


class Counts:
    """Jobs admitted to the idle part so far in one pass, per user and project."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.settings = ledger.settings
        self.idle_by_user: Counter[str] = Counter()
        self.idle_by_project: Counter[str] = Counter()

    def refusal(self, job: QueuedJob) -> str | None:
        """Why one more idle job of this user or project breaks a count limit, or None."""
        settings = self.settings
        user = job.owner
        if settings.max_jobs_per_user:
            total = self.ledger.running_by_user[user] + self.idle_by_user[user]
            if total >= settings.max_jobs_per_user:
                return (f"user {user} has {total} running and idle jobs "
                        f"(MAX_JOBS_PER_USER = {settings.max_jobs_per_user})")
        if settings.max_idle_per_user and self.idle_by_user[user] >= settings.max_idle_per_user:
            return (f"user {user} has {self.idle_by_user[user]} idle jobs "
                    f"(MAX_IDLE_JOBS_PER_USER = {settings.max_idle_per_user})")
        if settings.max_idle_per_project and job.project is not None:
            idle = self.idle_by_project[job.project]
            if idle >= settings.max_idle_per_project:
                return (f"project {job.project} has {idle} idle jobs "
                        f"(MAX_IDLE_JOBS_PER_PROJECT = {settings.max_idle_per_project})")
        return None

    def admit(self, job: QueuedJob) -> None:
        self.idle_by_user[job.owner] += 1
        if job.project is not None:
            self.idle_by_project[job.project] += 1


def claim_attrs(job: QueuedJob, settings: SchedulingSettings, soft: bool) -> dict[str, Any]:
    """What a claim's atomic re-check reads on a job: its budget, size and PS limit.

    An IDLE job may start within its budget's soft limit (the hard one when
    only that is set); one BLOCKED by a soft limit only (`soft`) within the
    hard one. A limit of 0 means none.
    """
    key = budget_key(job, settings)
    budget = _limits(key, settings)[0]
    limit = budget.hard if soft else (budget.soft or budget.hard)
    return {"FetchworkBudget": f"{key[0]}:{key[1]}", "FetchworkCpus": job.cpus,
            "FetchworkWalltime": job.walltime_s, "FetchworkPsLimit": limit}


def walltime_refusal(walltime_s: float, settings: SchedulingSettings,
                     own: bool = True) -> str | None:
    """Why a job asking for `walltime_s` may not be queued (MAX_WALLTIME), or None.
    `own` says whether the job set AllowedJobDuration (else DEFAULT_JOB_WALLTIME gave it)."""
    cap = settings.max_walltime_s
    if not cap or walltime_s <= cap:
        return None
    source = "AllowedJobDuration" if own else "DEFAULT_JOB_WALLTIME"
    return (f"the job asks for {number(walltime_s)} s of wall-clock time ({source}), "
            f"more than MAX_WALLTIME = {number(cap)} s")


def past_walltime(job: QueuedJob, now: float) -> bool:
    """True when a running job has used up its walltime."""
    return job.started_at is not None and now > job.started_at + job.walltime_s


def overrun(jobs: Iterable[QueuedJob], settings: SchedulingSettings, now: float) -> list[QueuedJob]:
    """Running jobs past their walltime, to stop: a job's own AllowedJobDuration always,
    DEFAULT_JOB_WALLTIME only while limits are set (the PS budgets count on it)."""
    return [job for job in jobs if job.state in ACTIVE and past_walltime(job, now)
            and (job.walltime_given or settings.limits_on())]


def walltime_remove_reason(job: QueuedJob) -> str:
    """The RemoveReason of a job stopped for running past its walltime."""
    source = "AllowedJobDuration" if job.walltime_given else "DEFAULT_JOB_WALLTIME"
    return f"the job ran past its walltime ({source}) of {number(job.walltime_s)} s"


def start_refusal(job: QueuedJob, running: Iterable[QueuedJob], settings: SchedulingSettings,
                  now: float, others_eligible: bool) -> str | None:
    """Why `job` may not start on a slot now, or None when it may (the claim's re-check).

    `running` are the running jobs (any user); `others_eligible` says whether
    another job could start on the same slot, which keeps a job between its
    soft and hard PS limits from starting there.
    """
    if job.state not in (State.IDLE, State.BLOCKED):
        return f"the job is {job.state.value}, not waiting to start"
    if job.state is State.BLOCKED and (not job.soft_blocked or others_eligible):
        return f"the job is blocked: {job.blocked_reason or 'by policy'}"
    refusal = walltime_refusal(job.walltime_s, settings)
    if refusal is not None:
        return refusal
    check = Ledger(running, settings, now).ps_check(job)
    if check.fit is Fit.OVER or (check.fit is Fit.SOFT and others_eligible):
        return check.reason
    return None
