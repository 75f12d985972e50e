"""The options of `fetchwork q` and `history` that choose a view, and showing it:
the batch view (q's default), `-nobatch`, `-run`, `-totals`, `-af`, `-format`,
`-better-analyze ID`, and history's `-match N`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from fetchwork.broker.client import Broker
from fetchwork.config.ads import from_dict
from fetchwork.config.loader import Config
from fetchwork.config.protocol import JobStatus, parse_job_id
from fetchwork.errors import FetchworkError
from fetchwork.submit import analyze, formats, reading, tables

F = TypeVar("F", bound=Callable[..., Any])


def _columns_options(function: F) -> F:
    for decorator in reversed((
        click.option("-af", "-autoformat", "--autoformat", "autoformat", multiple=True,
                     metavar="ATTR...", help="Print these attributes (or expressions) of each "
                     "job, space-separated, one job a line (condor_q -af)."),
        click.option("-format", "--format", "format_pairs", nargs=2, multiple=True,
                     metavar="FMT ATTR", help="Print ATTR through the printf-style FMT "
                     "(%d %s %f %v...; \\n for a new line); repeatable, as condor_q -format."),
    )):
        function = decorator(function)
    return function


def q_view_options(function: F) -> F:
    """The view options of `fetchwork q`."""
    for decorator in reversed((
        click.option("-nobatch", "--nobatch", is_flag=True,
                     help="One line per job instead of one per batch."),
        click.option("-batch", "--batch", is_flag=True,
                     help="One line per batch (the default without IDS)."),
        click.option("-run", "--run", "running", is_flag=True,
                     help="Only running jobs, with the slot each runs in."),
        click.option("-totals", "--totals", is_flag=True,
                     help="Only the line of totals."),
        click.option("-better-analyze", "--better-analyze", "better_analyze",
                     metavar="ID", help="Why job ID does not run: which clause of its "
                     "Requirements fails on how many slots."),
    )):
        function = decorator(function)
    return _columns_options(function)


def history_view_options(function: F) -> F:
    """The view options of `fetchwork history`."""
    function = click.option("-match", "--match", "match", type=click.IntRange(min=1),
                            metavar="N", help="At most N jobs (the newest; as -limit).")(function)
    return _columns_options(function)


def custom(view: Mapping[str, Any]) -> bool:
    """The user chose the columns (-af or -format)."""
    return bool(view.get("autoformat") or view.get("format_pairs"))


def show_custom(ads: Sequence[Any], view: Mapping[str, Any]) -> None:
    if view.get("autoformat"):
        click.echo(formats.autoformat_lines(ads, view["autoformat"]), nl=False)
    else:
        click.echo(formats.format_text(ads, view["format_pairs"]), nl=False)


def only_running(ads: Sequence[Any]) -> list[Any]:
    return [ad for ad in ads if tables.value(ad, "JobStatus") == JobStatus.RUNNING]


def queue_fields(view: Mapping[str, Any], whole_ads: bool,
                 per_job: bool) -> tuple[str, ...] | None:
    """The attributes the chosen q view reads; None when it needs whole ads."""
    if whole_ads or custom(view):
        return None
    if view.get("totals"):
        return ("JobStatus",)
    if view.get("running") or view.get("nobatch") or (per_job and not view.get("batch")):
        return formats.JOB_FIELDS
    return formats.BATCH_FIELDS


def show_queue(ads: Sequence[Any], view: Mapping[str, Any], per_job: bool) -> None:
    """The q table chosen by the options; `per_job` when jobs were named by id."""
    if custom(view):
        show_custom(ads, view)
        return
    width = formats.output_width()
    table = ""
    if view.get("totals"):
        table = ""
    elif view.get("running"):
        table = formats.run_lines(ads, time.time(), width)
    elif view.get("nobatch") or (per_job and not view.get("batch")):
        table = formats.job_lines(ads, time.time(), width=width)
    else:
        table = formats.batch_lines(ads, width)
    click.echo(table + ("\n" if table else "") + tables.queue_summary(ads))
    # Holds that end by themselves say when (`fetchwork hold --for/--until`).
    for line in tables.hold_until_lines(ads):
        click.echo(line)


def better_analyze(broker: Broker, job_id: str) -> None:
    """Print why job `job_id` (C.P) does not run."""
    cluster, proc = parse_job_id(job_id)
    if proc is None:
        raise click.UsageError("-better-analyze takes one job, C.P")
    found = broker.job_data([f"{cluster}.{proc}"])
    if not found:
        raise FetchworkError(f"no job {cluster}.{proc} in the queue or the history")
    lifetime_s = Config.load().get_duration_s("SLOT_AD_LIFETIME")
    click.echo(analyze.report(from_dict(found[0]), broker.slots(), lifetime_s), nl=False)


def history_reading(broker: Broker, ids: Sequence[str], constraint: str | None,
                    limit: int | None, view: Mapping[str, Any], whole_ads: bool) -> list[Any]:
    """The finished jobs asked for: the smaller of -limit and -match bounds the scan."""
    bounds = [bound for bound in (limit, view.get("match")) if bound is not None]
    fields = None if whole_ads or custom(view) else formats.JOB_FIELDS
    return reading.history_jobs(broker, ids, constraint, min(bounds) if bounds else None,
                                fields)
