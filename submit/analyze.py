"""condor_q -better-analyze: why a job does not run.

The job's Requirements are split into their top-level `&&` clauses, and each
clause is evaluated against every slot ad the startds publish, with the one
match rule of `config/matching.py` for the whole. The report says how many
slots each clause accepts, how many slots the job's Requirements reject,
how many refuse the job by their START, and how many could run it now.
Pure: a job ad and slot ads in, text out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fetchwork.config.ads import as_bool, attr_text, evaluate, parse_expr
from fetchwork.config.matching import matches, mismatch
from fetchwork.config.protocol import STATUS_NAMES, ad_job_id
from fetchwork.errors import AdError

_OPEN, _CLOSE = "([{", ")]}"


def clauses(text: str) -> list[str]:
    """The top-level `&&` operands of an expression, outer parentheses removed."""
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
    """`(a)` -> `a` when the parentheses enclose the whole text."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for index, char in enumerate(text):
            depth += char == "("
            depth -= char == ")"
            if depth == 0 and index < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def _accepts(clause: str, job: Any, slot: Any) -> bool:
    try:
        return as_bool(evaluate(parse_expr(clause), job, slot))
    except AdError:
        return False


def clause_counts(job: Any, slots: Sequence[Any]) -> list[tuple[str, int]]:
    """Each top-level clause of the job's Requirements and how many slots it accepts."""
    if "Requirements" not in job:
        return []
    return [(clause, sum(1 for slot in slots if _accepts(clause, job, slot)))
            for clause in clauses(attr_text(job, "Requirements"))]


def _busy(slot: Any) -> bool:
    return slot.get("Activity") == "Busy" or slot.get("State") not in (None, "Unclaimed")


def report(job: Any, slots: Sequence[Any], lifetime_s: float) -> str:
    """The text of condor_q -better-analyze for one job."""
    job_id = ad_job_id(job) or "?"
    status = job.get("JobStatus")
    lines = [f"Job {job_id} is {STATUS_NAMES.get(status, 'in the queue')}."]
    if "Requirements" in job:
        lines += ["", f"The Requirements expression for job {job_id} is", "",
                  f"    {attr_text(job, 'Requirements')}", ""]
    else:
        lines += ["", f"Job {job_id} has no Requirements: every slot's START decides.", ""]
    if not slots:
        lines.append(f"No slot has reported in the last {lifetime_s:g} s (SLOT_AD_LIFETIME): "
                     "no startd is running, so no job can start. `fetchwork up` starts one.")
        return "\n".join(lines) + "\n"
    counts = clause_counts(job, slots)
    if counts:
        lines += [f"The Requirements expression for job {job_id} reduces to these conditions:",
                  "", f"{'':5}  {'Slots':>8}", f"{'Step':5}  {'Matched':>8}  Condition",
                  f"{'-----':5}  {'--------':>8}  ---------"]
        lines += [f"{f'[{n}]':5}  {count:8d}  {clause}"
                  for n, (clause, count) in enumerate(counts)]
        lines.append("")
    rejected = sum(1 for slot in slots if _rejected_by_job(job, slot))
    refusing = sum(1 for slot in slots if not _rejected_by_job(job, slot)
                   and mismatch(slot, job) is not None)
    matching = [slot for slot in slots if matches(job, slot)]
    free = sum(1 for slot in matching if not _busy(slot))
    lines += [f"{job_id}: Run analysis summary. Of {len(slots)} slots,",
              f"  {rejected:5d} are rejected by your job's requirements",
              f"  {refusing:5d} reject your job because of their own requirements (START)",
              f"  {len(matching) - free:5d} match and are already running other jobs",
              f"  {free:5d} are able to run your job"]
    if not matching:
        lines += ["", "WARNING: no slot matches this job; it stays idle until one does."]
    return "\n".join(lines) + "\n"


def _rejected_by_job(job: Any, slot: Any) -> bool:
    return "Requirements" in job and not _accepts(attr_text(job, "Requirements"), job, slot)
