"""In-process hooks: `python:package.module:function`, called without a fork.

The function is called as `function(args, stdin_text)` in a thread of its own
(one of `workers.WORKERS`, kept for later calls) and returns the hook's
stdout (str or bytes), None for no output, or `(exit_code, stdout)`. A call
that outlives its timeout is abandoned (a thread cannot be killed; its
thread is then lost to later calls) and reported as timed out; an exception is
reported as an error. The function may call `current_call()` for the
environment and directory a program hook would have been given.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fetchwork.config.pyref import is_python_ref, load_callable, module_of
from fetchwork.hooks.workers import WORKERS

log = logging.getLogger(__name__)

_CANCEL_POLL_S = 0.05


@dataclass(frozen=True)
class HookCall:
    """What an in-process hook may ask about its own call."""

    hook: str
    keyword: str
    env: Mapping[str, str] | None
    cwd: str | None


@dataclass(frozen=True)
class CallOutcome:
    """What the call did: an exit code and stdout, or an error, or a timeout."""

    exit_code: int | None = None
    stdout: str = ""
    error: str | None = None
    timed_out: bool = False
    cancelled: bool = False


_current_call: contextvars.ContextVar[HookCall | None] = contextvars.ContextVar(
    "fetchwork_hook_call", default=None)


def current_call() -> HookCall | None:
    """Inside an in-process hook: its name, keyword, environment and directory; else None."""
    return _current_call.get()


def call_function(value: str, args: list[str], stdin_text: str, timeout_s: float,
                  call: HookCall, cancel: threading.Event | None = None) -> CallOutcome:
    """Load and call the hook named by `value`; never raises for the hook's failures."""
    try:
        function = load_callable(value)
    except Exception as exc:
        return CallOutcome(error=f"cannot load {value}: {type(exc).__name__}: {exc}")
    box: dict[str, Any] = {}
    done = threading.Event()

    def body() -> None:
        _current_call.set(call)
        try:
            box["value"] = function(list(args), stdin_text)
        except BaseException as exc:  # the hook's failure is reported, not raised
            box["error"] = exc
        finally:
            done.set()

    context = contextvars.Context()  # each call starts with no context of another's
    WORKERS.run(lambda: context.run(body), f"hook-call-{call.keyword}-{call.hook}")
    deadline = time.monotonic() + timeout_s
    while not done.is_set():
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return CallOutcome(timed_out=True)
        if cancel is not None and cancel.is_set():
            return CallOutcome(cancelled=True)
        done.wait(left_s if cancel is None else min(left_s, _CANCEL_POLL_S))
    if "error" in box:
        exc = box["error"]
        return CallOutcome(error=f"{value} raised {type(exc).__name__}: {exc}")
    return _outcome(value, box.get("value"))


def _outcome(value: str, returned: Any) -> CallOutcome:
    exit_code, stdout = 0, returned
    if isinstance(returned, tuple):
        if len(returned) != 2 or not isinstance(returned[0], int):
            return CallOutcome(error=f"{value} returned {returned!r}, not (exit_code, stdout)")
        exit_code, stdout = returned
    if stdout is None:
        stdout = ""
    if isinstance(stdout, bytes):
        stdout = stdout.decode("utf-8", "replace")
    if not isinstance(stdout, str):
        return CallOutcome(error=f"{value} returned a {type(stdout).__name__}, not text")
    return CallOutcome(exit_code=exit_code, stdout=stdout)


def prepare_modules(values: list[str], function: str, failed: list[str]) -> None:
    """Call `function()` of each in-process hook module named in `values` that has
    one, but not of those in `failed` (they did not import): the starter zygote
    calls `prepare_fork` before its forks, a standby starter `prepare_standby`
    while it waits for a job. A failure is logged; the hook's own call reports."""
    names = dict.fromkeys(module_of(value) for value in values if is_python_ref(value))
    for name in names:
        module = sys.modules.get(name)
        prepare = getattr(module, function, None) if name not in failed else None
        if callable(prepare):
            try:
                prepare()
            except Exception as exc:  # noqa: BLE001 - a hook module's own failure
                log.warning("%s.%s failed: %s", name, function, exc)


def preload(values: list[str]) -> list[str]:
    """Import the modules of the in-process hook values among `values`.

    A standby starter does this before it has a job, so the first hook call
    does not pay for the import. Returns the modules that failed to import
    (the real call reports the error).
    """
    failed = []
    for value in values:
        if not is_python_ref(value):
            continue
        module_name = module_of(value)
        try:
            importlib.import_module(module_name)
        except Exception:  # reported when the hook is really called
            failed.append(module_name)
    return failed
