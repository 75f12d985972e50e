"""condor_q's ways of showing jobs: the batch view (its default), one line per
job (`-nobatch`), running jobs with their slot (`-run`), the totals alone
(`-totals`), and the user's own columns (`-af ATTR...`, `-format FMT ATTR`).

Formatting only: every function takes ads (ClassAds or mappings with
HTCondor attribute names) and `now`, and returns text.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import classad2

from fetchwork.config.ads import EXPR_KEY, from_dict, parse_expr, unparse
from fetchwork.config.protocol import JobStatus
from fetchwork.errors import AdError, FetchworkError
from fetchwork.submit import tables, texttable

BATCH_COLUMNS = ("OWNER", "BATCH_NAME", "SUBMITTED", "DONE", "RUN", "IDLE", "HOLD", "TOTAL",
                 "JOB_IDS")
RUN_COLUMNS = ("ID", "OWNER", "SUBMITTED", "RUN_TIME", "HOST(S)")
# The attributes each view reads (besides FetchworkState), so that a big queue
# is read field by field rather than whole ads.
BATCH_FIELDS = ("ClusterId", "ProcId", "Owner", "JobBatchName", "QDate", "JobStatus",
                "TotalSubmitProcs", "HoldUntil")
JOB_FIELDS = ("ClusterId", "ProcId", "Owner", "QDate", "RemoteWallClockTime", "JobStatus",
              "JobCurrentStartDate", "JobStartDate", "EnteredCurrentStatus", "JobDuration",
              "CompletionDate", "JobPrio", "ImageSize", "Cmd", "Arguments", "Args", "RemoteHost",
              "ExitBySignal", "ExitSignal", "ExitCode", "HoldUntil")
_RIGHT = {"DONE", "RUN", "IDLE", "HOLD", "TOTAL", "RUN_TIME", "PRI", "SIZE", "EXIT"}
_KINDS = "dioxXufFgGeEscvV"
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"'}
_CONVERSION_RE = re.compile(r"%(?:%|[-+ #0]*\d*(?:\.\d+)?([a-zA-Z]))")


def output_width() -> int | None:
    """The width to fit: COLUMNS when set, else the terminal's; None for a pipe."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


# -- one line per job ----------------------------------------------------------------

def job_lines(ads: Sequence[Any], now: float, history: bool = False,
              width: int | None = None) -> str:
    """The per-job table of q (`-nobatch`) or history; only the command is cut to `width`."""
    columns = tables.HISTORY_COLUMNS if history else tables.QUEUE_COLUMNS
    row = tables.history_row if history else tables.queue_row
    return texttable.render(columns, [row(ad, now) for ad in ads], width, _RIGHT)


def run_lines(ads: Sequence[Any], now: float, width: int | None = None) -> str:
    """condor_q -run: running jobs and the slot each runs in."""
    rows = [(*tables.queue_row(ad, now)[:4], str(tables.value(ad, "RemoteHost") or ""))
            for ad in ads]
    return texttable.render(RUN_COLUMNS, rows, width, _RIGHT)


# -- the batch view ------------------------------------------------------------------

@dataclass
class Batch:
    """The jobs of one owner and batch name (or one cluster), as condor_q groups them."""

    owner: str
    name: str
    submitted: float = 0.0
    counts: dict[int, int] = field(default_factory=dict)
    procs: dict[int, list[int]] = field(default_factory=dict)  # cluster -> proc ids
    totals: dict[int, int] = field(default_factory=dict)  # cluster -> TotalSubmitProcs

    def add(self, ad: Any, get: Callable[[str], Any] | None = None) -> None:
        get = get or _getter(ad)
        cluster, proc, status = get("ClusterId"), get("ProcId"), get("JobStatus")
        counts = self.counts
        counts[status] = counts.get(status, 0) + 1
        procs = self.procs.get(cluster)
        if procs is None:
            procs = self.procs[cluster] = []
        procs.append(proc if type(proc) is int or isinstance(proc, int) else 0)
        total = get("TotalSubmitProcs")
        if type(total) is int or (isinstance(total, int) and not isinstance(total, bool)):
            self.totals[cluster] = total
        qdate = get("QDate")
        if isinstance(qdate, int | float) and (not self.submitted or qdate < self.submitted):
            self.submitted = float(qdate)

    def row(self) -> tuple[str, ...]:
        queued = sum(len(procs) for procs in self.procs.values())
        known = all(cluster in self.totals for cluster in self.procs)
        total = sum(self.totals.values()) if known else queued
        done = total - queued if known else 0
        running = self.counts.get(JobStatus.RUNNING, 0) + self.counts.get(JobStatus.SUSPENDED, 0)
        cells = (done, running, self.counts.get(JobStatus.IDLE, 0),
                 self.counts.get(JobStatus.HELD, 0))
        return (self.owner, self.name, tables.date_text(self.submitted),
                *(str(count) if count else "_" for count in cells), str(total), self.job_ids())

    def job_ids(self) -> str:
        """`12.0`, `12.0-4` (one cluster) or `12.0 ... 13.2` (several)."""
        first_cluster, last_cluster = min(self.procs), max(self.procs)
        first = min(self.procs[first_cluster])
        last = max(self.procs[last_cluster])
        if first_cluster != last_cluster:
            return f"{first_cluster}.{first} ... {last_cluster}.{last}"
        return f"{first_cluster}.{first}" + (f"-{last}" if last != first else "")


def _getter(ad: Any) -> Callable[[str], Any]:
    """A cheap attribute lookup for the plain dicts of a field read, else tables.value."""
    if type(ad) is dict:
        return ad.get
    return lambda name: tables.value(ad, name)


def batches(ads: Iterable[Any]) -> list[Batch]:
    """Jobs grouped by owner and JobBatchName (else by cluster), in submission order."""
    found: dict[tuple[str, str], Batch] = {}
    for ad in ads:
        get = ad.get if type(ad) is dict else _getter(ad)
        owner = get("Owner")
        if type(owner) is not str:
            owner = str(owner or "")
        name = get("JobBatchName")
        if type(name) is not str or not name:
            name = name if isinstance(name, str) and name else f"ID: {get('ClusterId')}"
        key = (owner, name)
        batch = found.get(key)
        if batch is None:
            batch = found[key] = Batch(owner, name)
        batch.add(ad, get)
    return sorted(found.values(), key=lambda batch: (min(batch.procs), batch.name))


def batch_lines(ads: Sequence[Any], width: int | None = None) -> str:
    """condor_q's default view: one line per batch."""
    return texttable.render(BATCH_COLUMNS, [batch.row() for batch in batches(ads)], width,
                            _RIGHT)


# -- the user's columns: -af and -format -------------------------------------------------

def _classad(ad: Any) -> classad2.ClassAd:
    return ad if isinstance(ad, classad2.ClassAd) else from_dict(ad)


def _expressions(names: Sequence[str]) -> list[Any]:
    try:
        return [parse_expr(name, source="attribute") for name in names]
    except AdError as exc:
        raise FetchworkError(f"not an attribute or expression: {exc}") from exc


def _evaluated(ad: classad2.ClassAd, expr: Any) -> Any:
    try:
        return expr.eval(ad) if isinstance(expr, classad2.ExprTree) else expr
    except Exception:  # a ClassAd evaluation failure shows as an error value
        return classad2.Value.Error


def value_text(found: Any) -> str:
    """condor_q -af's text of a value: strings bare, `undefined`, ClassAd syntax otherwise."""
    if isinstance(found, str):
        return found
    if isinstance(found, bool):
        return "true" if found else "false"
    if isinstance(found, classad2.Value):
        return "error" if found == classad2.Value.Error else "undefined"
    if isinstance(found, classad2.ExprTree):
        return unparse(found)
    return str(found)


def autoformat_lines(ads: Iterable[Any], names: Sequence[str]) -> str:
    """condor_q -af A B: per job, the values of A and B separated by one space."""
    exprs = _expressions(names)
    lines = []
    for ad in ads:
        classad = _classad(ad)
        lines.append(" ".join(value_text(_evaluated(classad, expr)) for expr in exprs))
    return "".join(line + "\n" for line in lines)


def unescape(text: str) -> str:
    r"""condor_q's escapes in a -format string: `\n`, `\t`, `\\`, `\"`."""
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)


def _converter(fmt: str) -> Callable[[Any], str]:
    """How one `-format FMT` prints a value, printf-style (%d %i %f %g %e %s %v %V %x %o %c)."""
    conversions = [m.group(1) for m in _CONVERSION_RE.finditer(fmt) if m.group(1)]
    if len(conversions) > 1:
        raise FetchworkError(f"-format {fmt!r}: one conversion per format")
    kind = conversions[0] if conversions else ""
    if kind and kind not in _KINDS:
        raise FetchworkError(f"-format {fmt!r}: %{kind} is not a printf conversion")
    pattern = _CONVERSION_RE.sub(lambda m: "%%" if m.group(0) == "%%" else
                                 m.group(0)[:-1] + ("s" if m.group(1) in "vVc" else
                                                    "d" if m.group(1) == "u" else m.group(1)),
                                 fmt)

    def apply(found: Any) -> str:
        if not kind:
            return pattern % ()
        if kind in "vV":
            text = f'"{found}"' if kind == "V" and isinstance(found, str) else value_text(found)
            return pattern % text
        if kind in "dioxXu":
            number = _number(found)
            return pattern % (int(number) if number is not None else 0)
        if kind in "fFgGeE":
            number = _number(found)
            return pattern % (number if number is not None else 0.0)
        return pattern % value_text(found)
    return apply


def _number(found: Any) -> float | None:
    if isinstance(found, classad2.Value):  # an IntEnum: undefined or error
        return None
    if isinstance(found, bool):
        return float(found)
    if isinstance(found, int | float):
        return float(found)
    return None


def format_text(ads: Iterable[Any], pairs: Sequence[tuple[str, str]]) -> str:
    """condor_q -format FMT ATTR (repeatable): per job, each value through its format;
    no newline unless a format has one."""
    steps = [(_converter(unescape(fmt)), expr)
             for (fmt, _name), expr in zip(pairs, _expressions([name for _f, name in pairs]),
                                           strict=True)]
    out: list[str] = []
    for ad in ads:
        classad = _classad(ad)
        out += [apply(_evaluated(classad, expr)) for apply, expr in steps]
    return "".join(out)


# -- JSON ---------------------------------------------------------------------------------

def json_ready(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """A stored ad (to_dict form) as `condor_q -json` writes it, built without a
    ClassAd: expressions as "/Expr(text)/", names in the order stored.
    None when a value needs the ClassAd library (a list or record expression)."""
    out: dict[str, Any] = {}
    for name, found in data.items():
        if isinstance(found, Mapping):
            text = found.get(EXPR_KEY)
            if not isinstance(text, str) or text.lstrip()[:1] in ("{", "["):
                return None
            found = None if text == "undefined" else f"/Expr({text})/"
        out[name] = found
    return out
