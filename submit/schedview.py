"""`fetchwork q -showq`, `q -analyze ID` and `q -priority`: the scheduling policy seen
from the queue.

Each reads the queue and the published slots through `Broker`, builds the
policy snapshot (broker/scheduling) and prints its pure renderers' text. A
blocked job's reason is the one the leader's last pass wrote into its ad.
`-analyze` also says what the backfill reservation means for the job
(`reservation_lines`): the reserved job's machine and expected start, or
which job holds the reservation this one may not delay.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from typing import Any

import classad2
from rich import box
from rich.table import Table

from fetchwork.broker.backfill.plan import Reservation
from fetchwork.broker.claim.backfill import BackfillCheck
from fetchwork.broker.client import Broker
from fetchwork.broker.scheduling.analyze import ClauseResult, MatchResults, analyze_text
from fetchwork.broker.scheduling.eligibility import scheduling_pass
from fetchwork.broker.scheduling.priority import PRIORITY_COLUMNS, priority_row
from fetchwork.broker.scheduling.settings import SchedulingSettings
from fetchwork.broker.scheduling.showq import clock_text, date_text, showq_text
from fetchwork.broker.scheduling.snapshot import QueuedJob, queued_job
from fetchwork.broker.store.states import WAITING_ATTR, State
from fetchwork.config.ads import to_dict
from fetchwork.config.matching import clause_counts, mismatch
from fetchwork.errors import FetchworkError

LEFT = ("ID", "OWNER")


def snapshot(broker: Broker, settings: SchedulingSettings) -> list[tuple[QueuedJob, Any]]:
    """Each unfinished job of the queue: its policy view and its ad."""
    pairs = []
    for ad in broker.query():
        job = queued_job(to_dict(ad), settings.default_walltime_s)
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


def showq(broker: Broker, settings: SchedulingSettings) -> str:
    """Maui's active, idle and blocked parts of the queue, with the totals line."""
    jobs = [job for job, _ad in snapshot(broker, settings)]
    now = time.time()
    usage = pool_usage(broker.slots())
    processors, nodes = usage if usage else (None, None)
    return showq_text(jobs, now, scheduling_pass(jobs, settings, now).order,
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


def analyze(broker: Broker, settings: SchedulingSettings, job_id: str) -> str:
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
    result = scheduling_pass(jobs, settings, now)
    idle = {one.job_id for one in jobs if one.state is State.IDLE}
    ahead = [one for one in result.order if one in idle]
    text = analyze_text(job, now, priority=result.priorities.get(job_id),
                        ahead=ahead.index(job_id) if job_id in idle else 0,
                        match=match_results(ad, broker.slots()))
    if job.state is not State.IDLE:
        return text
    raw = broker.client.get(broker.keys.backfill)
    assert raw is None or isinstance(raw, bytes)  # the client keeps replies as bytes
    reservation = BackfillCheck.reservation_of(raw)
    lines = reservation_lines(job_id, reservation, now, job.bypass_count)
    return text + "".join(f"{line}\n" for line in lines)


def priority_table(broker: Broker, settings: SchedulingSettings) -> Table:
    """One row per waiting job, best first: each priority factor's contribution."""
    jobs = {job.job_id: job for job, _ad in snapshot(broker, settings)}
    result = scheduling_pass(list(jobs.values()), settings, time.time())
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in PRIORITY_COLUMNS:
        table.add_column(column, justify="left" if column in LEFT else "right", no_wrap=True)
    for job_id in result.order:
        table.add_row(*priority_row(jobs[job_id], result.priorities[job_id]))
    return table


def reservation_lines(job_id: str, reservation: Reservation | None, now: float,
                      bypass_count: int = 0, tz: datetime.tzinfo | None = None) -> list[str]:
    """Sentences on the pool's reservation as it concerns job `job_id`."""
    if reservation is None:
        return []
    when = (f"expected to start {date_text(reservation.start_at, tz)}, in "
            f"{clock_text(reservation.start_at - now)}")
    if reservation.job_id != job_id:
        return [f"Job {reservation.job_id} holds the reservation on {reservation.machine} "
                f"({when}); jobs below it start only where they do not delay it."]
    kind = "all of machine" if reservation.exclusive else "machine"
    lines = [f"Reserved: {kind} {reservation.machine}, {when}, when its running jobs "
             "end by their walltimes."]
    window = reservation.window
    lines.append(f"Backfill window there: {window.free.cpus:g} CPUs for "
                 f"{clock_text(window.seconds)} (from {date_text(reservation.computed_at, tz)}).")
    if bypass_count:
        jobs = "job has" if bypass_count == 1 else "jobs have"
        lines.append(f"{bypass_count} lower {jobs} started ahead of it (BypassCount).")
    return lines
