"""Job policy expressions: what HTCondor's on_exit_* and periodic_* mean for one job.

Pure decisions over a job ad and `now` (no Redis): `exit_action` when a run
ends with how=exit, `periodic_action` for the leader's periodic pass
(broker/jobpolicy/periodic.py). The attributes are HTCondor's (condor_submit writes them
from on_exit_hold, periodic_remove, ...; submit/jobpolicymap.py here):

- periodic expressions come first, then the on-exit ones; a hold wins over a
  remove (condor_submit's rule). PeriodicHold is tested for a job not held,
  PeriodicRelease for a held one, PeriodicRemove for any.
- OnExitHold true holds the job; else OnExitRemove false puts it back to run
  again, true or absent lets it leave the queue (completed). An OnExitRemove
  that is neither true nor false (UNDEFINED, an error) counts as true, so a
  broken expression cannot rerun a job forever.
- A policy hold has HoldReasonCode 3 (JobPolicy), HoldReasonSubCode from
  OnExitHoldSubCode / PeriodicHoldSubCode (0 when absent or not a whole
  number), and HoldReason from OnExitHoldReason / PeriodicHoldReason when that
  is a non-empty string, else a sentence naming the expression.
- NumJobCompletions already counts the exit being judged (the caller adds it),
  so `max_retries = 2` (OnExitRemove = NumJobCompletions > JobMaxRetries || ...)
  runs a failing job three times.

Expressions see the job ad with `CurrentTime` set to `now`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import classad2

from fetchwork.config.ads import as_bool, evaluate, unparse
from fetchwork.config.protocol import JobStatus
from fetchwork.errors import AdError

# What a policy does to a job.
HOLD, RELEASE, REMOVE, REQUEUE, COMPLETE = "hold", "release", "remove", "requeue", "complete"

ON_EXIT_HOLD, ON_EXIT_REMOVE = "OnExitHold", "OnExitRemove"
PERIODIC_HOLD, PERIODIC_RELEASE = "PeriodicHold", "PeriodicRelease"
PERIODIC_REMOVE = "PeriodicRemove"
PERIODIC_ATTRS = (PERIODIC_HOLD, PERIODIC_RELEASE, PERIODIC_REMOVE)
# A job with none of these leaves the queue on exit as it always did.
EXIT_POLICY_ATTRS = (ON_EXIT_HOLD, ON_EXIT_REMOVE, PERIODIC_HOLD, PERIODIC_REMOVE)
COMPLETIONS = "NumJobCompletions"


@dataclass(frozen=True)
class Action:
    """A policy's verdict: `kind` (HOLD, RELEASE, REMOVE, REQUEUE, COMPLETE), the reason
    to record, and the HoldReasonSubCode of a hold."""

    kind: str
    reason: str = ""
    subcode: int = 0
    # The attribute whose expression decided (OnExitHold, PeriodicRemove, ...).
    attr: str = ""


def _with_now(ad: classad2.ClassAd, now: float) -> classad2.ClassAd:
    judged = classad2.ClassAd()
    judged.update(ad)
    judged["CurrentTime"] = int(now)
    return judged


def _value(ad: classad2.ClassAd, name: str) -> Any:
    if name not in ad:
        return classad2.Value.Undefined
    try:
        return evaluate(ad.lookup(name), ad)
    except AdError:
        return classad2.Value.Error


def _is_true(ad: classad2.ClassAd, name: str) -> bool:
    return as_bool(_value(ad, name))


def _expr_text(ad: classad2.ClassAd, name: str) -> str:
    tree = ad.lookup(name)
    return unparse(tree) if isinstance(tree, classad2.ExprTree) else str(ad.get(name))


def _hold(ad: classad2.ClassAd, name: str) -> Action:
    """A hold by expression `name`, with its `<name>Reason` and `<name>SubCode`."""
    reason = _value(ad, name + "Reason")
    if not isinstance(reason, str) or not reason.strip():
        reason = f"The job's {name} expression {_expr_text(ad, name)} became true"
    subcode = _value(ad, name + "SubCode")
    whole = (isinstance(subcode, int | float) and not isinstance(subcode, bool | classad2.Value)
             and float(subcode).is_integer())
    return Action(HOLD, reason.strip(), int(subcode) if whole else 0, name)


def _by(kind: str, ad: classad2.ClassAd, name: str) -> Action:
    """A release or removal by expression `name`."""
    return Action(kind, f"The job's {name} expression {_expr_text(ad, name)} became true",
                  0, name)


def _status(ad: classad2.ClassAd) -> int | None:
    status = ad.get("JobStatus")
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def periodic_action(ad: classad2.ClassAd, now: float) -> Action | None:
    """What the periodic expressions of a queued job ask for now; None: nothing.
    A job already leaving the queue (JobStatus 3, 4) is left alone."""
    status = _status(ad)
    if status in (JobStatus.REMOVED, JobStatus.COMPLETED):
        return None
    judged = _with_now(ad, now)
    held = status == JobStatus.HELD
    if not held and _is_true(judged, PERIODIC_HOLD):
        return _hold(judged, PERIODIC_HOLD)
    if held and _is_true(judged, PERIODIC_RELEASE):
        return _by(RELEASE, judged, PERIODIC_RELEASE)
    if _is_true(judged, PERIODIC_REMOVE):
        return _by(REMOVE, judged, PERIODIC_REMOVE)
    return None


def exit_action(ad: classad2.ClassAd, now: float) -> Action:
    """What happens to a job whose run ended with how=exit; `ad` is its final ad
    (ExitCode, ExitBySignal, and NumJobCompletions counting this exit)."""
    judged = _with_now(ad, now)
    if _is_true(judged, PERIODIC_HOLD):
        return _hold(judged, PERIODIC_HOLD)
    if _is_true(judged, PERIODIC_REMOVE):
        return _by(REMOVE, judged, PERIODIC_REMOVE)
    if _is_true(judged, ON_EXIT_HOLD):
        return _hold(judged, ON_EXIT_HOLD)
    remove = _value(judged, ON_EXIT_REMOVE)
    if not isinstance(remove, classad2.Value) and isinstance(remove, bool | int | float) \
            and not as_bool(remove):
        return Action(REQUEUE, f"The job's {ON_EXIT_REMOVE} expression "
                      f"{_expr_text(judged, ON_EXIT_REMOVE)} was false: it runs again",
                      0, ON_EXIT_REMOVE)
    return Action(COMPLETE)


def _present(attrs: Mapping[str, Any], names: tuple[str, ...]) -> bool:
    """Whether any of `names` has a value other than its default (absent, or the
    literal the expression defaults to: true for OnExitRemove, false for the rest)."""
    lower = {name.lower() for name in names}
    remove = ON_EXIT_REMOVE.lower()
    return any(value is not None and value is not (name.lower() == remove)
               for name, value in attrs.items() if name.lower() in lower)


def has_periodic(attrs: Mapping[str, Any]) -> bool:
    """Whether a submitted job (to_dict form) has a periodic expression that can be true:
    the leader's periodic pass looks at such jobs only."""
    return _present(attrs, PERIODIC_ATTRS)


def has_exit_policy(values: Mapping[str, Any]) -> bool:
    """Whether a job's EXIT_POLICY_ATTRS (name -> stored value or None) need judging."""
    return _present(values, EXIT_POLICY_ATTRS)
