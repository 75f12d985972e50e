"""`fetchwork q -showq`, `q -analyze ID` and `q -priority`: the scheduling policy seen
from the queue.

Each reads the queue and the published slots through `Broker`, builds the
policy snapshot (broker/policy) and prints its pure renderers' text. A
blocked job's reason is the one the leader's last pass wrote into its ad.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import classad2
from rich import box
from rich.table import Table

from fetchwork.broker.backfill.analyze import reservation_lines
from fetchwork.broker.backfill.claimside import BackfillCheck
from fetchwork.broker.client import Broker
from fetchwork.broker.policy.analyze import ClauseResult, MatchResults, analyze_text
from fetchwork.broker.policy.dependencies import WAITING_ATTR
from fetchwork.broker.policy.partition import policy_pass
from fetchwork.broker.policy.priority import PRIORITY_COLUMNS, priority_row
from fetchwork.broker.policy.settings import PolicySettings
from fetchwork.broker.policy.showq import showq_text
from fetchwork.broker.policy.snapshot import PolicyJob, policy_job
from fetchwork.broker.states import State
from fetchwork.config.ads import to_dict
from fetchwork.config.matching import clause_counts, mismatch
from fetchwork.errors import FetchworkError

LEFT = ("ID", "OWNER")


def snapshot(broker: Broker, settings: PolicySettings) -> list[tuple[PolicyJob, Any]]:
    """Each unfinished job of the queue: its policy view and its ad."""
    pairs = []
    for ad in broker.query():
        job = policy_job(to_dict(ad), settings.default_walltime_s)
        if job is not None:
            pairs.append((job, ad))
    return pairs


def _number(ad: Any, name: str, default: float) -> float:
    value = ad.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)


def pool_usage(slots: Sequence[Any]) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """(busy, total) processors and (busy, total) machines of the published slots."""
    if not slots:
        return None
    cpus = busy_cpus = 0
    machines: dict[str, bool] = {}
    for slot in slots:
        count = int(_number(slot, "Cpus", 1))
        busy = slot.get("Activity") == "Busy"
        cpus += count
        busy_cpus += count if busy else 0
        machine = str(slot.get("Name") or "").split("@", 1)[-1]
        machines[machine] = machines.get(machine, False) or busy
    return (busy_cpus, cpus), (sum(machines.values()), len(machines))


def showq(broker: Broker, settings: PolicySettings) -> str:
    """Maui's active, idle and blocked parts of the queue, with the totals line."""
    jobs = [job for job, _ad in snapshot(broker, settings)]
    now = time.time()
    usage = pool_usage(broker.slots())
    processors, nodes = usage if usage else (None, None)
    return showq_text(jobs, now, policy_pass(jobs, settings, now).order,
                      processors=processors, nodes=nodes)


def match_results(job_ad: classad2.ClassAd, slots: Sequence[classad2.ClassAd]) -> MatchResults:
    """How the slots' START and each top-level clause of the job's Requirements fare."""
    matched = start_refused = 0
    for slot in slots:
        why = mismatch(slot, job_ad)
        matched += why is None
        start_refused += why is not None and why.startswith("START")
    clauses = [ClauseResult(clause, accepted)
               for clause, accepted in clause_counts(job_ad, slots)]
    return MatchResults(len(slots), matched, start_refused, clauses)


def analyze(broker: Broker, settings: PolicySettings, job_id: str) -> str:
    """Why job `job_id` is not running, in sentences."""
    pairs = snapshot(broker, settings)
    found = [(job, ad) for job, ad in pairs if job.job_id == job_id]
    if not found:
        raise FetchworkError(f"job {job_id} is not in the queue")
    job, ad = found[0]
    if ad.get(WAITING_ATTR):  # the dependencies decide, not the policy
        return f"Job {job_id} is blocked: {ad.get('BlockedReason') or 'waiting on dependencies'}."
    now = time.time()
    jobs = [one for one, _ad in pairs]
    result = policy_pass(jobs, settings, now)
    idle = {one.job_id for one in jobs if one.state is State.IDLE}
    ahead = [one for one in result.order if one in idle]
    text = analyze_text(job, now, priority=result.priorities.get(job_id),
                        ahead=ahead.index(job_id) if job_id in idle else 0,
                        match=match_results(ad, broker.slots()))
    if job.state is not State.IDLE:
        return text
    reservation = BackfillCheck.reservation_of(broker.client.get(broker.keys.backfill))
    lines = reservation_lines(job_id, reservation, now, job.bypass_count)
    return text + "".join(f"{line}\n" for line in lines)


def priority_table(broker: Broker, settings: PolicySettings) -> Table:
    """One row per waiting job, best first: each priority factor's contribution."""
    jobs = {job.job_id: job for job, _ad in snapshot(broker, settings)}
    result = policy_pass(list(jobs.values()), settings, time.time())
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in PRIORITY_COLUMNS:
        table.add_column(column, justify="left" if column in LEFT else "right", no_wrap=True)
    for job_id in result.order:
        table.add_row(*priority_row(jobs[job_id], result.priorities[job_id]))
    return table
