"""Running one hook, waiting for it (`run_hook`) or not (`start_hook`).

A program hook runs as HTCondor runs it (`programs`); a
`python:module:function` hook is called in a hook thread with the same
timeout (`inprocess`) and returns stdout text, None (no output) or
`(exit_code, stdout)`. Neither form ever raises for a failing hook: the
`HookResult` says what happened, and each run is logged with its duration.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from fetchwork.config import keywords
from fetchwork.config.argsyntax import parse_hook_args
from fetchwork.config.loader import Config
from fetchwork.config.pyref import load_callable
from fetchwork.hooks import mainthread
from fetchwork.hooks.inprocess import (
    Call,
    CallOutcome,
    HookCall,
    current_call,
    start_call,
)
from fetchwork.hooks.programs import program_refusal, run_program
from fetchwork.hooks.spec import DEFAULT_OUTPUT_LIMIT, HookResult, HookSpec
from fetchwork.hooks.workers import WORKERS

__all__ = ["DEFAULT_OUTPUT_LIMIT", "HookCall", "HookResult", "HookSpec", "current_call",
           "ignores", "program_refusal", "resolve_hook", "run_hook", "start_hook"]

log = logging.getLogger(__name__)


def resolve_hook(config: Config, keyword: str | None, hook: str) -> HookSpec | None:
    """The hook `<keyword>_HOOK_<hook>` with its args, timeout and output limit; None if unset."""
    value = keywords.hook_value(config, keyword, hook)
    if value is None or keyword is None:
        return None
    return HookSpec(
        hook=hook,
        keyword=keyword,
        value=value,
        args=tuple(parse_hook_args(keywords.hook_args(config, keyword, hook))),
        timeout_s=keywords.hook_timeout_s(config, keyword, hook),
        output_limit=config.get_int("HOOK_OUTPUT_LIMIT"),
    )


def ignores(spec: HookSpec, word: str) -> bool:
    """Whether the hook declares that it does nothing when called with `word` (the
    protocol's last argument, such as `accept`): a `python:` hook function whose
    `ignores` attribute lists the word. Such a call need not be made. A program
    hook, or a function that cannot be loaded (its call reports why), never does."""
    if not spec.in_process:
        return False
    try:
        function = load_callable(spec.value)
    except Exception:  # noqa: BLE001 - the real call reports it
        return False
    declared = getattr(function, "ignores", ())
    return isinstance(declared, (tuple, list, frozenset, set)) and word in declared


# -- running ---------------------------------------------------------------

def run_hook(spec: HookSpec, stdin_text: str = "", extra_args: Sequence[str] = (),
             env: Mapping[str, str] | None = None, cwd: str | None = None,
             user: tuple[int, int] | None = None, *,
             cancel: threading.Event | None = None, here: bool = False,
             stop_asked: Callable[[], bool] | None = None,
             watch_fds: Sequence[int] = ()) -> HookResult:
    """Run the hook to its end (or timeout) and report; never raises for hook failures.

    `user` is (uid, gid) to run a program hook as; in-process hooks run as the
    calling process and read `env`/`cwd` through `current_call()`. Setting
    `cancel` ends the run early: a program's group is killed, an in-process
    call is abandoned, and the result says `cancelled`.

    `here` (the starter's prepare and exit hooks): an in-process hook is called
    in this thread with a watchdog (`mainthread`) when it can be, not handed to a
    hook thread and back; `stop_asked` and `watch_fds` then stand for `cancel`
    (a stop request on one of the descriptors ends the call, cancelled). Such a
    call that did its work is logged at debug, as HTCondor logs hook runs at
    full debug; one that failed at info, as any other.
    """
    if spec.in_process and here and cancel is None and mainthread.usable():
        argv_args = _hook_args(spec, extra_args)
        started = time.monotonic()
        outcome = mainthread.call_here(spec.value, argv_args, stdin_text, spec.timeout_s,
                                       HookCall(spec.hook, spec.keyword, env, cwd),
                                       stop_asked, watch_fds)
        result = _in_process_result(spec, argv_args, outcome)
        _ended(result, started, quiet=True)
        return result
    if spec.in_process:
        box: list[HookResult] = []
        call = _start_in_process(spec, stdin_text, extra_args, env, cwd, box.append, cancel,
                                 watched=False)
        call.watch(spec.timeout_s, cancel)
        return box[0]
    started = time.monotonic()
    result = run_program(spec, [spec.value, *_hook_args(spec, extra_args)], stdin_text, env,
                         cwd, user, cancel)
    _ended(result, started)
    return result


def _hook_args(spec: HookSpec, extra_args: Sequence[str]) -> list[str]:
    # The configured <KEYWORD>_HOOK_<NAME>_ARGS come first and the protocol's
    # word (accept/reject, exit/evict/...) last, so a hook can be an
    # interpreter with its script in _ARGS: `python3 hook.py accept`.
    return [*spec.args, *extra_args]


def _start_in_process(spec: HookSpec, stdin_text: str, extra_args: Sequence[str],
                      env: Mapping[str, str] | None, cwd: str | None,
                      on_result: Callable[[HookResult], None],
                      cancel: threading.Event | None, watched: bool,
                      caller_logs: bool = False) -> Call:
    """Call an in-process hook in a hook thread; `on_result` gets its logged result, once."""
    argv_args = _hook_args(spec, extra_args)
    started = time.monotonic()

    def finish(outcome: CallOutcome) -> None:
        result = _in_process_result(spec, argv_args, outcome)
        _ended(result, started, quiet=caller_logs)
        on_result(result)

    return start_call(spec.value, argv_args, stdin_text, spec.timeout_s,
                      HookCall(spec.hook, spec.keyword, env, cwd), finish, cancel,
                      watched=watched)


def _ended(result: HookResult, started: float, quiet: bool = False) -> None:
    """Set the result's duration and log it (`quiet`: at debug when it did its work)."""
    spec = result.spec
    result.duration_s = time.monotonic() - started
    level = logging.DEBUG if quiet and result.ok else logging.INFO
    log.log(level, "hook %s_HOOK_%s (%s) took %.3fs: %s", spec.keyword, spec.hook, spec.value,
            result.duration_s, result.outcome())
    if result.stderr.strip() and not result.ok:
        log.info("hook %s_HOOK_%s stderr: %s", spec.keyword, spec.hook,
                 result.stderr.strip()[-2000:])


def start_hook(spec: HookSpec, stdin_text: str = "", extra_args: Sequence[str] = (),
               env: Mapping[str, str] | None = None, cwd: str | None = None,
               user: tuple[int, int] | None = None,
               on_done: Callable[[HookResult], None] | None = None, *,
               cancel: threading.Event | None = None, watched: bool = True,
               caller_logs: bool = False) -> Call | None:
    """Run the hook in a thread of `workers.WORKERS` (a program is reaped there);
    `on_done` gets the result, in a hook thread (an in-process hook's own, as
    soon as it returns).

    An in-process hook's call is returned. Unless `watched`, no hook thread
    watches its timeout and `cancel`: the caller calls `settle()` on it (with
    `time.monotonic()` + the spec's timeout) until the result is in, and the
    timeout's or cancellation's result then comes in the caller's thread.
    `caller_logs`: `on_done`'s caller logs each result itself, so an in-process
    hook that succeeded is a debug line here (a failure, and a program's run,
    which costs a fork and an exec beside which its line is little, are still
    said here as well).
    """

    def done(result: HookResult) -> None:
        if on_done is not None:
            try:
                on_done(result)
            except Exception:
                log.exception("handling the result of hook %s_HOOK_%s failed",
                              spec.keyword, spec.hook)

    if spec.in_process:
        return _start_in_process(spec, stdin_text, extra_args, env, cwd, done, cancel, watched,
                                 caller_logs)
    WORKERS.run(lambda: done(run_hook(spec, stdin_text, extra_args, env, cwd, user,
                                      cancel=cancel)),
                f"hook-{spec.keyword}-{spec.hook}")
    return None


def _in_process_result(spec: HookSpec, args: list[str], outcome: CallOutcome) -> HookResult:
    result = HookResult(spec=spec, argv=[spec.value, *args])
    result.timed_out = outcome.timed_out
    result.cancelled = outcome.cancelled
    result.error = outcome.error
    if outcome.exit_code is not None:
        result.exit_code = outcome.exit_code
        stdout = outcome.stdout
        encoded = stdout.encode("utf-8", "replace")
        if len(encoded) > spec.output_limit:
            result.output_too_large = True
            # Cut at the limit in bytes, as a program's output is, not in characters.
            stdout = encoded[:spec.output_limit].decode("utf-8", "ignore")
        result.stdout = stdout
    return result
