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
from collections.abc import Callable, Mapping
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


class Call:
    """One call of an in-process hook: its outcome is delivered once, by the
    first of the hook's thread (returned or raised) and the watch (timeout or
    cancel; the call is then abandoned, as a thread cannot be killed)."""

    def __init__(self, on_outcome: Callable[[CallOutcome], None]):
        self._on_outcome = on_outcome
        self._lock = threading.Lock()
        self._delivered = False
        self.done = threading.Event()

    def deliver(self, outcome: CallOutcome) -> None:
        with self._lock:
            if self._delivered:
                return
            self._delivered = True
        try:
            self._on_outcome(outcome)
        finally:
            self.done.set()

    def watch(self, timeout_s: float, cancel: threading.Event | None = None) -> None:
        """Until the outcome is delivered: deliver a timeout or a cancellation when due."""
        deadline = time.monotonic() + timeout_s
        while not self.settle(deadline, cancel):
            left_s = deadline - time.monotonic()
            self.done.wait(left_s if cancel is None else min(left_s, _CANCEL_POLL_S))

    def settle(self, deadline: float, cancel: threading.Event | None = None) -> bool:
        """Deliver a timeout (`deadline` is a `time.monotonic()`) or a cancellation
        if one is due; whether the outcome has been delivered."""
        if self.done.is_set():
            return True
        if time.monotonic() >= deadline:
            self.deliver(CallOutcome(timed_out=True))
        elif cancel is not None and cancel.is_set():
            self.deliver(CallOutcome(cancelled=True))
        return self.done.is_set()


def start_call(value: str, args: list[str], stdin_text: str, timeout_s: float,
               call: HookCall, on_outcome: Callable[[CallOutcome], None],
               cancel: threading.Event | None = None, watched: bool = True) -> Call:
    """Call the hook named by `value` in a hook thread; `on_outcome` gets what it did,
    once, in a hook thread. `watched`: another hook thread delivers the timeout or
    cancellation; else the caller calls `watch()` or `settle()` itself.

    The outcome goes straight from the hook's thread to `on_outcome`, so a hook
    that returns in time costs one switch of threads each way, not two.
    """
    handle = Call(on_outcome)
    try:
        function = load_callable(value)
    except Exception as exc:
        failure = CallOutcome(error=f"cannot load {value}: {type(exc).__name__}: {exc}")
        WORKERS.run(lambda: handle.deliver(failure), f"hook-call-{call.keyword}-{call.hook}")
        return handle

    def body() -> None:
        try:
            returned = call_context(call, function, list(args), stdin_text)
        except BaseException as exc:  # the hook's failure is reported, not raised
            outcome = CallOutcome(error=f"{value} raised {type(exc).__name__}: {exc}")
        else:
            outcome = outcome_of(value, returned)
        handle.deliver(outcome)

    context = contextvars.Context()  # each call starts with no context of another's
    WORKERS.run(lambda: context.run(body), f"hook-call-{call.keyword}-{call.hook}")
    if watched:
        WORKERS.run(lambda: handle.watch(timeout_s, cancel),
                    f"hook-watch-{call.keyword}-{call.hook}")
    return handle


def call_context(call: HookCall, function: Callable[..., Any], args: list[str],
                 stdin_text: str) -> Any:
    """`function(args, stdin_text)` with `call` as its `current_call()` (run it in a
    fresh `contextvars.Context`); what it returned."""
    _current_call.set(call)
    return function(args, stdin_text)


def outcome_of(value: str, returned: Any) -> CallOutcome:
    """What a hook's returned value means: stdout, `(exit_code, stdout)` or an error."""
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
