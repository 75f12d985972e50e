"""The job policy's submit commands and the attributes condor_submit makes of them.

on_exit_hold -> OnExitHold, periodic_remove -> PeriodicRemove, ... (the
expressions, as written); the *_reason commands are string expressions and
the *_subcode ones integer expressions. `max_retries = N` (with
`success_exit_code`, default 0) becomes JobMaxRetries = N and an OnExitRemove
that lets the job leave once it exited with the success code or has
completed more than N times, OR'ed with the file's own on_exit_remove:
the job runs at most N + 1 times (NumJobCompletions counts every exit).
`success_exit_code` alone retries DEFAULT_JOB_MAX_RETRIES times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fetchwork.config.ads import EXPR_KEY
from fetchwork.config.loader import get_config

# Submit command -> job attribute, each an expression.
EXPRESSIONS = {
    "on_exit_hold": "OnExitHold",
    "on_exit_hold_reason": "OnExitHoldReason",
    "on_exit_hold_subcode": "OnExitHoldSubCode",
    "on_exit_remove": "OnExitRemove",
    "periodic_hold": "PeriodicHold",
    "periodic_hold_reason": "PeriodicHoldReason",
    "periodic_hold_subcode": "PeriodicHoldSubCode",
    "periodic_release": "PeriodicRelease",
    "periodic_remove": "PeriodicRemove",
}
RETRY_COMMANDS = ("max_retries", "success_exit_code")
POLICY_COMMANDS = frozenset((*EXPRESSIONS, *RETRY_COMMANDS))

Expr = Callable[[str, str], Any]
Whole = Callable[[str, str, int | None], int]


def _text(value: Any) -> str:
    """An expression's text from its to_dict form."""
    if isinstance(value, dict):
        return str(value[EXPR_KEY])
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def policy_attrs(values: Mapping[str, str], expr: Expr, whole: Whole) -> list[tuple[str, Any]]:
    """The job policy attributes of one job from its submit commands (lower-case names).
    `expr(text, command)` parses an expression, `whole(text, command, minimum)` a whole
    number; both raise the submit file's error naming the line."""
    attrs: dict[str, Any] = {}
    for command, attr in EXPRESSIONS.items():
        if values.get(command, "").strip():
            attrs[attr] = expr(values[command], command)
    retries_text = values.get("max_retries", "").strip()
    success_text = values.get("success_exit_code", "").strip()
    if retries_text or success_text:
        retries = (whole(retries_text, "max_retries", 0) if retries_text
                   else get_config().get_int("DEFAULT_JOB_MAX_RETRIES"))
        success = whole(success_text, "success_exit_code", None) if success_text else 0
        attrs["JobMaxRetries"] = retries
        if success_text:
            attrs["JobSuccessExitCode"] = success
        retry = f"NumJobCompletions > JobMaxRetries || ExitCode is {success}"
        given = attrs.get("OnExitRemove")
        text = retry if given is None else f"({_text(given)}) || ({retry})"
        attrs["OnExitRemove"] = expr(text, "on_exit_remove" if given is not None
                                     else "max_retries")
    return list(attrs.items())
