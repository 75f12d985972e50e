"""`fetchwork wait`: condor_wait over a job event log (the submit command `log`).

The log is read with HTCondor's own reader (htcondor2.JobEventLog); which
jobs to wait for and when the wait is over is logwait.py's decision.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import click
import htcondor2

from fetchwork.config.protocol import parse_job_id
from fetchwork.errors import UserLogError
from fetchwork.submit import transferwait
from fetchwork.submit.logwait import EXECUTE, LogWait, Outcome
from fetchwork.submit.options import CondorCommand

# Longest single block on the log (s): the reader's deadline is whole seconds.
READ_SLICE_S = 1


def _open(path: str) -> htcondor2.JobEventLog:
    if not os.path.isfile(path):
        raise UserLogError(f"cannot open the job event log {path}: no such file")
    try:
        return htcondor2.JobEventLog(path)
    except htcondor2.HTCondorException as exc:
        first = str(exc).split(".  ")[0]
        raise UserLogError(f"cannot read the job event log {path}: {first}") from exc


def _watch(reader: htcondor2.JobEventLog, wait: LogWait, deadline: float | None,
           status: bool, on_end: Callable[[str], None] = lambda _job: None) -> Outcome:
    """Read events until the wait is over or `deadline` (monotonic) passes; `on_end`
    gets each waited-for job that terminated."""
    scanned = False
    while True:
        budget = 0 if not scanned else READ_SLICE_S
        if deadline is not None and scanned:
            budget = max(0, min(READ_SLICE_S, int(deadline - time.monotonic() + 0.999)))
        for event in reader.events(stop_after=budget):
            host = event.get("ExecuteHost", "") if int(event.type) == EXECUTE else ""
            line = wait.see(int(event.type), event.cluster, event.proc, str(host))
            if event.type == htcondor2.JobEventType.JOB_TERMINATED \
                    and wait.matches(event.cluster, event.proc):
                on_end(f"{event.cluster}.{event.proc}")
            if line and status:
                click.echo(line)
            outcome = wait.outcome(scanned)
            if outcome is not None:
                return outcome
        scanned = True
        outcome = wait.outcome(scanned)
        if outcome is not None:
            return outcome
        if deadline is not None and time.monotonic() >= deadline:
            return Outcome.TIME_EXPIRED


@click.command("wait", cls=CondorCommand)
@click.option("-wait", "--wait", "wait_s", type=click.IntRange(min=0), metavar="SECONDS",
              help="Give up after this many seconds (exit status 1). Default: no limit.")
@click.option("-num", "--num", type=click.IntRange(min=1), metavar="N",
              help="Return when N jobs have ended. Default: all jobs of the log.")
@click.option("-status", "--status", is_flag=True,
              help="Print each job's submission, start and end as the log shows them.")
@click.argument("logfile", type=click.Path(dir_okay=False))
@click.argument("job_id", required=False)
def wait_command(wait_s: int | None, num: int | None, status: bool, logfile: str,
                 job_id: str | None) -> None:
    """Wait for the jobs of the job event log LOGFILE to end, as condor_wait does.

    LOGFILE is the file a submit description's `log` command names; the broker
    service writes it as the jobs go. A job ends when the log shows it
    terminated (005) or aborted (009); a job that returned files (file transfer)
    has them written into its initialdir as it terminates. JOB_ID limits the wait to one cluster
    (`12`) or one job (`12.3`); without it every job the log names is waited for.

    \b
    Exit status:
      0  the jobs (or N of them, with -num) have ended
      1  -wait's time expired, the log does not mention the job(s),
         or the log cannot be read

    \b
    Examples:
      fetchwork wait job.log            every job of the log
      fetchwork wait job.log 40         every job of cluster 40
      fetchwork wait -num 2 job.log     any two jobs
      fetchwork wait -wait 3600 job.log 40.1
    """
    cluster, proc = parse_job_id(job_id) if job_id is not None else (None, None)
    wait = LogWait(cluster=cluster, proc=proc, num=num)
    deadline = None if wait_s is None else time.monotonic() + wait_s
    reader = _open(logfile)
    outputs = transferwait.OutputsAsJobsEnd()
    try:
        outcome = _watch(reader, wait, deadline, status, outputs.ended)
    finally:
        reader.close()
    click.echo(wait.message(outcome))
    if not outcome.ok:
        raise click.exceptions.Exit(1)
