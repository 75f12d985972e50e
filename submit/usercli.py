"""The user's commands that look at and act on the queue: q, history, rm, hold,
release, status (submit has its own module).

Each command talks to the queue through `Broker` only, found with
`Broker.from_config()` (FETCHWORK_BROKER, else the embedded Redis of the
state directory). Options keep condor_q's single-dash spellings
(`-constraint`, `-all`, `-reason`) beside the double-dash ones.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import classad2
import click
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from fetchwork.broker.client import Broker
from fetchwork.broker.store.holdtime import format_hold_until, hold_for
from fetchwork.broker.store.holdtime import hold_until as parse_until
from fetchwork.broker.store.states import FINISHED
from fetchwork.broker.trust.people import identity_line
from fetchwork.config.ads import format_ad, from_dict
from fetchwork.config.loader import Config
from fetchwork.config.protocol import JobStatus, parse_job_id
from fetchwork.errors import FetchworkError
from fetchwork.submit import formats, outputsnote, poolcheck, qviews, reading, tables
from fetchwork.submit.options import CondorCommand

log = logging.getLogger(__name__)

# Longest block on the event stream while waiting, and the interval of full looks.
WAIT_BLOCK_MS = 1000
RECONCILE_S = 5.0
FINISHED_STATUS = 0
FINISHED_STATES = frozenset(state.value for state in FINISHED)
PIPE_WIDTH = 200
ACTIVE = (JobStatus.IDLE, JobStatus.RUNNING, JobStatus.SUSPENDED)


def connect_broker() -> Broker:
    # Read the configuration afresh: each command is one request of its own.
    config = Config.load()
    poolcheck.start_queue(config)
    return Broker.from_config(config)


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
    return json.dumps([_json_ready(ad) for ad in ads], indent=2)


def _json_ready(ad: Any) -> Any:
    ready = formats.json_ready(ad) if type(ad) is dict else None
    return ready if ready is not None else json.loads(_as_ad(ad).printJson())


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


def held_only(constraint: str | None) -> str:
    """condor_q -hold: held jobs only (and `constraint`)."""
    held = f"JobStatus == {int(JobStatus.HELD)}"
    return f"{held} && ({constraint})" if constraint else held


def _show_jobs(ads: Sequence[Any], as_json: bool, long: bool, history: bool,
               held: bool = False) -> None:
    if as_json:
        click.echo(ads_json(ads))
        return
    if long:
        click.echo("\n".join(format_ad(_as_ad(ad)) for ad in ads), nl=False)
        return
    if not held:
        click.echo(formats.job_lines(ads, time.time(), history, formats.output_width()))
        click.echo(tables.queue_summary(ads))
        return
    console = table_console()
    console.print(tables.hold_table(ads, time.time()))
    console.print()
    console.print(tables.queue_summary(ads))
    for line in [] if history else tables.hold_until_lines(ads):
        console.print(line)


# -- q and history ------------------------------------------------------------------

_constraint_option = click.option("-constraint", "--constraint", "constraint", metavar="EXPR",
                                  help="Only jobs for which this ClassAd expression is true.")
_json_option = click.option("-json", "--json", "as_json", is_flag=True,
                            help="A JSON list of job ads (HTCondor attribute names).")
_long_option = click.option("-l", "-long", "--long", "long", is_flag=True,
                            help="Every attribute of every job, as old-format ads.")


@click.command("q", cls=CondorCommand)
@click.argument("ids", nargs=-1)
@_constraint_option
@_json_option
@_long_option
@click.option("-w", "--watch", is_flag=True,
              help="A live table, redrawn as jobs change, until none is idle or running.")
@click.option("-hold", "--hold", "held", is_flag=True,
              help="Only held jobs, with when and why they were held.")
@click.option("-showq", "--showq", "policy", flag_value="showq",
              help="Maui's view: active, idle and blocked jobs, with the totals line.")
@click.option("-analyze", "--analyze", "policy", flag_value="analyze",
              help="Why each job of IDS is not running: the policy limit and its numbers, "
                   "the Requirements clause no slot meets, the jobs ahead, the hold.")
@click.option("-priority", "--priority", "policy", flag_value="priority",
              help="Waiting jobs best first, with each priority factor's contribution.")
@qviews.q_view_options
def q_command(ids: tuple[str, ...], constraint: str | None, as_json: bool, long: bool,
              watch: bool, held: bool, policy: str | None, **view: Any) -> None:
    """List jobs in the queue (idle, running, held), optionally only IDS (C or C.P).

    Without IDS, one line per batch (a cluster, or the jobs of one
    batch_name) as condor_q shows by default; -nobatch for one line per job.
    """
    if policy is not None:
        policy_view(policy, ids)
        return
    broker = connect_broker()
    if view["better_analyze"]:
        qviews.better_analyze(broker, view["better_analyze"])
        return
    if watch:
        selection = id_constraint(ids, constraint)
        watch_queue(broker, held_only(selection) if held else selection, table_console())
        return
    ads = reading.queue_jobs(broker, ids, constraint,
                             qviews.queue_fields(view, as_json or long or held, bool(ids)))
    if held:
        ads = [ad for ad in ads if tables.value(ad, "JobStatus") == JobStatus.HELD]
    if view["running"]:
        ads = qviews.only_running(ads)
    if as_json or long or (held and not qviews.custom(view)):
        _show_jobs(ads, as_json, long, history=False, held=held)
        return
    qviews.show_queue(ads, view, per_job=bool(ids))
    _outputs_note(broker)


def _outputs_note(broker: Broker) -> None:
    """Jobs whose outputs wait to be fetched (file transfer), under the table."""
    for line in outputsnote.waiting_note(broker):
        click.echo(line)


def policy_view(view: str, ids: Sequence[str]) -> None:
    """q -showq, -analyze IDS or -priority (submit/schedview.py)."""
    from fetchwork.broker.scheduling.settings import scheduling_settings

    from . import schedview

    config = Config.load()
    broker, settings = Broker.from_config(config), scheduling_settings(config)
    if view == "showq":
        click.echo(schedview.showq(broker, settings), nl=False)
    elif view == "priority":
        table_console().print(schedview.priority_table(broker, settings))
    elif not ids:
        raise click.UsageError("-analyze needs job ids (C.P)")
    else:
        for job_id in ids:
            click.echo(schedview.analyze(broker, settings, job_id.strip()))


def _queue_view(ads: Sequence[Any], width: int | None = None) -> Group:
    return Group(Text(formats.job_lines(ads, time.time(), width=width).rstrip("\n")), "",
                 tables.queue_summary(ads))


def watch_queue(broker: Broker, constraint: str | None, console: Console) -> None:
    """Redraw the queue whenever an event arrives (at least every second) until
    no selected job is idle, running or suspended. Output that is not a
    terminal gets only the final table."""
    since_event = broker.last_event_id()
    with Live(console=console, auto_refresh=False, transient=not console.is_terminal) as live:
        while True:
            ads = sorted(queued(broker, constraint), key=_order)
            if console.is_terminal:
                live.update(_queue_view(ads, console.width), refresh=True)
            if all(tables.value(ad, "JobStatus") not in ACTIVE for ad in ads):
                break
            events = broker.events(since_event, block_ms=WAIT_BLOCK_MS, count=10000)
            if events:
                since_event = events[-1][0]
    if not console.is_terminal:
        console.print(_queue_view(ads))


@click.command("history", cls=CondorCommand)
@click.argument("ids", nargs=-1)
@_constraint_option
@click.option("-limit", "--limit", type=click.IntRange(min=1), help="At most this many jobs.")
@_json_option
@_long_option
@qviews.history_view_options
def history_command(ids: tuple[str, ...], constraint: str | None, limit: int | None,
                    as_json: bool, long: bool, **view: Any) -> None:
    """List finished jobs (completed, removed, failed), newest first."""
    broker = connect_broker()
    ads = qviews.history_reading(broker, ids, constraint, limit, view, as_json or long)
    if qviews.custom(view) and not (as_json or long):
        qviews.show_custom(ads, view)
        return
    _show_jobs(ads, as_json, long, history=True)
    if not (as_json or long):
        _outputs_note(broker)


def _order(ad: Any) -> tuple[int, int]:
    cluster, proc = tables.value(ad, "ClusterId"), tables.value(ad, "ProcId")
    return (cluster if isinstance(cluster, int) else 0, proc if isinstance(proc, int) else 0)


# -- rm, hold, release -----------------------------------------------------------------

def select_jobs(ids: Sequence[str], constraint: str | None,
                all_jobs: bool) -> tuple[Broker, list[str]]:
    """The broker and the queued jobs a user command names (IDS, -constraint, -all)."""
    if not ids and not constraint and not all_jobs:
        raise click.UsageError("name jobs (C.P), clusters (C), -constraint EXPR or -all")
    broker = connect_broker()
    # A constraint alone ranges over every queued job.
    selected = broker.select(list(ids), constraint=constraint, all_jobs=all_jobs or not ids)
    if not selected:
        raise FetchworkError("no matching jobs")
    return broker, selected


def _act(action: str, ids: Sequence[str], constraint: str | None, all_jobs: bool,
         reason: str | None, hold_until: int | None = None) -> None:
    broker, selected = select_jobs(ids, constraint, all_jobs)
    done = broker.apply(action, selected, reason, hold_until)
    verb = {"remove": "marked for removal", "hold": "held", "release": "released"}[action]
    until = f" until {format_hold_until(hold_until)}" if hold_until is not None else ""
    for job in done:
        click.echo(f"Job {job} {verb}{until}.")
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
    return click.command(name, help=summary, cls=CondorCommand)(command)


rm_command = _action_command(
    "rm", "remove", "Remove jobs: IDS are C.P or whole clusters C; or -constraint, -all.", True)


@click.command("hold")
@click.argument("ids", nargs=-1)
@_constraint_option
@click.option("-all", "--all", "all_jobs", is_flag=True, help="Every job in the queue.")
@click.option("-reason", "--reason", metavar="TEXT", help="Recorded in the job ad.")
@click.option("--for", "for_text", metavar="SECONDS",
              help="End the hold by itself after this long (seconds, or 90s, 10m, 2h).")
@click.option("--until", "until_text", metavar="TIME",
              help='End the hold by itself at TIME: local time ("2026-12-01 08:00") or ISO 8601.')
def hold_command(ids: tuple[str, ...], constraint: str | None, all_jobs: bool,
                 reason: str | None, for_text: str | None, until_text: str | None) -> None:
    """Hold idle or running jobs (a running job is stopped).

    A plain hold stays until `fetchwork release`. With --for or --until the job's
    HoldUntil is set and the broker service releases it by itself when that time
    passes (release still ends it early); a held job gets the new time.
    """
    if for_text is not None and until_text is not None:
        raise click.UsageError("give --for or --until, not both")
    hold_until = None
    if for_text is not None:
        hold_until = hold_for(for_text, time.time())
    elif until_text is not None:
        hold_until = parse_until(until_text, time.time())
    _act("hold", ids, constraint, all_jobs, reason, hold_until)

release_command = _action_command(
    "release", "release", "Release held jobs so they become idle again.", False)


# -- status ---------------------------------------------------------------------------

@click.command("status", cls=CondorCommand)
@_json_option
def status_command(as_json: bool) -> None:
    """List the slots the startds report: name, state, activity, load, memory, job;
    then who this connection acts as (an unauthenticated pool says so)."""
    broker = connect_broker()
    slots = sorted(broker.slots(), key=lambda ad: str(tables.value(ad, "Name") or ""))
    if as_json:
        click.echo(ads_json(slots))
        return
    console = table_console()
    console.print(tables.slot_table(slots))
    console.print()
    console.print(tables.slot_summary(slots))
    console.print(identity_line(broker.client, broker.pool), highlight=False)

