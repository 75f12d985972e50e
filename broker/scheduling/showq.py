"""The text of `fetchwork q -showq`: Maui's active, idle and blocked parts.

ACTIVE JOBS lists running and suspended jobs (remaining walltime, start
time), fewest seconds left first; IDLE JOBS the jobs being considered, best
first; BLOCKED JOBS the jobs policy keeps back and the held ones (walltime
limit, submission time), by job id. A blocked job's STATE is `Idle`, a held one's
`Hold`, as Maui shows them. The totals line ends the text.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from fetchwork.broker.store.states import State
from fetchwork.config.protocol import job_id_key

from .snapshot import ACTIVE, QueuedJob

ACTIVE_HEADER = "ACTIVE JOBS--------------------"
IDLE_HEADER = "IDLE JOBS----------------------"
BLOCKED_HEADER = "BLOCKED JOBS----------------"
_STATE_WORDS = {State.RUNNING: "Running", State.SUSPENDED: "Suspended", State.IDLE: "Idle",
                State.BLOCKED: "Idle", State.HELD: "Hold"}


def clock_text(seconds: float) -> str:
    """Maui's `H:MM:SS`, with days in front past one day (`5:00:00:00`)."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}:{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}"


def date_text(timestamp: float | None, tz: datetime.tzinfo | None = None) -> str:
    """`Thu Mar 24 10:50:09` (local time unless `tz` is given)."""
    if timestamp is None:
        return ""
    moment = datetime.datetime.fromtimestamp(timestamp, tz) if tz else \
        datetime.datetime.fromtimestamp(timestamp)
    return moment.strftime("%a %b %d %H:%M:%S")


def _row(job_id: str, owner: str, state: str, cpus: int, clock: str, date: str) -> str:
    return f"{job_id:<12} {owner:>8} {state:>9} {cpus:>4}  {clock:>10}  {date}"


def _header(last: str) -> str:
    return (f"{'JOBNAME':<12} {'USERNAME':>8} {'STATE':>9} {'PROC':>4}  "
            f"{'REMAINING' if last == 'STARTTIME' else 'WCLIMIT':>10}  {last}")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _active_summary(count: int, processors: tuple[int, int] | None,
                    nodes: tuple[int, int] | None) -> list[str]:
    noun = "Active Job" if count == 1 else "Active Jobs"
    first = f"{count:6d} {noun:<11}"
    if processors is None:
        return [first]
    used, total = processors
    percent = 100.0 * used / total if total else 0.0
    lines = [f"{first}   {used:5d} of {total:4d} Processors Active ({percent:.2f}%)"]
    if nodes is not None:
        busy, machines = nodes
        share = 100.0 * busy / machines if machines else 0.0
        lines.append(f"{'':20}{busy:6d} of {machines:4d} Nodes Active      ({share:.2f}%)")
    return lines


def showq_text(jobs: Sequence[QueuedJob], now: float, idle_order: Sequence[str] = (),
               processors: tuple[int, int] | None = None, nodes: tuple[int, int] | None = None,
               tz: datetime.tzinfo | None = None) -> str:
    """The three parts and the totals line. `idle_order` lists idle job ids best
    first (a pass's order); `processors` and `nodes` are (busy, total) of the pool."""
    active = sorted((job for job in jobs if job.state in ACTIVE),
                    key=lambda job: (job.remaining_s(now), job_id_key(job.job_id)))
    rank = {job_id: place for place, job_id in enumerate(idle_order)}
    idle = sorted((job for job in jobs if job.state is State.IDLE),
                  key=lambda job: (rank.get(job.job_id, len(rank)), -job.prio_group, job.order))
    blocked = sorted((job for job in jobs if job.state in (State.BLOCKED, State.HELD)),
                     key=lambda job: job_id_key(job.job_id))
    lines = [ACTIVE_HEADER, _header("STARTTIME"), ""]
    lines += [_row(job.job_id, job.owner, _STATE_WORDS[job.state], job.cpus,
                   clock_text(job.remaining_s(now)), date_text(job.started_at, tz))
              for job in active]
    lines += ["", *_active_summary(len(active), processors, nodes), ""]
    for header, part in ((IDLE_HEADER, idle), (BLOCKED_HEADER, blocked)):
        lines += [header, _header("QUEUETIME"), ""]
        lines += [_row(job.job_id, job.owner, _STATE_WORDS[job.state], job.cpus,
                       clock_text(job.walltime_s), date_text(job.queued_at, tz))
                  for job in part]
        lines.append("")
        if part is idle:
            lines += [_plural(len(idle), "Idle Job"), ""]
    lines.append(f"Total Jobs: {len(active) + len(idle) + len(blocked)}   "
                 f"Active Jobs: {len(active)}   Idle Jobs: {len(idle)}   "
                 f"Blocked Jobs: {len(blocked)}")
    return "\n".join(lines) + "\n"

