"""Chains of filters: in order, each seeing the ad as the one before left it,
and the reverts that undo a chain in reverse order.

A chain is run through a `Call` (in the service: `runner.run_filter`), so the
order, the verdicts and the reverts are decided here without processes.
Submission: a job that fails anywhere leaves every filter that already ran
(the failing one included, unless it could not be found) to be called with
`revert` and the ad it was given. Activation: on any non-zero code, the
filters that already passed are reverted. Reverting is the caller's step
(`revert`), so the service can first settle the job and then undo.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .codes import (
    Activation,
    ActivationVerdict,
    Submission,
    activation_verdict,
    submission_verdict,
)
from .runner import ACTIVATE, REVERT, SUBMIT, Facts, FilterRun, FilterSpec

log = logging.getLogger(__name__)

Ad = dict[str, Any]
# call(spec, action, ad, facts) -> FilterRun
Call = Callable[[FilterSpec, str, Mapping[str, Any], Facts | None], FilterRun]


@dataclass
class Ran:
    """One filter that ran, with the ad it was given (what `revert` passes back)."""

    spec: FilterSpec
    given: Ad


@dataclass
class SubmissionResult:
    ok: bool
    ad: Ad
    reason: str | None = None
    # What ran; on failure these are the filters to revert.
    ran: list[Ran] = field(default_factory=list)


@dataclass
class ActivationResult:
    verdict: ActivationVerdict
    # The filter that decided (None when every filter passed).
    decided_by: str | None = None
    # The filters that answered 0, in order.
    passed: list[Ran] = field(default_factory=list)

    @property
    def action(self) -> Activation:
        return self.verdict.action

    @property
    def to_revert(self) -> list[Ran]:
        """On a non-zero code, the filters that passed before it."""
        return [] if self.action is Activation.START else self.passed


def run_submission_chain(specs: Sequence[FilterSpec], ad: Mapping[str, Any],
                         call: Call) -> SubmissionResult:
    """Run `specs` in order on `ad`; stop at the first failure."""
    current: Ad = dict(ad)
    ran: list[Ran] = []
    for spec in specs:
        given = dict(current)
        run = call(spec, SUBMIT, given, None)
        if not run.missing:
            ran.append(Ran(spec, given))
        verdict = submission_verdict(run, given, spec.timeout_s)
        if verdict.outcome is Submission.FAILED:
            return SubmissionResult(False, given, verdict.reason, ran)
        assert verdict.ad is not None
        current = verdict.ad
    return SubmissionResult(True, current, None, ran)


def run_activation_chain(specs: Sequence[FilterSpec], ad: Mapping[str, Any], call: Call,
                         facts: Facts, now_s: float, default_hold_s: int,
                         ) -> ActivationResult:
    """Run `specs` in order on `ad` for one candidate slot; the first non-zero code decides."""
    passed: list[Ran] = []
    for spec in specs:
        given = dict(ad)
        run = call(spec, ACTIVATE, given, facts)
        verdict = activation_verdict(run, spec.timeout_s, now_s, default_hold_s)
        if verdict.action is not Activation.START:
            return ActivationResult(verdict, spec.name, passed)
        passed.append(Ran(spec, given))
    return ActivationResult(ActivationVerdict(Activation.START), None, passed)


def revert(ran: Sequence[Ran], call: Call, facts: Facts | None = None) -> list[FilterRun]:
    """Call each filter of `ran` with `revert`, in reverse order, with the ad it was given.
    A revert's own failure is logged and changes nothing."""
    runs = []
    for item in reversed(ran):
        run = call(item.spec, REVERT, item.given, facts)
        if run.exit_code != 0:
            log.warning("%s filter %s did not revert cleanly (exit %s, timed out %s)",
                        item.spec.kind, item.spec.name, run.exit_code, run.timed_out)
        runs.append(run)
    return runs
