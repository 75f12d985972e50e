"""When a slot fetches next: FetchWorkDelay and the slot's fetch clock (pure).

FetchWorkDelay (MY = slot, TARGET = current job), FETCH_WORK_MIN_INTERVAL
between the starts of two fetches when the first found nothing, one
outstanding fetch per slot, and a fetch at once when a job ends on a claim.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.errors import AdError
from fetchwork.startd.states import SlotStatus, State

# HTCondor's delay when FetchWorkDelay is undefined or not a number.
DEFAULT_FETCH_DELAY_S = 300.0


def fetch_delay_s(expr: str | classad2.ExprTree, slot_ad: classad2.ClassAd,
                  job_ad: classad2.ClassAd | None) -> tuple[float, str | None]:
    """FetchWorkDelay with MY = slot, TARGET = current job; (seconds, problem or None).

    Anything but a number gives HTCondor's default of 300 s and a problem text.
    """
    try:
        value = ads.evaluate(expr, slot_ad, job_ad)
    except AdError as exc:
        return DEFAULT_FETCH_DELAY_S, str(exc)
    number = ads.as_number(value)
    if isinstance(value, bool) or number is None or math.isnan(number):
        return DEFAULT_FETCH_DELAY_S, f"FetchWorkDelay is not a number ({value!r})"
    return number, None


# Functions whose value depends on their arguments alone. An expression that calls
# no other (time() and random() do not qualify) is a function of the attributes it
# reads: its value is kept while they hold the same values (`DelayMemo`).
_PURE_FUNCTIONS = frozenset({
    "ifthenelse", "isundefined", "iserror", "isstring", "isinteger", "isreal",
    "isboolean", "isclassad", "islist", "isabstime", "isreltime", "int", "real",
    "string", "bool", "floor", "ceiling", "round", "pow", "min", "max", "quantize",
    "strcat", "substr", "tolower", "toupper", "size", "member", "identicalmember"})
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_NUMBER_RE = re.compile(r"(?<![A-Za-z0-9_.])(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN_RE = re.compile(rf"({_NAME})(?:\s*\.\s*({_NAME}))?(\s*\()?")
_KEYWORDS = frozenset({"true", "false", "undefined", "error", "is", "isnt"})
# HTCondor's old name for the clock: never kept.
_CLOCK_ATTRS = frozenset({"currenttime"})


def reads_only(expr: str | classad2.ExprTree) -> tuple[tuple[str, str], ...] | None:
    """The attributes `expr` reads as ("my" | "target" | "", name), when its value
    depends on nothing else; None when it may (a function not known to be pure, a
    nested or PARENT reference, the clock). Read from the expression's text, every
    name in it counted (the library's own list of references leaves some out)."""
    if isinstance(expr, str):
        try:
            expr = ads.parse_expr(expr)
        except AdError:
            return None
    if not isinstance(expr, classad2.ExprTree):
        return ()  # a literal reads nothing
    text = _NUMBER_RE.sub(" 0 ", _STRING_RE.sub('""', ads.unparse(expr)))
    reads: list[tuple[str, str]] = []
    for first, second, call in _TOKEN_RE.findall(text):
        if call:
            if second or first.lower() not in _PURE_FUNCTIONS:
                return None
            continue
        scope, name = (first.lower(), second) if second else ("", first)
        if scope not in ("", "my", "target") or name.lower() in _CLOCK_ATTRS:
            return None
        if scope or name.lower() not in _KEYWORDS:
            reads.append((scope, name))
    return tuple(reads)


def _read(ad: Any, name: str) -> Hashable:
    """An attribute's plain value with its type (True is not 1), None when absent;
    raises _Unkept for anything else (an expression reads other attributes)."""
    if ad is None:
        return None
    value = ad.get(name)
    if value is None:
        return None
    if isinstance(value, bool | int | float | str) and not isinstance(value, classad2.Value):
        return (type(value), value)
    raise _Unkept


class _Unkept(Exception):
    pass


class DelayMemo:
    """FetchWorkDelay for a slot ad and its job's, evaluated again only when an
    attribute it reads changed value. The loop asks at every wake, several times a
    job, and the slot's ad changes at each (State, Activity, the claim, the
    machine's running jobs) while the default expression reads two of them. An
    expression that may depend on anything else is evaluated every time."""

    _CAP = 64  # kept values; the memo starts over when full

    def __init__(self, expr: str | classad2.ExprTree):
        self.expr = expr
        self._reads = reads_only(expr)
        self._kept: dict[tuple[Hashable, ...], tuple[float, str | None]] = {}

    def delay_s(self, slot_ad: classad2.ClassAd,
                job_ad: classad2.ClassAd | None) -> tuple[float, str | None]:
        """As `fetch_delay_s`."""
        if self._reads is None:
            return fetch_delay_s(self.expr, slot_ad, job_ad)
        try:
            key = tuple(_read(job_ad if scope == "target" else slot_ad, name)
                        if scope else (_read(slot_ad, name), _read(job_ad, name))
                        for scope, name in self._reads)
        except _Unkept:
            return fetch_delay_s(self.expr, slot_ad, job_ad)
        kept = self._kept.get(key)
        if kept is None:
            if len(self._kept) >= self._CAP:
                self._kept.clear()
            kept = self._kept[key] = fetch_delay_s(self.expr, slot_ad, job_ad)
        return kept


@dataclass
class FetchClock:
    """The fetch bookkeeping of one slot (monotonic seconds)."""

    outstanding: bool = False
    last_start_at: float | None = None
    last_end_at: float | None = None
    last_found_work: bool = False   # the last fetch brought a job that was accepted
    last_empty: bool = False        # the last fetch printed nothing at all
    due_now: bool = False           # a job just ended on a claim

    def started(self, now: float | None = None) -> None:
        self.outstanding = True
        self.last_start_at = now
        self.due_now = False

    def finished(self, now: float, found_work: bool, empty: bool = False) -> None:
        self.outstanding = False
        self.last_end_at = now
        self.last_found_work = found_work
        self.last_empty = empty


def may_fetch(status: SlotStatus, start_false: bool) -> bool:
    """Unclaimed or Claimed (not Preempting, not Owner), and START not false."""
    return status.state in (State.UNCLAIMED, State.CLAIMED) and not start_false


def fetch_due_at(clock: FetchClock, delay_s: float, min_interval_s: float) -> float | None:
    """When the next fetch is due (monotonic), or None while one is outstanding.

    The delay counts from the end of the previous fetch; a slot that never
    fetched, or whose job just ended on a claim, is due at once. After a fetch
    that found nothing the next one starts at least `min_interval_s` after
    it started, so a hook that answers "no work" instantly cannot make the
    slot spin, while a long poll that waited that long already is followed at
    once: an idle slot is never deaf to new work between two long polls.
    """
    if clock.outstanding:
        return None
    if clock.last_end_at is None or clock.due_now:
        return -math.inf
    due = clock.last_end_at + max(delay_s, 0.0)
    if clock.last_found_work:
        return due
    started_at = clock.last_start_at if clock.last_start_at is not None else clock.last_end_at
    return max(due, started_at + min_interval_s)
