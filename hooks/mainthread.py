"""An in-process hook called on the caller's own (main) thread, with a watchdog.

The starter waits for its prepare and exit hooks: handing each call to a hook
thread and its outcome back costs two wake-ups, which on a loaded machine are
each up to a millisecond of a job's start or end. Called here instead, the
hook runs at once, and two kernel watchdogs keep the promises a hook thread
keeps:

- the timeout: an interval timer (ITIMER_REAL) raises `HookTimedOut` in the
  hook when it is due, and again every `_REPEAT_S` until the hook has
  unwound, so a hook that swallows the first one is still stopped. The
  result is the thread form's: timed out. Unlike an abandoned hook thread, the
  hook is stopped, not left running beside the next job.
- a stop request while the hook runs (a control word from the startd or a
  request on the wake-up pipe): the descriptors named get O_ASYNC, so data on
  any of them sends SIGIO; its handler asks the caller (`stop_asked`, which
  reads and applies the waiting words) and raises `HookCancelled` in the hook
  only when the job is to stop. Other words leave the hook running.

Python runs signal handlers between bytecodes of the main thread, and an
interrupted system call is retried after the handler (PEP 475) unless it
raised, so a hook sleeping or waiting on a socket is stopped in time. A hook
stuck inside C code that never returns to the interpreter is not: that is what
the thread form (`inprocess.start_call`) is for, and `usable()` says when
this form cannot be used at all (not the main thread; SIGALRM or the timer
already in use by someone else; no interval timer on this system).
"""

from __future__ import annotations

import contextvars
import fcntl
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from fetchwork.config.pyref import load_callable
from fetchwork.hooks import handlers
from fetchwork.hooks.inprocess import CallOutcome, HookCall, call_context, outcome_of

# After the first timeout, the next reminders for a hook that did not unwind.
_REPEAT_S = 0.05


class HookStopped(BaseException):
    """Raised inside a hook called here to stop it (a BaseException: a hook's
    `except Exception` does not swallow it)."""


class HookTimedOut(HookStopped):
    """The hook's timeout is due."""


class HookCancelled(HookStopped):
    """The job is to stop: no hook is needed any more."""


def usable() -> bool:
    """Whether a hook can be called here: the main thread, SIGALRM at its default
    and no interval timer armed (this process uses neither otherwise)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if not hasattr(signal, "setitimer") or not hasattr(signal, "SIGIO"):
        return False  # pragma: no cover - not a POSIX system
    if handlers.current(signal.SIGALRM) != signal.SIG_DFL:
        return False
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def call_here(value: str, args: Sequence[str], stdin_text: str, timeout_s: float,
              call: HookCall, stop_asked: Callable[[], bool] | None = None,
              watch_fds: Sequence[int] = ()) -> CallOutcome:
    """Call the hook named by `value` now, in this thread (`usable()` must be true);
    what it did. `stop_asked` is called (in this thread) before the hook, and when
    one of `watch_fds` becomes readable while it runs; True cancels the call (not
    made at all when the first answer is True)."""
    try:
        function = load_callable(value)
    except Exception as exc:
        return CallOutcome(error=f"cannot load {value}: {type(exc).__name__}: {exc}")
    running = [True]
    fired = [False]

    def on_alarm(_number: int, _frame: Any) -> None:
        if running[0]:
            fired[0] = True
            raise HookTimedOut

    def on_io(_number: int, _frame: Any) -> None:
        if running[0] and stop_asked is not None and stop_asked():
            raise HookCancelled

    context = contextvars.Context()  # each call starts with no context of another's
    previous_alarm = handlers.swap(signal.SIGALRM, on_alarm)
    watched = _watch(watch_fds, on_io) if stop_asked is not None else None
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 1e-6), _REPEAT_S)
            on_io(signal.SIGIO, None)  # asked to stop before the call, or words waiting
            returned = context.run(call_context, call, function, list(args), stdin_text)
        finally:
            running[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0.0)
    except HookTimedOut:
        return CallOutcome(timed_out=True)
    except HookCancelled:
        return CallOutcome(timed_out=True) if fired[0] else CallOutcome(cancelled=True)
    except BaseException as exc:  # the hook's failure is reported, not raised
        if fired[0]:  # it turned the timeout into an error of its own: still a timeout
            return CallOutcome(timed_out=True)
        return CallOutcome(error=f"{value} raised {type(exc).__name__}: {exc}")
    finally:
        if watched is not None:
            _unwatch(*watched)
        handlers.swap(signal.SIGALRM, previous_alarm)
    if fired[0]:  # it swallowed the timeout and returned: the timeout stands
        return CallOutcome(timed_out=True)
    return outcome_of(value, returned)


_Watched = tuple[list[tuple[int, int, int]], Any]


def _watch(fds: Sequence[int], handler: Callable[[int, Any], None]) -> _Watched:
    """SIGIO to `handler` when any of `fds` becomes readable; what `_unwatch` restores."""
    previous = handlers.swap(signal.SIGIO, handler)
    changed: list[tuple[int, int, int]] = []
    for fd in fds:
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            owner = fcntl.fcntl(fd, fcntl.F_GETOWN)
            fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_ASYNC)
        except OSError:
            continue  # a descriptor that cannot signal (a file): read after the call
        changed.append((fd, flags, owner))
    return changed, previous


def _unwatch(changed: list[tuple[int, int, int]], previous: Any) -> None:
    for fd, flags, owner in changed:
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            fcntl.fcntl(fd, fcntl.F_SETOWN, owner)
        except OSError:
            continue
    handlers.swap(signal.SIGIO, previous)

