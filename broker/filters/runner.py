"""Running one filter: a program (no shell, own process group) or a python: callable.

A program gets argv `prog [ARGS] ACTION FILE` where FILE holds the job ad in
HTCondor's long form; an activation filter also gets the FETCHWORK_* facts
in its environment (`FETCHWORK_SLOT_AD` names a second file, the slot ad).
Its stdout is discarded, its stderr kept for the message; when the timeout
passes its whole process group is killed. After the call the file is read
back, since a filter may rewrite it. A `python:` filter is called in a
thread with a `FilterCall`; it returns the code (an int) and may change
`call.job_ad` in place or return `(code, ad)`. Nothing here raises for a
failing filter: the `FilterRun` says what happened.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import classad2

from fetchwork.config.ads import format_ad, from_dict, parse_ad, to_dict
from fetchwork.errors import AdError

log = logging.getLogger(__name__)

PYTHON_PREFIX = "python:"
SUBMIT, ACTIVATE, REVERT = "submit", "activate", "revert"
ACTIONS = (SUBMIT, ACTIVATE, REVERT)
# Environment variables an activation filter gets (FilterActivation's arguments).
ENV_PASS = "FETCHWORK_SCHEDULER_PASS"
ENV_INDEX = "FETCHWORK_JOB_INDEX"
ENV_BACKFILL = "FETCHWORK_BACKFILL"
ENV_RESOURCES = "FETCHWORK_RESOURCE_COUNT"
ENV_SLOT_AD = "FETCHWORK_SLOT_AD"
STDERR_LIMIT = 65536
JOB_AD_NAME = "job.ad"
SLOT_AD_NAME = "slot.ad"
STDERR_NAME = "stderr"


@dataclass(frozen=True)
class FilterSpec:
    """One configured filter: `<KIND>_FILTER_<NAME>` with its args and timeout."""

    name: str
    kind: str  # "submission" or "activation"
    value: str
    args: tuple[str, ...] = ()
    timeout_s: float = 15.0

    @property
    def in_process(self) -> bool:
        return self.value.startswith(PYTHON_PREFIX)


@dataclass(frozen=True)
class Facts:
    """What an activation filter learns about the candidate slot (FilterActivation's
    arguments): the round counter, the job's place among idle jobs, backfill, CPUs."""

    scheduler_pass: int = 0
    job_index: int = 0
    backfill: bool = False
    resource_count: int = 1
    slot_ad: Mapping[str, Any] | None = None

    def environment(self, slot_ad_path: str | None) -> dict[str, str]:
        env = {ENV_PASS: str(self.scheduler_pass), ENV_INDEX: str(self.job_index),
               ENV_BACKFILL: "1" if self.backfill else "0",
               ENV_RESOURCES: str(self.resource_count)}
        if slot_ad_path is not None:
            env[ENV_SLOT_AD] = slot_ad_path
        return env


@dataclass
class FilterRun:
    """What one call of a filter did."""

    spec: FilterSpec
    action: str
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    missing: bool = False
    error: str | None = None
    stderr: str = ""
    # The job ad as the filter left it (to_dict form), None when unreadable.
    ad: dict[str, Any] | None = None
    ad_error: str | None = None

    def first_stderr_line(self) -> str:
        return next((line.strip() for line in self.stderr.splitlines() if line.strip()), "")


@dataclass
class FilterCall:
    """What a `python:` filter is called with; it may change `job_ad` and set `message`."""

    action: str
    args: list[str]
    job_ad: classad2.ClassAd
    facts: Facts | None
    slot_ad: classad2.ClassAd | None = None
    message: str = ""


def run_filter(spec: FilterSpec, action: str, ad: Mapping[str, Any],
               facts: Facts | None = None, timeout_s: float | None = None) -> FilterRun:
    """Call `spec` with `action` on the job ad `ad` (to_dict form); never raises for
    the filter's failures. `timeout_s` (default: the spec's) bounds the call."""
    limit_s = spec.timeout_s if timeout_s is None else max(0.0, timeout_s)
    if spec.in_process:
        run = _call_python(spec, action, ad, facts, limit_s)
    else:
        run = _run_program(spec, action, ad, facts, limit_s)
    log.info("%s filter %s %s: %s", spec.kind, spec.name, action, describe(run, limit_s))
    return run


def describe(run: FilterRun, timeout_s: float) -> str:
    """A short account of a run for log lines."""
    if run.missing:
        return f"not found: {run.spec.value}"
    if run.error is not None:
        return f"could not run: {run.error}"
    if run.timed_out:
        return f"timed out after {timeout_s:g} s"
    if run.signal is not None:
        return f"killed by signal {run.signal}"
    return f"exit {run.exit_code}"


# -- programs ------------------------------------------------------------------

def _run_program(spec: FilterSpec, action: str, ad: Mapping[str, Any], facts: Facts | None,
                 timeout_s: float) -> FilterRun:
    run = FilterRun(spec, action)
    with tempfile.TemporaryDirectory(prefix=f"fw-filter-{spec.name.lower()}-") as folder:
        ad_path = os.path.join(folder, JOB_AD_NAME)
        _write(ad_path, format_ad(from_dict(ad)))
        env = dict(os.environ)
        if facts is not None:
            slot_path = None
            if facts.slot_ad is not None:
                slot_path = os.path.join(folder, SLOT_AD_NAME)
                _write(slot_path, format_ad(from_dict(facts.slot_ad)))
            env.update(facts.environment(slot_path))
        err_path = os.path.join(folder, STDERR_NAME)
        argv = [spec.value, *spec.args, action, ad_path]
        with open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=err, env=env,
                                        cwd=folder, close_fds=True, start_new_session=True)
            except FileNotFoundError:
                run.missing = True
                return run
            except OSError as exc:
                run.error = f"{spec.value}: {exc.strerror or exc}"
                return run
        status = _wait(proc, timeout_s)
        if status is None:
            run.timed_out = True
        elif status < 0:
            run.signal = -status
        else:
            run.exit_code = status
        run.stderr = _read_text(err_path, STDERR_LIMIT)
        _read_back(run, ad_path)
    return run


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _read_text(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The exit status, or None after a timeout; the group is killed either way
    (what the program left behind goes with it)."""
    try:
        status: int | None = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        status = None
    _kill_group(proc.pid)
    proc.wait()
    return status


def _read_back(run: FilterRun, ad_path: str) -> None:
    try:
        with open(ad_path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError as exc:
        run.ad_error = f"the job ad file is gone: {exc.strerror}"
        return
    try:
        run.ad = to_dict(parse_ad(text, source="the rewritten job ad"))
    except AdError as exc:
        run.ad_error = str(exc)


# -- python: callables ------------------------------------------------------------

def load_callable(value: str) -> Callable[..., Any]:
    """The callable named by `python:package.module:function` (ImportError, ValueError)."""
    module_name, colon, function_name = value[len(PYTHON_PREFIX):].partition(":")
    if not colon or not module_name or not function_name:
        raise ValueError(f"{value!r} is not python:package.module:function")
    target: Any = importlib.import_module(module_name)
    for part in function_name.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{value!r} does not name a callable")
    return target


def _call_python(spec: FilterSpec, action: str, ad: Mapping[str, Any], facts: Facts | None,
                 timeout_s: float) -> FilterRun:
    run = FilterRun(spec, action)
    try:
        function = load_callable(spec.value)
        call = FilterCall(action, list(spec.args), from_dict(ad), facts,
                          from_dict(facts.slot_ad) if facts and facts.slot_ad else None)
    except (ImportError, AttributeError, ValueError, AdError) as exc:
        run.missing = isinstance(exc, ImportError | AttributeError)
        run.error = None if run.missing else str(exc)
        return run
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = function(call)
        except Exception as exc:  # the filter's failure is reported, not raised
            box["error"] = exc

    thread = threading.Thread(target=body, name=f"filter-{spec.name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        run.timed_out = True  # abandoned: a thread cannot be killed
        return run
    if "error" in box:
        failure = box["error"]
        run.error = f"{spec.value} raised {type(failure).__name__}: {failure}"
        return run
    _python_result(run, box.get("value"), call)
    return run


def _python_result(run: FilterRun, returned: Any, call: FilterCall) -> None:
    new_ad: Any = call.job_ad
    if isinstance(returned, tuple) and len(returned) == 2:
        returned, new_ad = returned
    if isinstance(returned, bool) or not isinstance(returned, int):
        run.error = f"{run.spec.value} returned {returned!r}, not an exit code"
        return
    run.exit_code = returned
    run.stderr = call.message
    try:
        run.ad = to_dict(new_ad) if isinstance(new_ad, classad2.ClassAd) else to_dict(
            from_dict(new_ad))
    except (AdError, TypeError, AttributeError) as exc:
        run.ad_error = f"{run.spec.value} returned an unusable ad: {exc}"
