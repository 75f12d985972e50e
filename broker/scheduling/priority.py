"""The weighted priority of a queued job, with each factor's contribution.

JobPrio stays the priority group: groups first (higher JobPrio ahead), the
weighted sum of Maui's factors within a group, then first come, first served
(FetchworkOrder). With every weight 0 the sum is 0 for all jobs, which leaves
today's order. The factors:

- queuetime: minutes since the job entered the idle part of the queue;
- xfactor: (queue time + walltime) / walltime;
- resource: CPU, memory (MB) and disk (MB) requested, each with its sub-weight;
- bypass: times a lower job was started ahead of it (BypassCount);
- qos: its QOS's priority plus a target term that doubles every tenth of the
  QOS's target queue time (capped at twice the target): exponential growth;
- fairshare: target percent minus used percent (see `fairshare`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .fairshare import FairShare
from .settings import SchedulingSettings
from .snapshot import KB_PER_MB, QueuedJob

FACTORS = ("queuetime", "xfactor", "resource", "bypass", "qos", "fairshare")
# `q -priority`: one row per queued job, each factor's contribution in a column.
PRIORITY_COLUMNS = ("ID", "OWNER", "GROUP", "PRIORITY", *(name.upper() for name in FACTORS))
# The QOS target term: 2 ** (TARGET_DOUBLINGS x queue time / target) - 1, the
# ratio capped at TARGET_CAP (1023 at the target, about a million at twice it).
TARGET_DOUBLINGS = 10.0
TARGET_CAP = 2.0


@dataclass(slots=True)
class Priority:
    """A job's place in the queue: its group, the weighted sum, and the sum's parts."""

    group: int
    total: float = 0.0
    # Factor name -> (its value, its weighted contribution), for factors with a weight.
    parts: dict[str, tuple[float, float]] = field(default_factory=dict)


def qos_target_term(queue_time_s: float, target_s: float) -> float:
    """Grows exponentially as the queue time nears the target: 0 at no wait, 1023 at it."""
    if target_s <= 0 or queue_time_s <= 0:
        return 0.0
    ratio = min(queue_time_s / target_s, TARGET_CAP)
    return float(2.0 ** (TARGET_DOUBLINGS * ratio) - 1.0)


def factor_values(job: QueuedJob, settings: SchedulingSettings, now: float,
                  fairshare: FairShare | None) -> dict[str, float]:
    """Each factor's unweighted value for `job` (only factors with a weight)."""
    weights = settings.weights
    queue_s = job.queue_time_s(now)
    values: dict[str, float] = {}
    if weights.queuetime:
        values["queuetime"] = queue_s / 60.0
    if weights.xfactor:
        values["xfactor"] = (queue_s + job.walltime_s) / job.walltime_s
    if weights.resource:
        values["resource"] = (weights.resource_cpu * job.cpus
                              + weights.resource_memory * job.memory_mb
                              + weights.resource_disk * job.disk_kb / KB_PER_MB)
    if weights.bypass:
        values["bypass"] = float(job.bypass_count)
    if weights.qos:
        qos = settings.qos.get(job.qos.lower()) if job.qos else None
        values["qos"] = (qos.priority + qos_target_term(queue_s, qos.target_queuetime_s)
                         if qos is not None else 0.0)
    if weights.fairshare:
        values["fairshare"] = fairshare.factor(job.owner, job.project) if fairshare else 0.0
    return values


def job_priority(job: QueuedJob, settings: SchedulingSettings, now: float,
                 fairshare: FairShare | None = None) -> Priority:
    """The job's priority: its JobPrio group and the weighted sum of its factors."""
    priority = Priority(job.prio_group)
    if not settings.weights.any():
        return priority
    weights = settings.weights
    for name, value in factor_values(job, settings, now, fairshare).items():
        contribution = getattr(weights, name) * value
        priority.parts[name] = (value, contribution)
        priority.total += contribution
    return priority


def sort_key(job: QueuedJob, priority: Priority) -> tuple[int, float, float]:
    """Ascending key: higher group first, then higher sum, then first come first served."""
    return (-priority.group, -priority.total, job.order)


def describe(priority: Priority) -> str:
    """One line for `q -priority`: each factor's value x weight = contribution."""
    if not priority.parts:
        return f"group {priority.group} (JobPrio); no priority weights set"
    parts = ", ".join(f"{name} {value:.4g} -> {contribution:+.4g}"
                      for name, (value, contribution) in priority.parts.items())
    return f"group {priority.group} (JobPrio); {priority.total:.4g} = {parts}"


def priority_row(job: QueuedJob, priority: Priority) -> tuple[str, ...]:
    """A `q -priority` row: id, owner, JobPrio group, the sum, each factor's contribution."""
    cells = [f"{priority.parts[name][1]:.4g}" if name in priority.parts else "-"
             for name in FACTORS]
    return (job.job_id, job.owner, str(priority.group), f"{priority.total:.4g}", *cells)
