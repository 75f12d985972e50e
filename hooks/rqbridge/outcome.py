"""What the exit hook records in rq for how the job left its slot (pure).

The job's process (horse.py) records every outcome it lives to see with rq's
own worker code: `finished` with the return value, `failed` with the
traceback (rq's timeout included: its death penalty fires inside the
process), a `Retry`, dependents, callbacks. The exit hook then only records
what that process could not:

- `exit` with status 0: nothing, the process recorded the outcome.
- `exit` otherwise (killed by a signal, out of memory, crashed before rq got
  control), or `evict` after the bridge killed the job as rq's worker kills a
  horse (60 s past its timeout, or rq's `kill-horse` command): what rq's
  worker does when its work horse dies
  (`monitor_work_horse`): unless the job is already `finished` or `failed`,
  it fails with "Work-horse terminated unexpectedly; waitpid returned ...".
- `evict` otherwise (the startd stops, a higher-ranked job preempts, the slot
  is vacated): the job did not fail, the machine went away; as HTCondor
  does with an evicted job it goes back to its queue, at the front, when it
  is still `started` (it was not done).
- `remove` (rq's `stop-job` command, or the startd removed the job): as rq's
  worker does with a stopped job: `stopped`, with rq's message and the job's
  `on_stopped` callback.
- `hold` (the starter held the job, e.g. MEMORY_LIMIT_POLICY = hold): rq has
  no hold; the job fails with the hold reason.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from fetchwork.config.protocol import EVICT, EXIT, HOLD, REMOVE

# Statuses after which nothing is recorded (rq's monitor checks the first two).
DONE_STATUSES = ("finished", "failed", "stopped", "canceled")


class Record(enum.Enum):
    NOTHING = "nothing"
    FAIL = "fail"          # handle_job_failure with the reason
    REQUEUE = "requeue"    # back to the front of its queue
    STOP = "stop"          # rq's stopped job


@dataclass(frozen=True)
class Decision:
    record: Record
    reason: str = ""


def wait_status(exit_code: int | None, exit_signal: int | None) -> int:
    """The raw waitpid status rq's worker would have seen (it prints that number)."""
    if exit_signal is not None:
        return exit_signal & 0x7F
    return ((exit_code or 0) & 0xFF) << 8


def terminated_reason(status: int) -> str:
    """rq's text for a work horse that died without recording its job's outcome."""
    signal_msg = f" (signal {os.WTERMSIG(status)})" if status and os.WIFSIGNALED(status) else ""
    return f"Work-horse terminated unexpectedly; waitpid returned {status}{signal_msg}; "


STOPPED_REASON = "Job stopped by user, work-horse terminated."


def decide(how: str, status: str | None, exit_code: int | None, exit_signal: int | None,
           killed: bool, hold_reason: str | None = None) -> Decision:
    """What to record for a job that left its slot `how` (the exit hook's word), whose
    rq status is now `status` (None: the slot's execution of it is gone from rq: the
    outcome is recorded, or rq's cleanup took the job back, or it no longer exists)."""
    if status is None or status in DONE_STATUSES:
        return Decision(Record.NOTHING)
    if how == EXIT and exit_signal is None and exit_code == 0:
        return Decision(Record.NOTHING)
    if how == EXIT or (how == EVICT and killed):
        return Decision(Record.FAIL, terminated_reason(wait_status(exit_code, exit_signal)))
    if how == EVICT:
        return Decision(Record.REQUEUE if status == "started" else Record.NOTHING)
    if how == REMOVE:
        return Decision(Record.STOP, STOPPED_REASON)
    if how == HOLD:
        why = hold_reason or "no reason given"
        return Decision(Record.FAIL, f"held on the execute machine: {why}")
    raise ValueError(f"unknown way to leave a slot: {how!r}")
