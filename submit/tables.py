"""Tables of jobs and slots in the spirit of condor_q, condor_history and condor_status.

Formatting only: every function takes ads (ClassAds or mappings with
HTCondor attribute names) and `now`, and returns text or a `rich` table.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import classad2
from rich import box
from rich.table import Table

from fetchwork.broker.store.holdtime import format_hold_until
from fetchwork.config.protocol import STATUS_LETTERS, STATUS_NAMES, JobStatus, ad_job_id

QUEUE_COLUMNS = ("ID", "OWNER", "SUBMITTED", "RUN_TIME", "ST", "PRI", "SIZE", "CMD")
HISTORY_COLUMNS = ("ID", "OWNER", "SUBMITTED", "RUN_TIME", "ST", "COMPLETED", "EXIT", "CMD")
SLOT_COLUMNS = ("NAME", "STATE", "ACTIVITY", "LOAD", "MEMORY", "JOB")
_RIGHT = {"RUN_TIME", "PRI", "SIZE", "LOAD", "MEMORY", "EXIT"}
CMD_WIDTH = 60
_PLAIN = frozenset({int, float, str, bool})
_MISSING = object()


def value(ad: Any, name: str) -> Any:
    """A literal attribute of a ClassAd or mapping (case-insensitive); None otherwise."""
    if type(ad) is dict:  # the common case, kept cheap for big tables
        found = ad.get(name, _MISSING)
        if found is None or type(found) in _PLAIN:
            return found
        if found is not _MISSING:
            return None if isinstance(found, dict | classad2.Value) else found
    if isinstance(ad, classad2.ClassAd):
        if name not in ad:
            return None
        found = ad.eval(name) if isinstance(ad[name], classad2.ExprTree) else ad[name]
    elif isinstance(ad, Mapping):
        found = ad.get(name)
        if found is None:
            lower = name.lower()
            found = next((v for k, v in ad.items() if k.lower() == lower), None)
    else:
        return None
    if isinstance(found, classad2.Value) or isinstance(found, Mapping):
        return None
    return found


def _number(ad: Any, name: str) -> float | None:
    found = value(ad, name)
    if isinstance(found, bool) or not isinstance(found, int | float):
        return None
    return float(found)


# -- cells ------------------------------------------------------------------

def job_id(ad: Any) -> str:
    """`C.P` of a job ad; `?` when it lacks whole ClusterId and ProcId."""
    return ad_job_id(ad) or "?"


def date_text(timestamp: float | None) -> str:
    """condor_q's `MM/DD HH:MM` in local time; blank when unknown."""
    if not timestamp:
        return ""
    return _minute_text(int(timestamp) // 60)


@functools.lru_cache(maxsize=4096)
def _minute_text(minute: int) -> str:
    """The jobs of a big table share few submit minutes: each is formatted once."""
    return time.strftime("%m/%d %H:%M", time.localtime(minute * 60))


def duration_text(seconds: float | None) -> str:
    """condor_q's `D+HH:MM:SS`."""
    if seconds is None:
        return ""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}+{hours:02d}:{minutes:02d}:{secs:02d}"


def run_time_s(ad: Any, now: float) -> float | None:
    """Wall time used: earlier runs plus the current one for a running job (also
    one still on its slot while a hold or removal stops it)."""
    earlier = _number(ad, "RemoteWallClockTime") or 0.0
    status = _number(ad, "JobStatus")
    if status in (2.0, 7.0) or value(ad, "FetchworkState") in ("RUNNING", "SUSPENDED"):
        started = _number(ad, "JobCurrentStartDate") or _number(ad, "JobStartDate")
        if started is None and status == 2.0:
            started = _number(ad, "EnteredCurrentStatus")
        if started is not None:
            return earlier + max(0.0, now - started)
    if earlier:
        return earlier
    duration = _number(ad, "JobDuration")
    if duration is not None:
        return duration
    started, ended = _number(ad, "JobStartDate"), _number(ad, "CompletionDate")
    if started is not None and ended:
        return max(0.0, ended - started)
    return 0.0


# States of their own that HTCondor has no JobStatus for: waiting for the
# submission filters, and for an activation chain.
STATE_LETTERS = {"VALIDATING": "V", "ACTIVATING": "A"}


def status_letter(ad: Any) -> str:
    state = value(ad, "FetchworkState")
    if isinstance(state, str) and state in STATE_LETTERS:
        return STATE_LETTERS[state]
    status = _number(ad, "JobStatus")
    return STATUS_LETTERS.get(int(status), "?") if status is not None else "?"


def hold_until_lines(ads: Iterable[Any]) -> list[str]:
    """`Job 3.0 held until 2026-12-01 08:00:00` for each held job with a HoldUntil."""
    lines = []
    for ad in ads:
        if type(ad) is dict and ad.get("HoldUntil") is None:
            continue  # the common case, kept cheap for big queues
        until = _number(ad, "HoldUntil")
        if until is not None and _number(ad, "JobStatus") == float(JobStatus.HELD):
            lines.append(f"Job {job_id(ad)} held until {format_hold_until(until)}")
    return lines


def size_text(ad: Any) -> str:
    """Memory in MB with one decimal, from ImageSize (KB) as condor_q shows it."""
    size_kb = _number(ad, "ImageSize")
    return f"{(size_kb or 0.0) / 1024:.1f}"


def command_text(ad: Any, width: int = CMD_WIDTH) -> str:
    """The program's base name and its arguments, clipped to `width`."""
    cmd = value(ad, "Cmd")
    text = os.path.basename(cmd) if isinstance(cmd, str) else ""
    args = value(ad, "Arguments")
    if not isinstance(args, str) or not args:
        args = value(ad, "Args")
    if isinstance(args, str) and args:
        text = f"{text} {args}"
    return text if len(text) <= width else text[:width - 3] + "..."


def exit_text(ad: Any) -> str:
    """`0`, `1`, `SIG9`, or blank for a job that did not exit on its own."""
    if value(ad, "ExitBySignal") is True:
        signal = _number(ad, "ExitSignal")
        return f"SIG{int(signal)}" if signal is not None else "SIG"
    code = _number(ad, "ExitCode")
    return str(int(code)) if code is not None else ""


def _text(ad: Any, name: str) -> str:
    found = value(ad, name)
    return "" if found is None else str(found)


# -- rows and tables ----------------------------------------------------------------

def queue_row(ad: Any, now: float) -> tuple[str, ...]:
    prio = _number(ad, "JobPrio")
    return (job_id(ad), _text(ad, "Owner"), date_text(_number(ad, "QDate")),
            duration_text(run_time_s(ad, now)), status_letter(ad),
            str(int(prio)) if prio is not None else "0", size_text(ad), command_text(ad))


def history_row(ad: Any, now: float) -> tuple[str, ...]:
    return (job_id(ad), _text(ad, "Owner"), date_text(_number(ad, "QDate")),
            duration_text(run_time_s(ad, now)), status_letter(ad),
            date_text(_number(ad, "CompletionDate") or _number(ad, "EnteredCurrentStatus")),
            exit_text(ad), command_text(ad))


def slot_row(ad: Any) -> tuple[str, ...]:
    load = _number(ad, "LoadAvg")
    memory = _number(ad, "Memory")
    job = value(ad, "JobId")
    if job is None and _number(ad, "ClusterId") is not None:
        job = job_id(ad)
    return (_text(ad, "Name"), _text(ad, "State"), _text(ad, "Activity"),
            f"{load:.2f}" if load is not None else "",
            str(int(memory)) if memory is not None else "", "" if job is None else str(job))


def _table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in _RIGHT else "left",
                         no_wrap=True, overflow="ellipsis")
    for row in rows:
        table.add_row(*row)
    return table


def queue_table(ads: Iterable[Any], now: float) -> Table:
    return _table(QUEUE_COLUMNS, (queue_row(ad, now) for ad in ads))


def history_table(ads: Iterable[Any], now: float) -> Table:
    return _table(HISTORY_COLUMNS, (history_row(ad, now) for ad in ads))


def slot_table(ads: Iterable[Any]) -> Table:
    return _table(SLOT_COLUMNS, (slot_row(ad) for ad in ads))


# condor_q -hold: when and why each held job was held; the reason is never cut.
HOLD_COLUMNS = ("ID", "OWNER", "HELD_SINCE", "HOLD_REASON")


def hold_row(ad: Any, now: float) -> tuple[str, ...]:
    return (*queue_row(ad, now)[:2], date_text(_number(ad, "EnteredCurrentStatus")),
            _text(ad, "HoldReason"))


def hold_table(ads: Iterable[Any], now: float) -> Table:
    table = _table(HOLD_COLUMNS, (hold_row(ad, now) for ad in ads))
    table.columns[-1].no_wrap = False
    table.columns[-1].overflow = "fold"
    return table


def queue_summary(ads: Sequence[Any]) -> str:
    """condor_q's last line: `Total for query: 3 jobs; 0 completed, ... 0 suspended`."""
    counts = dict.fromkeys(("completed", "removed", "idle", "running", "held", "suspended"), 0)
    # Counted by stored value first (a whole number read as is), then named once per value.
    by_value: dict[float | None, int] = {}
    for ad in ads:
        status = ad.get("JobStatus") if type(ad) is dict else None
        if type(status) is not int:
            status = _number(ad, "JobStatus")
        by_value[status] = by_value.get(status, 0) + 1
    for status, count in by_value.items():
        name = STATUS_NAMES.get(int(status)) if status is not None else None
        if name is not None:
            counts[name] += count
    parts = ", ".join(f"{count} {name}" for name, count in counts.items())
    noun = "job" if len(ads) == 1 else "jobs"
    return f"Total for query: {len(ads)} {noun}; {parts}"


def slot_summary(ads: Sequence[Any]) -> str:
    """How many slots, and how many of them run a job."""
    busy = sum(1 for ad in ads if value(ad, "Activity") == "Busy")
    noun = "slot" if len(ads) == 1 else "slots"
    return f"Total: {len(ads)} {noun}; {busy} busy, {len(ads) - busy} not busy"
