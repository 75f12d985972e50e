"""`fetchwork submit`: HTCondor submit descriptions or one command line into
the queue, and `--wait` to follow the jobs to their end."""

from __future__ import annotations

import getpass
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fetchwork.broker.client import Broker
from fetchwork.config.ads import format_ad, from_dict
from fetchwork.config.protocol import JobStatus, job_id_key
from fetchwork.errors import SubmitFileError
from fetchwork.submit import poolcheck, reading, submitting, tables, transfercli, userlogsync
from fetchwork.submit.options import CondorCommand
from fetchwork.submit.rootwarning import warn_if_root
from fetchwork.submit.submitfile import ParsedSubmit, command_jobs, parse_submit
from fetchwork.submit.submitting import await_verdicts, queue_description
from fetchwork.submit.usercli import (
    FINISHED_STATES,
    FINISHED_STATUS,
    RECONCILE_S,
    WAIT_BLOCK_MS,
    connect_broker,
)

log = logging.getLogger(__name__)


# -- submit -----------------------------------------------------------------------

class _SubmitCommand(CondorCommand):
    """Everything after `--` is the job's command line, kept out of option parsing."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["fetchwork.command"] = list(args[cut + 1:])
            args = args[:cut]
        return super().parse_args(ctx, args)


def _command_options(values: Mapping[str, Any]) -> dict[str, str]:
    commands: dict[str, str] = {}
    for option, command in (("output", "output"), ("error", "error"), ("input", "input"),
                            ("initialdir", "initialdir"), ("priority", "priority"),
                            ("request_cpus", "request_cpus"),
                            ("request_memory", "request_memory"),
                            ("requirements", "requirements"), ("batch_name", "batch_name")):
        if values.get(option) is not None:
            commands[command] = str(values[option])
    if values.get("hold"):
        commands["hold"] = "true"
    for line in values.get("append") or ():
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise SubmitFileError(f"-append {line!r} is not 'command = value'")
        commands[name.strip()] = value.strip()
    return commands


@click.command("submit", cls=_SubmitCommand)
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-w", "--wait", is_flag=True,
              help="Show progress until every job has finished; exit 1 if any failed.")
@click.option("--no-wait", is_flag=True,
              help="Return at once, without waiting for the verdict of the pool's "
                   "submission filters.")
@click.option("--wait-timeout", type=float, default=None, metavar="SECONDS",
              help="With --wait: give up after this long (exit 2).")
@click.option("-n", "--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="With -- CMD: how many jobs to queue.")
@click.option("--output", help="The job's stdout file ($(Process) expands).")
@click.option("--error", help="The job's stderr file.")
@click.option("--input", help="The job's stdin file.")
@click.option("--initialdir", help="The job's working directory.")
@click.option("--priority", type=int, help="JobPrio (higher runs first).")
@click.option("--request-cpus", type=int, help="CPUs the job needs.")
@click.option("--request-memory", help="Memory the job needs (MB, or 1G...).")
@click.option("--requirements", help="A ClassAd expression over the slot.")
@click.option("--batch-name", help="JobBatchName.")
@click.option("--hold", is_flag=True, help="Queue the jobs held.")
@click.option("-a", "-append", "--append", "append", multiple=True, metavar="'CMD = VALUE'",
              help="Any other submit command (repeatable).")
@click.option("-spool", "--spool", "spool", is_flag=True,
              help="Keep the jobs' outputs in the pool until `fetchwork transfer-data` "
                   "fetches them (for a broker on another machine); without it, a pool on "
                   "this machine writes them into each job's initialdir as it completes.")
@click.option("-dry-run", "--dry-run", "dry_run", is_flag=True,
              help="Print the job ads the jobs would have; queue nothing.")
@click.pass_context
def submit_command(ctx: click.Context, file: str | None, wait: bool, no_wait: bool,
                   wait_timeout: float | None, **options: Any) -> None:
    """Queue the jobs of an HTCondor submit description FILE ('-': stdin),
    or one command line: `fetchwork submit [OPTIONS] -- CMD ARGS...`.

    Prints how many jobs went to which cluster. A malformed file queues
    nothing and names the line at fault. The job options act as submit
    commands written just before every queue statement of FILE.

    The pool's rules (MAX_WALLTIME, SUBMIT_MAX_JOB_ATTRS, scheduling limits,
    filters, templates) are the ones its broker service published, never this
    machine's configuration: a job they refuse queues nothing and exits 1
    naming the job and the rule. When the pool has submission filters or job
    templates, or its broker service has not published its rules yet, the
    jobs wait (state VALIDATING) for the broker service's verdict; submit
    waits for it while a broker service leads the pool, prints each failed
    job with its reason and exits 1 when any failed (--no-wait returns at
    once).
    """
    argv: list[str] | None = ctx.meta.get("fetchwork.command")
    if (file is None) == (argv is None):
        raise click.UsageError("give either a submit FILE or `-- CMD ARGS...`, not both")
    if argv is None and options["count"] != 1:
        raise click.UsageError("--count applies to `-- CMD` only; a submit file says `queue N`")
    commands = _command_options(options)
    if options.get("dry_run"):
        dry_run(file, argv, commands, options["count"])
        return
    broker = connect_broker()
    # A person's jobs are the person's, whoever is logged in here (docs/trust.md).
    person = broker.person()
    owner = person.name if person is not None else getpass.getuser()
    since_event = broker.last_event_id()
    max_attrs = submitting.max_job_attrs(broker)  # the pool's, not this machine's
    queued = queue_description(
        broker, lambda cluster: (command_jobs(argv, cluster, commands, count=options["count"],
                                              max_attrs=max_attrs)
                                 if argv is not None
                                 else _parse_file(file or "-", cluster, commands, max_attrs)),
        owner, lambda warning: click.echo(f"fetchwork: warning: {warning}", err=True),
        spool=options.get("spool", False),
        say=lambda text: click.echo(f"fetchwork: {text}", err=True))
    cluster, submitted = queued.cluster, queued.submitted
    ids = submitted.job_ids
    click.echo(f"{len(ids)} job(s) submitted to cluster {cluster}.")
    userlogsync.await_logged(broker, queued.user_logs)
    warn_if_root(owner)
    poolcheck.warn_without_startd(broker)
    failed = 0
    if submitted.unpublished:
        poolcheck.say_unpublished(broker, len(ids))
    if not no_wait and submitting.waits_for_verdict(broker, submitted):
        failed = report_verdicts(broker, cluster, ids, since_event)
    if wait:
        try:
            status = wait_for_cluster(broker, cluster, ids, since_event, wait_timeout)
        except KeyboardInterrupt:
            click.echo(f"stopped waiting; the jobs of cluster {cluster} stay queued", err=True)
            status = 130
        ctx.exit(max(status, 1 if failed else 0))
    if failed:
        ctx.exit(1)


def report_verdicts(broker: Broker, cluster: int, job_ids: Sequence[str],
                    since_event: str) -> int:
    """Wait for the submission filters' verdict on every job; print the failed
    ones with their reasons and what was queued. Returns how many failed."""
    click.echo("waiting for the pool's broker to admit the jobs...", err=True)
    failed = await_verdicts(broker, job_ids, since_event)
    for job in sorted(failed, key=job_id_key):
        click.echo(f"Job {job} failed: {failed[job]}")
    click.echo(f"{len(job_ids) - len(failed)} job(s) queued in cluster {cluster}"
               + (f"; {len(failed)} failed." if failed else "."))
    return len(failed)


def _parse_file(path: str, cluster: int, commands: Mapping[str, str],
                max_attrs: int | None = None) -> ParsedSubmit:
    try:
        if path == "-":
            text, source = sys.stdin.read(), "<stdin>"
        else:
            with open(path, encoding="utf-8") as handle:
                text, source = handle.read(), path
    except OSError as exc:
        raise SubmitFileError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise SubmitFileError(f"{path} is not UTF-8 text") from exc
    return parse_submit(text, cluster, submit_dir=os.getcwd(), source=source,
                        extra=commands, max_attrs=max_attrs)


def job_failed(ad: Any) -> bool:
    """Removed, failed, held, killed by a signal, or a non-zero exit code."""
    status = tables.value(ad, "JobStatus")
    if status != JobStatus.COMPLETED:
        return True
    if tables.value(ad, "ExitBySignal") is True:
        return True
    return tables.value(ad, "ExitCode") not in (0, None)


def wait_for_cluster(broker: Broker, cluster: int, job_ids: Sequence[str], since_event: str,
                     timeout_s: float | None = None) -> int:
    """Show progress until no job of `cluster` is idle or running; the exit status:
    0 all succeeded, 1 some failed (or are held), 2 timed out.

    Progress follows the event stream from `since_event` (taken before the
    submission), with a full look at the cluster every RECONCILE_S."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    tracker = ClusterProgress(job_ids)
    console = Console(stderr=True, highlight=False)
    columns = (TextColumn("[bold]cluster {task.fields[cluster]}"), BarColumn(),
               MofNCompleteColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    fetched: set[str] = set()
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("", total=len(job_ids), cluster=cluster)
        reconciled_at = -RECONCILE_S
        while True:
            fetched |= transfercli.fetch_ended(broker, tracker.ended(), fetched)
            if time.monotonic() - reconciled_at >= RECONCILE_S or tracker.settled():
                tracker.reconcile([ad for ad in reading.jobs(broker, job_ids)
                                   if not reading.is_finished(ad)])
                reconciled_at = time.monotonic()
            progress.update(task, completed=tracker.finished(), description=tracker.summary())
            if tracker.settled():
                break
            if deadline is not None and time.monotonic() >= deadline:
                console.print(f"gave up waiting after {timeout_s:g}s; "
                              f"{len(job_ids) - tracker.finished()} job(s) still queued")
                return 2
            for event_id, fields in broker.events(since_event, block_ms=WAIT_BLOCK_MS,
                                                  count=1000):
                since_event = event_id
                tracker.saw(fields)
    transfercli.fetch_ended(broker, tracker.ended(), fetched)
    return _report(console, reading.jobs(broker, job_ids))


class ClusterProgress:
    """JobStatus of each job of one submission, from events and full looks."""

    def __init__(self, job_ids: Sequence[str]):
        self.status = dict.fromkeys(job_ids, 1)

    def saw(self, event: Mapping[str, str]) -> None:
        job = event.get("job")
        if job in self.status:
            state = event.get("state", "")
            status = event.get("status", "")
            self.status[job] = (FINISHED_STATUS if state in FINISHED_STATES
                                else int(status) if status.isdigit() else self.status[job])

    def reconcile(self, live: Sequence[Any]) -> None:
        """Jobs absent from the queue have finished; the others have the status shown."""
        queued = {tables.job_id(ad): tables.value(ad, "JobStatus") for ad in live}
        for job in self.status:
            found = queued.get(job)
            self.status[job] = found if isinstance(found, int) else FINISHED_STATUS

    def finished(self) -> int:
        return sum(1 for status in self.status.values() if status == FINISHED_STATUS)

    def ended(self) -> set[str]:
        """The jobs that have left the queue."""
        return {job for job, status in self.status.items() if status == FINISHED_STATUS}

    def settled(self) -> bool:
        """Nothing idle, running or suspended is left."""
        return all(status in (FINISHED_STATUS, JobStatus.HELD) for status in self.status.values())

    def summary(self) -> str:
        running = sum(1 for status in self.status.values()
                      if status in (JobStatus.RUNNING, JobStatus.SUSPENDED))
        held = sum(1 for status in self.status.values() if status == JobStatus.HELD)
        idle = len(self.status) - running - held - self.finished()
        return f"{running} running, {idle} idle" + (f", {held} held" if held else "")


def _report(console: Console, ads: Sequence[Any]) -> int:
    failed = sorted((ad for ad in ads if job_failed(ad)), key=tables.job_id)
    if not failed:
        console.print(f"all {len(ads)} job(s) completed with exit code 0")
        return 0
    shown = ", ".join(f"{tables.job_id(ad)} ({_why(ad)})" for ad in failed[:10])
    more = f" and {len(failed) - 10} more" if len(failed) > 10 else ""
    console.print(f"{len(failed)} of {len(ads)} job(s) did not succeed: {shown}{more}")
    return 1


def _why(ad: Any) -> str:
    status = tables.value(ad, "JobStatus")
    if status == JobStatus.HELD:
        return "held"
    if status == JobStatus.REMOVED:
        return "removed"
    if status != JobStatus.COMPLETED:
        return f"status {status}"
    return f"exit {tables.exit_text(ad)}"



def dry_run(file: str | None, argv: list[str] | None, commands: Mapping[str, str],
            count: int) -> None:
    """condor_submit -dry-run: the job ads, as old-format ads, with cluster 1; nothing queued."""
    cluster = 1
    parsed = (command_jobs(argv, cluster, commands, count=count) if argv is not None
              else _parse_file(file or "-", cluster, commands))
    for warning in parsed.warnings:
        click.echo(f"fetchwork: warning: {warning}", err=True)
    for proc, data in enumerate(parsed.ads):
        ad = from_dict({**data, "ClusterId": cluster, "ProcId": proc,
                        "Owner": getpass.getuser()})
        click.echo(format_ad(ad))
    click.echo(f"{len(parsed.ads)} job(s) dry-run to cluster {cluster}.")
