"""The queue as policy sees it: one `QueuedJob` per unfinished job, built from its ad.

Ads are to_dict-style mappings with HTCondor attribute names (any case), as
the broker stores them. A job's project is its `AccountingGroup`, else its
`ProjectName`, else none; its processors `RequestCpus` (default 1); its
wall-clock limit `AllowedJobDuration` (else DEFAULT_JOB_WALLTIME). Values
that are expressions rather than literals count as absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fetchwork.broker.store.states import FINISHED, State, clamp_prio
from fetchwork.config.protocol import JobStatus

# A job's state when its ad has no FetchworkState, from HTCondor's JobStatus.
_FROM_STATUS: dict[int, State] = {
    JobStatus.IDLE: State.IDLE,
    JobStatus.RUNNING: State.RUNNING,
    JobStatus.HELD: State.HELD,
    JobStatus.SUSPENDED: State.SUSPENDED,
}
ACTIVE = frozenset({State.RUNNING, State.SUSPENDED})
QUEUED = frozenset({State.IDLE, State.BLOCKED})
KB_PER_MB = 1024
# Ad attributes the policy writes on a BLOCKED job.
BLOCKED_REASON_ATTR = "BlockedReason"
SOFT_BLOCKED_ATTR = "BlockedBySoftLimit"


@dataclass(slots=True)
class QueuedJob:
    """What policy needs of one job; times are Unix seconds."""

    job_id: str
    owner: str
    project: str | None
    cpus: int
    walltime_s: float
    state: State
    prio_group: int
    # FetchworkOrder: first come, first served within a priority group.
    order: float
    queued_at: float
    # When the job entered the idle part of the queue (IDLE jobs only).
    idle_since: float | None = None
    # When the current run started (RUNNING and SUSPENDED jobs only).
    started_at: float | None = None
    qos: str | None = None
    memory_mb: float = 0.0
    disk_kb: float = 0.0
    bypass_count: int = 0
    hold_reason: str | None = None
    blocked_reason: str | None = None
    # BLOCKED only by a soft PS limit: a slot no other job can use may take it.
    soft_blocked: bool = False
    # Whether the job set AllowedJobDuration (else DEFAULT_JOB_WALLTIME gave it).
    walltime_given: bool = True

    @property
    def ps(self) -> float:
        """Processor seconds asked for: walltime x CPUs."""
        return self.walltime_s * self.cpus

    def remaining_s(self, now: float) -> float:
        """Walltime left of a running job (the whole walltime for a queued one)."""
        if self.started_at is None:
            return self.walltime_s
        return max(0.0, self.started_at + self.walltime_s - now)

    def running_ps(self, now: float) -> float:
        """A running job's PS: its remaining walltime x its CPUs."""
        return self.remaining_s(now) * self.cpus

    def queue_time_s(self, now: float) -> float:
        """Seconds since the job entered the idle part of the queue (0 when not IDLE)."""
        if self.state is not State.IDLE or self.idle_since is None:
            return 0.0
        return max(0.0, now - self.idle_since)


@dataclass(frozen=True, slots=True)
class Usage:
    """CPU time a user (and project) used: `cpus` from `start_s` to `end_s`."""

    owner: str
    project: str | None
    cpus: int
    start_s: float
    end_s: float


# The attributes policy reads, lower-case, by their usual spelling.
_WANTED = {name: name.lower() for name in (
    "ClusterId", "ProcId", "Owner", "AccountingGroup", "ProjectName", "RequestCpus",
    "AllowedJobDuration", "FetchworkState", "JobStatus", "JobPrio", "FetchworkOrder", "QDate",
    "EnteredCurrentStatus", "JobCurrentStartDate", "JobStartDate", "CompletionDate", "QOS",
    "RequestMemory", "RequestDisk", "BypassCount", "HoldReason", BLOCKED_REASON_ATTR,
    SOFT_BLOCKED_ATTR)}
_WANTED_LOWER = frozenset(_WANTED.values())


def _lowered(ad: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes policy reads, under lower-case names (ad names are case-insensitive)."""
    out = {}
    for name, value in ad.items():
        low = _WANTED.get(name)
        if low is None:
            low = name.lower()
            if low not in _WANTED_LOWER:
                continue
        out[low] = value
    return out


def _number(attrs: Mapping[str, Any], name: str) -> float | None:
    value = attrs.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _word(attrs: Mapping[str, Any], name: str) -> str | None:
    value = attrs.get(name)
    return value if isinstance(value, str) and value else None


def _state(attrs: Mapping[str, Any]) -> State | None:
    word = _word(attrs, "fetchworkstate")
    if word is not None:
        try:
            return State(word.upper())
        except ValueError:
            return None
    status = _number(attrs, "jobstatus")
    return _FROM_STATUS.get(int(status)) if status is not None else None


def job_id_of(attrs: Mapping[str, Any]) -> str:
    cluster, proc = _number(attrs, "clusterid"), _number(attrs, "procid")
    return f"{int(cluster or 0)}.{int(proc or 0)}"


def queued_job(ad: Mapping[str, Any], default_walltime_s: float) -> QueuedJob | None:
    """The policy view of one job ad; None for a finished job or an unreadable state."""
    attrs = _lowered(ad)
    state = _state(attrs)
    if state is None or state in FINISHED:
        return None
    cpus = _number(attrs, "requestcpus")
    walltime = _number(attrs, "allowedjobduration")
    qdate = _number(attrs, "qdate") or 0.0
    entered = _number(attrs, "enteredcurrentstatus")
    started = None
    if state in ACTIVE:
        started = (_number(attrs, "jobcurrentstartdate")
                   or (entered if state is State.RUNNING else None)
                   or _number(attrs, "jobstartdate") or entered or qdate)
    return QueuedJob(
        job_id=job_id_of(attrs),
        owner=_word(attrs, "owner") or "",
        project=_word(attrs, "accountinggroup") or _word(attrs, "projectname"),
        cpus=max(1, int(cpus)) if cpus is not None else 1,
        walltime_s=walltime if walltime is not None and walltime > 0 else default_walltime_s,
        state=state,
        prio_group=clamp_prio(attrs.get("jobprio")),
        order=_number(attrs, "fetchworkorder") or 0.0,
        queued_at=qdate,
        idle_since=(entered if entered is not None else qdate) if state is State.IDLE else None,
        started_at=started,
        qos=_word(attrs, "qos"),
        memory_mb=_number(attrs, "requestmemory") or 0.0,
        disk_kb=_number(attrs, "requestdisk") or 0.0,
        bypass_count=int(_number(attrs, "bypasscount") or 0),
        hold_reason=_word(attrs, "holdreason") if state is State.HELD else None,
        blocked_reason=(_word(attrs, BLOCKED_REASON_ATTR.lower())
                        if state is State.BLOCKED else None),
        soft_blocked=state is State.BLOCKED and attrs.get(SOFT_BLOCKED_ATTR.lower()) is True,
        walltime_given=walltime is not None and walltime > 0,
    )


def usage_of(ad: Mapping[str, Any]) -> Usage | None:
    """The CPU time a finished job used (its last run), or None when its ad does not say."""
    attrs = _lowered(ad)
    end = _number(attrs, "completiondate") or _number(attrs, "enteredcurrentstatus")
    start = _number(attrs, "jobcurrentstartdate") or _number(attrs, "jobstartdate")
    if end is None or start is None or end <= start:
        return None
    cpus = _number(attrs, "requestcpus")
    return Usage(_word(attrs, "owner") or "", _word(attrs, "accountinggroup")
                 or _word(attrs, "projectname"), max(1, int(cpus)) if cpus else 1, start, end)


def build_snapshot(ads: Iterable[Mapping[str, Any]], default_walltime_s: float) -> list[QueuedJob]:
    """Policy jobs of every unfinished ad in `ads`."""
    jobs = []
    for ad in ads:
        job = queued_job(ad, default_walltime_s)
        if job is not None:
            jobs.append(job)
    return jobs


def running_usage(jobs: Iterable[QueuedJob], now: float) -> list[Usage]:
    """The CPU time running jobs have used so far (fair share counts it)."""
    return [Usage(job.owner, job.project, job.cpus, job.started_at, now)
            for job in jobs if job.state in ACTIVE and job.started_at is not None
            and job.started_at < now]
