"""The user's commands: submit, q, history, rm, hold, release, status.

Each command talks to the queue through `Broker` only, found with
`Broker.from_config()` (FETCHWORK_BROKER, else the embedded Redis of the
state directory). Options keep condor_q's single-dash spellings
(`-constraint`, `-all`, `-reason`) beside the double-dash ones.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import classad2
import click
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fetchwork.broker import tables
from fetchwork.broker.client import Broker
from fetchwork.broker.states import (
    COMPLETED_STATUS,
    FINISHED,
    HELD_STATUS,
    IDLE_STATUS,
    REMOVED_STATUS,
    RUNNING_STATUS,
    SUSPENDED_STATUS,
    parse_job_id,
)
from fetchwork.broker.submitfile import ParsedSubmit, command_jobs, parse_submit
from fetchwork.config.ads import format_ad, from_dict
from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError, SubmitFileError

log = logging.getLogger(__name__)

# Longest block on the event stream while waiting, and the interval of full looks.
WAIT_BLOCK_MS = 1000
RECONCILE_S = 5.0
FINISHED_STATUS = 0
FINISHED_STATES = frozenset(state.value for state in FINISHED)
PIPE_WIDTH = 200
ACTIVE = (IDLE_STATUS, RUNNING_STATUS, SUSPENDED_STATUS)


def _broker() -> Broker:
    # Read the configuration afresh: each command is one request of its own.
    return Broker.from_config(Config.load())


def table_console() -> Console:
    """A console for tables; piped output is not cut to a terminal's width."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=PIPE_WIDTH)
    return console


def _as_ad(ad: Any) -> classad2.ClassAd:
    return ad if isinstance(ad, classad2.ClassAd) else from_dict(ad)


def queued(broker: Broker, constraint: str | None) -> list[Any]:
    """Jobs in the queue; one that finished while the queue was being read is left out."""
    return [ad for ad in broker.query(constraint)
            if tables.value(ad, "FetchworkState") not in FINISHED_STATES]


def ads_json(ads: Sequence[Any]) -> str:
    """A JSON list of ads as HTCondor writes them (`condor_q -json`)."""
    return json.dumps([json.loads(_as_ad(ad).printJson()) for ad in ads], indent=2)


def id_constraint(ids: Sequence[str], constraint: str | None) -> str | None:
    """A ClassAd constraint selecting jobs `C.P` or clusters `C`, and `constraint`."""
    parts = []
    for text in ids:
        cluster, proc = parse_job_id(text)
        parts.append(f"ClusterId == {cluster}" if proc is None
                     else f"(ClusterId == {cluster} && ProcId == {proc})")
    selection = " || ".join(parts)
    if selection and constraint:
        return f"({selection}) && ({constraint})"
    return selection or constraint or None


def _show_jobs(ads: Sequence[Any], as_json: bool, long: bool, history: bool) -> None:
    if as_json:
        click.echo(ads_json(ads))
        return
    if long:
        click.echo("\n".join(format_ad(_as_ad(ad)) for ad in ads), nl=False)
        return
    console = table_console()
    now = time.time()
    console.print(tables.history_table(ads, now) if history else tables.queue_table(ads, now))
    console.print()
    console.print(tables.queue_summary(ads))


# -- submit -----------------------------------------------------------------------

class _SubmitCommand(click.Command):
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
@click.pass_context
def submit_command(ctx: click.Context, file: str | None, wait: bool,
                   wait_timeout: float | None, **options: Any) -> None:
    """Queue the jobs of an HTCondor submit description FILE ('-': stdin),
    or one command line: `fetchwork submit [OPTIONS] -- CMD ARGS...`.

    Prints how many jobs went to which cluster. A malformed file queues
    nothing and names the line at fault. The job options act as submit
    commands written just before every queue statement of FILE.
    """
    argv: list[str] | None = ctx.meta.get("fetchwork.command")
    if (file is None) == (argv is None):
        raise click.UsageError("give either a submit FILE or `-- CMD ARGS...`, not both")
    if argv is None and options["count"] != 1:
        raise click.UsageError("--count applies to `-- CMD` only; a submit file says `queue N`")
    commands = _command_options(options)
    owner = getpass.getuser()
    broker = _broker()
    since_event = broker.last_event_id()
    cluster = broker.next_cluster()
    if argv is not None:
        parsed = command_jobs(argv, cluster, commands, count=options["count"], owner=owner)
    else:
        parsed = _parse_file(file or "-", cluster, owner, commands)
    for warning in parsed.warnings:
        click.echo(f"fetchwork: warning: {warning}", err=True)
    if not parsed.ads:
        raise SubmitFileError("the submit description queues no jobs")
    ids = broker.submit(parsed.ads, owner=owner, cluster_id=cluster)
    click.echo(f"{len(ids)} job(s) submitted to cluster {cluster}.")
    if wait:
        try:
            status = wait_for_cluster(broker, cluster, ids, since_event, wait_timeout)
        except KeyboardInterrupt:
            click.echo(f"stopped waiting; the jobs of cluster {cluster} stay queued", err=True)
            status = 130
        ctx.exit(status)


def _parse_file(path: str, cluster: int, owner: str,
                commands: Mapping[str, str]) -> ParsedSubmit:
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
    return parse_submit(text, cluster, submit_dir=os.getcwd(), owner=owner, source=source,
                        extra=commands)


def job_failed(ad: Any) -> bool:
    """Removed, failed, held, killed by a signal, or a non-zero exit code."""
    status = tables.value(ad, "JobStatus")
    if status != COMPLETED_STATUS:
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
    constraint = f"ClusterId == {cluster}"
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    tracker = ClusterProgress(job_ids)
    console = Console(stderr=True, highlight=False)
    columns = (TextColumn("[bold]cluster {task.fields[cluster]}"), BarColumn(),
               MofNCompleteColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("", total=len(job_ids), cluster=cluster)
        reconciled_at = -RECONCILE_S
        while True:
            if time.monotonic() - reconciled_at >= RECONCILE_S or tracker.settled():
                tracker.reconcile(queued(broker, constraint))
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
    return _report(console, broker.history(constraint) + queued(broker, constraint))


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

    def settled(self) -> bool:
        """Nothing idle, running or suspended is left."""
        return all(status in (FINISHED_STATUS, HELD_STATUS) for status in self.status.values())

    def summary(self) -> str:
        running = sum(1 for status in self.status.values()
                      if status in (RUNNING_STATUS, SUSPENDED_STATUS))
        held = sum(1 for status in self.status.values() if status == HELD_STATUS)
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
    if status == HELD_STATUS:
        return "held"
    if status == REMOVED_STATUS:
        return "removed"
    if status != COMPLETED_STATUS:
        return f"status {status}"
    return f"exit {tables.exit_text(ad)}"


# -- q and history ------------------------------------------------------------------

_constraint_option = click.option("-constraint", "--constraint", "constraint", metavar="EXPR",
                                  help="Only jobs for which this ClassAd expression is true.")
_json_option = click.option("-json", "--json", "as_json", is_flag=True,
                            help="A JSON list of job ads (HTCondor attribute names).")
_long_option = click.option("-l", "-long", "--long", "long", is_flag=True,
                            help="Every attribute of every job, as old-format ads.")


@click.command("q")
@click.argument("ids", nargs=-1)
@_constraint_option
@_json_option
@_long_option
@click.option("-w", "--watch", is_flag=True,
              help="A live table, redrawn as jobs change, until none is idle or running.")
def q_command(ids: tuple[str, ...], constraint: str | None, as_json: bool, long: bool,
              watch: bool) -> None:
    """List jobs in the queue (idle, running, held), optionally only IDS (C or C.P)."""
    broker = _broker()
    selection = id_constraint(ids, constraint)
    if watch:
        watch_queue(broker, selection, table_console())
        return
    _show_jobs(sorted(queued(broker, selection), key=_order), as_json, long, history=False)


def _queue_view(ads: Sequence[Any]) -> Group:
    return Group(tables.queue_table(ads, time.time()), "", tables.queue_summary(ads))


def watch_queue(broker: Broker, constraint: str | None, console: Console) -> None:
    """Redraw the queue whenever an event arrives (at least every second) until
    no selected job is idle, running or suspended. Output that is not a
    terminal gets only the final table."""
    since_event = broker.last_event_id()
    with Live(console=console, auto_refresh=False, transient=not console.is_terminal) as live:
        while True:
            ads = sorted(queued(broker, constraint), key=_order)
            if console.is_terminal:
                live.update(_queue_view(ads), refresh=True)
            if all(tables.value(ad, "JobStatus") not in ACTIVE for ad in ads):
                break
            events = broker.events(since_event, block_ms=WAIT_BLOCK_MS, count=10000)
            if events:
                since_event = events[-1][0]
    if not console.is_terminal:
        console.print(_queue_view(ads))


@click.command("history")
@click.argument("ids", nargs=-1)
@_constraint_option
@click.option("-limit", "--limit", type=click.IntRange(min=1), help="At most this many jobs.")
@_json_option
@_long_option
def history_command(ids: tuple[str, ...], constraint: str | None, limit: int | None,
                    as_json: bool, long: bool) -> None:
    """List finished jobs (completed, removed, failed), newest first."""
    ads = _broker().history(id_constraint(ids, constraint), limit=limit)
    _show_jobs(ads, as_json, long, history=True)


def _order(ad: Any) -> tuple[int, int]:
    cluster, proc = tables.value(ad, "ClusterId"), tables.value(ad, "ProcId")
    return (cluster if isinstance(cluster, int) else 0, proc if isinstance(proc, int) else 0)


# -- rm, hold, release -----------------------------------------------------------------

def _act(action: str, ids: Sequence[str], constraint: str | None, all_jobs: bool,
         reason: str | None) -> None:
    if not ids and not constraint and not all_jobs:
        raise click.UsageError("name jobs (C.P), clusters (C), -constraint EXPR or -all")
    broker = _broker()
    # A constraint alone ranges over every queued job.
    selected = broker.select(list(ids), constraint=constraint, all_jobs=all_jobs or not ids)
    if not selected:
        raise FetchworkError("no matching jobs")
    if action == "remove":
        done = broker.remove(selected, reason=reason)
    elif action == "hold":
        done = broker.hold(selected, reason=reason)
    else:
        done = broker.release(selected)
    verb = {"remove": "marked for removal", "hold": "held", "release": "released"}[action]
    for job in done:
        click.echo(f"Job {job} {verb}.")
    skipped = len(selected) - len(done)
    if skipped:
        click.echo(f"fetchwork: {skipped} matching job(s) could not be {verb.split()[-1]}",
                   err=True)
    if not done:
        raise SystemExit(1)


def _action_command(name: str, action: str, summary: str, with_reason: bool) -> click.Command:
    @click.argument("ids", nargs=-1)
    @_constraint_option
    @click.option("-all", "--all", "all_jobs", is_flag=True, help="Every job in the queue.")
    def command(ids: tuple[str, ...], constraint: str | None, all_jobs: bool,
                reason: str | None = None) -> None:
        _act(action, ids, constraint, all_jobs, reason)

    if with_reason:
        command = click.option("-reason", "--reason", metavar="TEXT",
                               help="Recorded in the job ad.")(command)
    return click.command(name, help=summary)(command)


rm_command = _action_command(
    "rm", "remove", "Remove jobs: IDS are C.P or whole clusters C; or -constraint, -all.", True)
hold_command = _action_command(
    "hold", "hold", "Hold idle or running jobs (a running job is stopped).", True)
release_command = _action_command(
    "release", "release", "Release held jobs so they become idle again.", False)


# -- status ---------------------------------------------------------------------------

@click.command("status")
@_json_option
def status_command(as_json: bool) -> None:
    """List the slots the startds report: name, state, activity, load, memory, job."""
    slots = sorted(_broker().slots(), key=lambda ad: str(tables.value(ad, "Name") or ""))
    if as_json:
        click.echo(ads_json(slots))
        return
    console = table_console()
    console.print(tables.slot_table(slots))
    console.print()
    console.print(tables.slot_summary(slots))


COMMANDS = [submit_command, q_command, history_command, rm_command, hold_command,
            release_command, status_command]
