"""The words of `fetchwork q -analyze ID`: why a job is not running.

`analyze_text` takes the job, what the last policy pass said of it, how many
idle jobs are ahead of it and, when the caller matched it against the slots,
the match results (`MatchResults`, with one `ClauseResult` per top-level
clause of its Requirements, as `config.matching.clause_counts` gives them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fetchwork.broker.store.states import State

from .eligibility import Placement
from .limits import number
from .priority import Priority, describe
from .showq import clock_text
from .snapshot import QueuedJob


@dataclass(frozen=True)
class ClauseResult:
    """One top-level `&&` clause of a job's Requirements and how many slots it accepts."""

    clause: str
    slots_matched: int


@dataclass(frozen=True)
class MatchResults:
    """The job matched against the pool's slots."""

    slots: int
    # Slots where both the job's Requirements and the slot's START accept.
    matched: int
    # Slots whose START refuses the job.
    start_refused: int = 0
    clauses: Sequence[ClauseResult] = ()


def match_text(match: MatchResults) -> list[str]:
    """Lines on how the job fares against the slots."""
    noun = "slot" if match.slots == 1 else "slots"
    lines = [f"{match.matched} of {match.slots} {noun} match it."]
    if match.matched:
        return lines
    if match.start_refused:
        lines.append(f"START refuses it on {match.start_refused} of {match.slots} {noun}.")
    failing = [clause for clause in match.clauses if clause.slots_matched < match.slots]
    for clause in failing:
        lines.append(f"Requirements clause `{clause.clause}` accepts "
                     f"{clause.slots_matched} of {match.slots} {noun}.")
    if not match.slots:
        lines.append("No slot is known to the pool.")
    return lines


def analyze_text(job: QueuedJob, now: float, placement: Placement | None = None,
                 priority: Priority | None = None, ahead: int = 0,
                 match: MatchResults | None = None) -> str:
    """Why `job` is where it is, in sentences."""
    head = f"Job {job.job_id} ({job.owner})"
    if job.state in (State.RUNNING, State.SUSPENDED):
        word = "running" if job.state is State.RUNNING else "suspended"
        return (f"{head} is {word}; {clock_text(job.remaining_s(now))} of its "
                f"{clock_text(job.walltime_s)} walltime remain.\n")
    if job.state is State.HELD:
        return (f"{head} is held: {job.hold_reason or 'no reason recorded'}. "
                f"`fetchwork release {job.job_id}` lets it run again.\n")
    lines: list[str] = []
    blocked = placement.state is State.BLOCKED if placement else job.state is State.BLOCKED
    if blocked:
        reason = placement.reason if placement else job.blocked_reason
        lines.append(f"{head} is blocked by policy: {reason or 'no reason recorded'}.")
        if placement.soft if placement is not None else job.soft_blocked:
            lines.append("It is past only a soft limit: a slot that no idle job can use "
                         "may still start it.")
    else:
        lines.append(f"{head} is idle, waiting {clock_text(job.queue_time_s(now))} so far "
                     f"(walltime {clock_text(job.walltime_s)}, PS {number(job.ps)}).")
        if ahead:
            jobs = "job is" if ahead == 1 else "jobs are"
            lines.append(f"{ahead} idle {jobs} ahead of it (higher priority or earlier).")
    if priority is not None:
        lines.append(f"Priority: {describe(priority)}.")
    if match is not None:
        lines += match_text(match)
        if not blocked and match.matched and not ahead:
            lines.append("It is first in line: it starts when a matching slot fetches work.")
    return "\n".join(lines) + "\n"
