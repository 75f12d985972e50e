"""The two-sided match of a job and a slot: one rule for the broker and the startd.

HTCondor's matchmaking: the job's `Requirements` with MY = job and TARGET =
slot, and the slot's `START` with MY = slot and TARGET = job. An absent
expression accepts (HTCondor treats a missing START as true); one that is
undefined, an error or not true refuses.

Resources and exclusivity come first (`resource_refusal`): a job's
RequestCpus, RequestMemory (MB) and RequestDisk (KB) must fit the slot's
Cpus, Memory and Disk (for a partitionable slot, what is still free); an
Exclusive job matches only a slot whose startd runs nothing
(FetchworkRunningJobs = 0), and no job matches a slot whose startd runs an
exclusive job (FetchworkExclusive). An attribute the slot ad does not carry
sets no limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fetchwork.config.ads import (
    as_bool,
    as_number,
    attr_text,
    evaluate,
    evaluate_attr,
    parse_expr,
)
from fetchwork.errors import AdError

_OPEN, _CLOSE = "([{", ")]}"
# What a request is compared with: (job attribute, slot attribute, unit for messages).
REQUESTS = (("RequestCpus", "Cpus", "CPU(s)"), ("RequestMemory", "Memory", "MB"),
            ("RequestDisk", "Disk", "KB"))
RUNNING_JOBS, EXCLUSIVE_RUNNING = "FetchworkRunningJobs", "FetchworkExclusive"


def _refusal(ad: Any, name: str, target: Any, who: str) -> str | None:
    try:
        value = evaluate_attr(ad, name, target, absent=None)
    except AdError as exc:
        return f"cannot evaluate {who}: {exc}"
    if value is None or as_bool(value):
        return None
    return f"{who} is not true"


def _number(ad: Any, name: str, target: Any) -> float | None:
    """The attribute's value as a finite number; None otherwise (inf and NaN too)."""
    try:
        value = as_number(evaluate_attr(ad, name, target))
    except AdError:
        return None
    return value if value is not None and math.isfinite(value) else None


def requested(job_ad: Any, slot_ad: Any = None) -> tuple[int, int, int]:
    """(CPUs, memory MB, disk KB) the job asks for, with HTCondor's defaults when it
    does not say: 1 CPU; memory: MemoryUsage, else ImageSize (KB) rounded up to MB,
    else 1; disk: DiskUsage (KB), else 0. Request attributes may be expressions
    (MY = job, TARGET = slot); one that is not a number counts as absent."""
    cpus = _number(job_ad, "RequestCpus", slot_ad)
    memory = _number(job_ad, "RequestMemory", slot_ad)
    if memory is None:
        memory = _number(job_ad, "MemoryUsage", slot_ad)
    if memory is None:
        image_kb = _number(job_ad, "ImageSize", slot_ad)
        memory = -(-image_kb // 1024) if image_kb is not None else 1
    disk = _number(job_ad, "RequestDisk", slot_ad)
    if disk is None:
        disk = _number(job_ad, "DiskUsage", slot_ad) or 0
    return (max(int(-(-cpus // 1)), 0) if cpus is not None else 1,
            max(int(-(-memory // 1)), 0), max(int(-(-disk // 1)), 0))


def is_exclusive(job_ad: Any) -> bool:
    """The job's Exclusive attribute is true (it runs alone on its machine)."""
    try:
        return as_bool(evaluate_attr(job_ad, "Exclusive"))
    except AdError:
        return False


def resource_refusal(slot_ad: Any, job_ad: Any) -> str | None:
    """Why the slot cannot hold the job (resources, exclusivity), or None when it can."""
    if EXCLUSIVE_RUNNING in slot_ad and as_bool(_literal_or_eval(slot_ad, EXCLUSIVE_RUNNING)):
        return "an exclusive job runs on this machine"
    if is_exclusive(job_ad):
        running = _number(slot_ad, RUNNING_JOBS, None) if RUNNING_JOBS in slot_ad else None
        if running:
            return f"the job is exclusive and {running:g} job(s) run on this machine"
    for (job_attr, slot_attr, unit), amount in zip(REQUESTS, requested(job_ad, slot_ad),
                                                   strict=True):
        if slot_attr not in slot_ad:
            continue
        has = _number(slot_ad, slot_attr, job_ad)
        if has is not None and amount > has:
            return f"{job_attr} {amount} {unit} is more than the slot's {slot_attr} {has:g}"
    return None


def _literal_or_eval(ad: Any, name: str) -> Any:
    try:
        return evaluate_attr(ad, name)
    except AdError:
        return False


def mismatch(slot_ad: Any, job_ad: Any) -> str | None:
    """Why the job and the slot do not match, or None when they do."""
    return (resource_refusal(slot_ad, job_ad)
            or _refusal(slot_ad, "Start", job_ad, "START for this job")
            or _refusal(job_ad, "Requirements", slot_ad, "the job's Requirements for this slot"))


def job_refuses(job_ad: Any, slot_ad: Any) -> bool:
    """True when the job's own Requirements do not accept the slot."""
    return _refusal(job_ad, "Requirements", slot_ad, "the job's Requirements") is not None


def matches(job_ad: Any, slot_ad: Any) -> bool:
    """True when the job's Requirements accept the slot and the slot's START accepts the job."""
    return mismatch(slot_ad, job_ad) is None


# -- why a job does not match: its Requirements clause by clause ------------------

def requirement_clauses(text: str) -> list[str]:
    """The top-level `&&` operands of an expression text (parentheses and quotes
    respected), each without parentheses that enclose it whole."""
    text = _unwrapped(text.strip())
    parts: list[str] = []
    depth, start, index, quote = 0, 0, 0, ""
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif depth == 0 and text.startswith("&&", index):
            parts.append(text[start:index])
            start = index + 2
            index += 1
        index += 1
    parts.append(text[start:])
    return [_unwrapped(part.strip()) for part in parts if part.strip()]


def _unwrapped(text: str) -> str:
    """`(a || b)` -> `a || b` while parentheses enclose the whole text."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for index, char in enumerate(text):
            depth += char == "("
            depth -= char == ")"
            if depth == 0 and index < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def _clause_accepts(clause: Any, job_ad: Any, slot_ad: Any) -> bool:
    try:
        return as_bool(evaluate(clause, job_ad, slot_ad))
    except AdError:
        return False


def clause_counts(job_ad: Any, slot_ads: Sequence[Any]) -> list[tuple[str, int]]:
    """Each top-level clause of the job's Requirements and how many slots it accepts."""
    if "Requirements" not in job_ad:
        return []
    counts = []
    for clause in requirement_clauses(attr_text(job_ad, "Requirements")):
        try:
            expr = parse_expr(clause)
        except AdError:
            counts.append((clause, 0))
            continue
        counts.append((clause, sum(_clause_accepts(expr, job_ad, slot) for slot in slot_ads)))
    return counts
