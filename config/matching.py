"""The two-sided match of a job and a slot: one rule for the broker and the startd.

HTCondor's matchmaking: the job's `Requirements` with MY = job and TARGET =
slot, and the slot's `START` with MY = slot and TARGET = job. An absent
expression accepts (HTCondor treats a missing START as true); one that is
undefined, an error or not true refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fetchwork.config.ads import as_bool, attr_text, evaluate, evaluate_attr, parse_expr
from fetchwork.errors import AdError

_OPEN, _CLOSE = "([{", ")]}"


def _refusal(ad: Any, name: str, target: Any, who: str) -> str | None:
    if name not in ad:
        return None
    try:
        if as_bool(evaluate_attr(ad, name, target)):
            return None
    except AdError as exc:
        return f"cannot evaluate {who}: {exc}"
    return f"{who} is not true"


def mismatch(slot_ad: Any, job_ad: Any) -> str | None:
    """Why the job and the slot do not match, or None when they do."""
    return (_refusal(slot_ad, "Start", job_ad, "START for this job")
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
