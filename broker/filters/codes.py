"""The two code tables of `filters.txt`, as pure functions of a filter's run.

Submission: 0 the job goes on as is; 1 it takes the rewritten file (less the
attributes the broker manages); any other code, a timeout, a missing program:
the job fails with a RemoveReason naming the filter and the cause.

Activation (queued jobs): 0 start on the candidate slot; 1 do not start and
block the queue for equal or lower JobPrio; 2, any other code, a timeout or a
missing program: do not start and reserve the asking slot; 3 hold until the
job's HoldUntil (else now + DEFAULT_HOLD_DURATION); 4 fail. A backfill start
(FETCHWORK_BACKFILL=1) runs on code 0 only: 1, 2 and the codes that count as
2 neither block the queue nor reserve the slot then, the job only waits for
its next evaluation (`backfill_action`); 3 and 4 keep their meaning.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fetchwork.broker.store.states import is_managed
from fetchwork.config.protocol import clip

from .runner import FilterRun

SUBMISSION, ACTIVATION = "submission", "activation"
REASON_LIMIT = 200


class Submission(enum.Enum):
    """What a submission filter's answer does to the job."""

    AS_IS = "as-is"
    REWRITTEN = "rewritten"
    FAILED = "failed"


class Activation(enum.StrEnum):
    """What an activation chain's answer does to the job (and the asking slot)."""

    START = "start"
    BLOCK = "block"
    RESERVE = "reserve"
    HOLD = "hold"
    FAIL = "fail"
    # Not started in a backfill window; evaluated again later (no block, no reservation).
    RETRY = "retry"


@dataclass(frozen=True)
class SubmissionVerdict:
    outcome: Submission
    ad: dict[str, Any] | None = None  # the job's new attributes (REWRITTEN)
    reason: str | None = None  # RemoveReason (FAILED)


@dataclass(frozen=True)
class ActivationVerdict:
    action: Activation
    reason: str | None = None
    hold_until: int | None = None  # epoch seconds (HOLD)


def _cause(run: FilterRun, timeout_s: float) -> str | None:
    """The words for a run that gave no exit code: timeout, missing, unrunnable."""
    if run.missing:
        return f"not found: {run.spec.value}"
    if run.timed_out:
        return f"timed out after {timeout_s:g} s"
    if run.error is not None:
        return f"could not run: {clip(run.error, REASON_LIMIT)}"
    if run.signal is not None:
        return f"killed by signal {run.signal}"
    return None


def _with_stderr(text: str, run: FilterRun) -> str:
    line = run.first_stderr_line()
    return f"{text}: {clip(line, REASON_LIMIT)}" if line else text


def submission_verdict(run: FilterRun, given: Mapping[str, Any],
                       timeout_s: float) -> SubmissionVerdict:
    """The submission table for one run of filter `run.spec` on the ad it was `given`."""
    head = f"{SUBMISSION} filter {run.spec.name}"
    cause = _cause(run, timeout_s)
    if cause is not None:
        failed = f"{head} failed the job: {cause}" if run.signal is not None else f"{head} {cause}"
        return SubmissionVerdict(Submission.FAILED, reason=failed)
    if run.exit_code == 0:
        return SubmissionVerdict(Submission.AS_IS, ad=dict(given))
    if run.exit_code == 1:
        if run.ad is None:
            return SubmissionVerdict(Submission.FAILED, reason=(
                f"{head} failed the job: it rewrote the job ad unreadably: "
                f"{clip(run.ad_error or 'no ad', REASON_LIMIT)}"))
        return SubmissionVerdict(Submission.REWRITTEN, ad=take_rewrite(given, run.ad))
    return SubmissionVerdict(Submission.FAILED, reason=_with_stderr(
        f"{head} failed the job: exit {run.exit_code}", run))


def take_rewrite(given: Mapping[str, Any], rewritten: Mapping[str, Any]) -> dict[str, Any]:
    """The rewritten ad, except that the attributes the broker manages keep their
    given values (or stay absent)."""
    new = {name: value for name, value in rewritten.items() if not is_managed(name)}
    new.update({name: value for name, value in given.items() if is_managed(name)})
    return new


def activation_code(run: FilterRun) -> Activation:
    """The activation table: the action for one run (a timeout, a missing program and
    any code other than 0, 1, 3 and 4 count as 2)."""
    if run.exit_code is None or run.timed_out or run.missing or run.error is not None:
        return Activation.RESERVE
    return {0: Activation.START, 1: Activation.BLOCK, 3: Activation.HOLD,
            4: Activation.FAIL}.get(run.exit_code, Activation.RESERVE)


def backfill_action(action: Activation) -> Activation:
    """The action of a backfill start's answer: only 0 runs a job in a backfill window,
    and a job there may not block the queue or keep a slot."""
    return Activation.RETRY if action in (Activation.BLOCK, Activation.RESERVE) else action


def activation_verdict(run: FilterRun, timeout_s: float, now_s: float,
                       default_hold_s: int) -> ActivationVerdict:
    """The verdict of one activation filter's run, with its reason in words."""
    action = activation_code(run)
    head = f"{ACTIVATION} filter {run.spec.name}"
    if action is Activation.START:
        return ActivationVerdict(action)
    cause = _cause(run, timeout_s)
    if cause is not None:
        return ActivationVerdict(action, reason=f"{head} {cause}")
    if action is Activation.HOLD:
        until = hold_until(run.ad, now_s, default_hold_s)
        return ActivationVerdict(action, _with_stderr(f"{head} held the job", run), until)
    if action is Activation.FAIL:
        return ActivationVerdict(action, _with_stderr(f"{head} failed the job: exit 4", run))
    if action is Activation.BLOCK:
        return ActivationVerdict(action, _with_stderr(f"{head} blocks the queue: exit 1", run))
    return ActivationVerdict(action, _with_stderr(f"{head} answered exit {run.exit_code}", run))


def hold_until(ad: Mapping[str, Any] | None, now_s: float, default_hold_s: int) -> int:
    """The HoldUntil of an activation hold: the job's own (from the file the filter
    left) when it is a time still ahead, else now + DEFAULT_HOLD_DURATION."""
    value = None
    for name, item in (ad or {}).items():
        if name.lower() == "holduntil":
            value = item
    if isinstance(value, int | float) and not isinstance(value, bool) and value > now_s:
        return int(value)
    return int(now_s) + int(default_hold_s)
