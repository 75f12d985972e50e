"""The hook runner with real hooks: shell scripts and in-process Python modules.

Each behaviour is written twice, as an executable script in tmp_path and as a
function in a module written to tmp_path, and the same test runs both.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from fetchwork.config.loader import Config
from fetchwork.hooks.runner import (
    HookResult,
    HookSpec,
    resolve_hook,
    run_hook,
    start_hook,
)
from tests.support.processes import alive, kill_now
from tests.support.waiting import WaitTimeout, wait_until

LIMIT = 4096

# name -> (shell body, python function body); the python function is
# `def hook(args, stdin_text):` and may read `current_call()`.
BEHAVIOURS = {
    "echo": (
        'printf "args=%s\\n" "$*"; printf "stdin="; cat',
        'return "args=" + " ".join(args) + "\\nstdin=" + stdin_text',
    ),
    "exit3": (
        'echo partial; echo oops >&2; exit 3',
        'return (3, "partial\\n")',
    ),
    "hang": (
        'echo $$ > "$RECORD"; sleep 1000 & echo $! >> "$RECORD"; wait',
        'import time\n    time.sleep(30)',
    ),
    "flood": (
        f'head -c {LIMIT * 4} /dev/zero | tr "\\0" x',
        f'return "x" * {LIMIT * 4}',
    ),
    "garbage": (
        'printf "\\377\\376 not an ad \\000\\n"',
        'return b"\\xff\\xfe not an ad \\x00\\n"',
    ),
    "ignore_stdin": (
        'echo done',
        'return "done\\n"',
    ),
    "env": (
        'printf "%s %s" "$HOOK_MARK" "$(pwd)"',
        'call = current_call()\n    return call.env["HOOK_MARK"] + " " + call.cwd',
    ),
    "crash": (
        'kill -TERM $$',
        'raise RuntimeError("hook broke")',
    ),
}


@pytest.fixture
def make_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> Callable[..., HookSpec]:
    hook_dir = tmp_path / "hooks"
    hook_dir.mkdir()
    monkeypatch.syspath_prepend(str(hook_dir))

    def make(kind: str, behaviour: str, timeout_s: float = 20.0,
             args: tuple[str, ...] = ()) -> HookSpec:
        shell, python = BEHAVIOURS[behaviour]
        if kind == "program":
            path = hook_dir / f"{behaviour}.sh"
            path.write_text(f"#!/bin/sh\n{shell}\n")
            path.chmod(0o755)
            value = str(path)
        else:
            module = f"hook_{behaviour}_{uuid.uuid4().hex[:8]}"
            (hook_dir / f"{module}.py").write_text(
                "from fetchwork.hooks.runner import current_call\n\n\n"
                f"def hook(args, stdin_text):\n    {python}\n")
            value = f"python:{module}:hook"
        return HookSpec(hook="TEST", keyword="T", value=value, args=args,
                        timeout_s=timeout_s, output_limit=LIMIT)

    return make


both = pytest.mark.parametrize("kind", ["program", "python"])


@both
def test_stdin_and_args_reach_the_hook(make_hook, kind):
    spec = make_hook(kind, "echo", args=("from-knob",))
    result = run_hook(spec, "A = 1\n", extra_args=["accept"])
    assert result.ok, result
    assert result.stdout == "args=from-knob accept\nstdin=A = 1\n"
    assert result.exit_code == 0 and result.signal is None and not result.timed_out
    assert result.argv[1:] == ["from-knob", "accept"]


@both
def test_non_zero_exit_is_reported(make_hook, kind):
    result = run_hook(make_hook(kind, "exit3"), "")
    assert not result.ok
    assert result.exit_code == 3
    assert result.stdout == "partial\n"
    assert result.error is None


@both
def test_timeout_kills_and_reports(make_hook, kind, tmp_path, monkeypatch):
    record = tmp_path / "pids"
    spec = make_hook(kind, "hang", timeout_s=0.5)
    started = time.monotonic()
    result = run_hook(spec, "", env={**os.environ, "RECORD": str(record)})
    assert result.timed_out and not result.ok
    assert time.monotonic() - started < 10
    if kind == "program":
        # The script and its background sleep were one process group: both gone.
        assert result.signal == signal.SIGKILL
        pids = [int(line) for line in record.read_text().split()]
        assert len(pids) == 2
        wait_until(lambda: not any(alive(pid) for pid in pids), 10, what="group killed")


@both
def test_output_over_the_limit_is_bad_output(make_hook, kind):
    result = run_hook(make_hook(kind, "flood"), "")
    assert result.output_too_large and not result.ok
    assert len(result.stdout) <= LIMIT


@both
def test_garbage_output_is_passed_on_as_text(make_hook, kind):
    result = run_hook(make_hook(kind, "garbage"), "")
    assert result.ok
    assert "not an ad" in result.stdout
    assert "\ufffd" in result.stdout


@both
def test_hook_that_never_reads_stdin_is_fine(make_hook, kind):
    result = run_hook(make_hook(kind, "ignore_stdin"), "x" * (1 << 20))
    assert result.ok, result
    assert result.stdout == "done\n"


@both
def test_env_and_cwd_reach_the_hook(make_hook, kind, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOOK_MARK": "marked"}
    result = run_hook(make_hook(kind, "env"), "", env=env, cwd=str(work))
    assert result.ok, result
    assert result.stdout == f"marked {work}"


@both
def test_a_crashing_hook_is_reported(make_hook, kind):
    result = run_hook(make_hook(kind, "crash"), "")
    assert not result.ok
    if kind == "program":
        assert result.signal == signal.SIGTERM and result.exit_code is None
    else:
        assert result.error is not None and "hook broke" in result.error


@both
def test_start_hook_calls_on_done(make_hook, kind):
    results: list[HookResult] = []
    done = threading.Event()

    def on_done(result: HookResult) -> None:
        results.append(result)
        done.set()

    start_hook(make_hook(kind, "echo"), "B = 2\n", extra_args=["reject"], on_done=on_done)
    assert done.wait(20)
    assert results[0].ok and results[0].stdout == "args=reject\nstdin=B = 2\n"


@both
def test_hooks_run_concurrently(make_hook, kind):
    spec = make_hook(kind, "echo")
    results: dict[int, HookResult] = {}

    def one(index: int) -> None:
        results[index] = run_hook(spec, f"N = {index}\n")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == list(range(8))
    for index, result in results.items():
        assert result.ok and result.stdout.endswith(f"N = {index}\n")


@both
def test_cancel_ends_a_run_early(make_hook, kind, tmp_path):
    record = tmp_path / "pids"
    cancel = threading.Event()
    results: list[HookResult] = []
    done = threading.Event()

    def on_done(result: HookResult) -> None:
        results.append(result)
        done.set()

    started = time.monotonic()
    start_hook(make_hook(kind, "hang", timeout_s=60), "",
               env={**os.environ, "RECORD": str(record)}, on_done=on_done, cancel=cancel)
    if kind == "program":
        wait_until(lambda: len(_pids_in(record)) == 2, 20, what="the hook started")
    cancel.set()
    assert done.wait(20)
    assert time.monotonic() - started < 20
    assert results[0].cancelled and not results[0].ok and not results[0].timed_out
    assert "cancelled" in results[0].outcome()
    if kind == "program":
        wait_until(lambda: not any(alive(pid) for pid in _pids_in(record)), 10)


def test_an_in_process_hook_past_its_timeout_is_reported_once(tmp_path):
    # The outcome goes from the hook's own thread when it returns in time,
    # else from the watch at the timeout: never both.
    hook_dir = tmp_path / "late"
    hook_dir.mkdir()
    record = tmp_path / "returned"
    (hook_dir / "late_hook.py").write_text(
        "import time\n\n\n"
        "def hook(args, stdin_text):\n"
        "    time.sleep(1.0)\n"
        f"    open({str(record)!r}, 'w').close()\n"
        "    return 'too late'\n")
    sys.path.insert(0, str(hook_dir))
    try:
        results: list[HookResult] = []
        start_hook(HookSpec(hook="TEST", keyword="T", value="python:late_hook:hook",
                            timeout_s=0.2), "", on_done=results.append)
        wait_until(lambda: results, 20, what="the timeout's report")
        assert results[0].timed_out and not results[0].ok
        wait_until(record.exists, 20, what="the abandoned call to return")
        with pytest.raises(WaitTimeout):
            wait_until(lambda: len(results) > 1, 0.5)
        assert len(results) == 1 and results[0].stdout == ""
    finally:
        sys.path.remove(str(hook_dir))


@pytest.mark.parametrize("ending", ["timeout", "cancel"])
def test_an_unwatched_in_process_call_is_settled_by_its_caller(tmp_path, ending):
    # No hook thread watches it: the caller's settle() delivers the timeout or
    # the cancellation, in the caller's thread, once.
    hook_dir = tmp_path / "slow"
    hook_dir.mkdir()
    (hook_dir / "slow_hook.py").write_text(
        "import time\n\n\n"
        "def hook(args, stdin_text):\n"
        "    time.sleep(1.0)\n"
        "    return 'too late'\n")
    sys.path.insert(0, str(hook_dir))
    try:
        results: list[tuple[HookResult, str]] = []
        cancel = threading.Event()
        call = start_hook(HookSpec(hook="TEST", keyword="T", value="python:slow_hook:hook",
                                   timeout_s=30), "", cancel=cancel, watched=False,
                          on_done=lambda result: results.append(
                              (result, threading.current_thread().name)))
        assert call is not None
        deadline = time.monotonic() + 30
        assert not call.settle(deadline, cancel) and not results
        if ending == "timeout":
            deadline = time.monotonic()
        else:
            cancel.set()
        assert call.settle(deadline, cancel)
        [(result, thread)] = results
        assert thread == threading.current_thread().name
        assert result.timed_out if ending == "timeout" else result.cancelled
        assert call.settle(deadline, cancel)  # delivered already: nothing more
        with pytest.raises(WaitTimeout):  # the abandoned call returns (1 s), unheard
            wait_until(lambda: len(results) > 1, 1.5)
    finally:
        sys.path.remove(str(hook_dir))


def test_a_program_hook_has_no_call_to_settle(make_hook):
    done = threading.Event()
    assert start_hook(make_hook("program", "ignore_stdin"), "", on_done=lambda _r: done.set(),
                      watched=False) is None
    assert done.wait(20)


def _pids_in(path: Path) -> list[int]:
    try:
        return [int(word) for word in path.read_text().split()]
    except (OSError, ValueError):
        return []


def test_start_hook_reaps_the_program(make_hook):
    finished = threading.Event()
    start_hook(make_hook("program", "ignore_stdin"), "", on_done=lambda result: finished.set())
    assert finished.wait(20)  # called after the program was reaped
    zombies = [child for child in psutil.Process().children()
               if child.status() == psutil.STATUS_ZOMBIE]
    assert zombies == []


def shell_hook(path: Path, body: str, **fields) -> HookSpec:
    """An executable `#!/bin/sh` script at `path` running `body`, as a hook spec."""
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)
    return HookSpec(hook="TEST", keyword="T", value=str(path), **{"timeout_s": 60, **fields})


def _run_leaving_a_sleep(tmp_path: Path, launch: str) -> tuple[HookResult, float]:
    """Run a hook that leaves `launch sleep 1000` behind (holding its stdout), and says bye.

    The sleep's pid is written to tmp_path/left.
    """
    spec = shell_hook(tmp_path / "leave.sh",
                      f'{launch}sleep 1000 &\necho $! > "{tmp_path / "left"}"\necho bye\n')
    started = time.monotonic()
    result = run_hook(spec, "")
    return result, time.monotonic() - started


def test_leftover_processes_die_with_the_main_process(tmp_path):
    # The background sleep keeps stdout open; the runner must not wait for it.
    result, took_s = _run_leaving_a_sleep(tmp_path, "")
    assert result.ok and result.stdout == "bye\n"
    assert took_s < 10
    pid = int((tmp_path / "left").read_text())
    wait_until(lambda: not alive(pid), 10, what="leftover sleep killed")


def test_a_hook_that_left_its_group_does_not_hold_the_runner(tmp_path):
    try:
        result, took_s = _run_leaving_a_sleep(tmp_path, "setsid ")
        assert result.ok and result.stdout == "bye\n"
        assert took_s < 10
    finally:
        if (tmp_path / "left").exists():
            kill_now(int((tmp_path / "left").read_text()))


# -- configuration -----------------------------------------------------------

def test_resolve_hook_reads_the_keyword_knobs():
    config = Config.from_text(textwrap.dedent("""\
        HOOK_OUTPUT_LIMIT = 2048
        HOOK_TIMEOUT_FETCH_WORK = 60
        HOOK_TIMEOUT_REPLY_FETCH = 60
        DB_HOOK_FETCH_WORK = /opt/hooks/fetch
        DB_HOOK_FETCH_WORK_ARGS = "--pool 'a b' x""y"
        DB_HOOK_FETCH_WORK_TIMEOUT = 7
        DB_HOOK_REPLY_FETCH = python:pkg.mod:reply
        DB_HOOK_REPLY_FETCH_ARGS = -v  --fast
        """))
    fetch = resolve_hook(config, "DB", "FETCH_WORK")
    assert fetch == HookSpec(hook="FETCH_WORK", keyword="DB", value="/opt/hooks/fetch",
                             args=("--pool", "a b", 'x"y'), timeout_s=7.0, output_limit=2048)
    reply = resolve_hook(config, "DB", "REPLY_FETCH")
    assert reply is not None and reply.in_process
    assert reply.args == ("-v", "--fast") and reply.timeout_s == 60.0
    assert resolve_hook(config, "DB", "EVICT_CLAIM") is None
    assert resolve_hook(config, None, "FETCH_WORK") is None


def test_too_much_stderr_is_cut_short_not_bad_output(tmp_path):
    spec = shell_hook(tmp_path / "noisy.sh", f"head -c {LIMIT * 4} /dev/zero >&2\necho fine\n",
                      timeout_s=20, output_limit=LIMIT)
    result = run_hook(spec, "")
    assert result.ok and result.stdout == "fine\n"
    assert len(result.stderr) == LIMIT


def test_in_process_hook_knows_its_call(tmp_path, monkeypatch):
    (tmp_path / "whoami_hook.py").write_text(
        "from fetchwork.hooks.runner import current_call\n\n\n"
        "def hook(args, stdin_text):\n"
        "    call = current_call()\n"
        "    return call.keyword + '_' + call.hook\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = HookSpec(hook="FETCH_WORK", keyword="DB", value="python:whoami_hook:hook")
    assert run_hook(spec, "").stdout == "DB_FETCH_WORK"


@both
def test_a_caller_that_logs_the_result_gets_a_quiet_success(make_hook, kind, caplog):
    """`caller_logs`: the startd logs what a fetch or reply hook's answer did, so
    an in-process hook's success is a debug line here; a failure still says so
    here at INFO, and so does a program's every run."""
    def run(behaviour: str, caller_logs: bool) -> HookResult:
        box: list[HookResult] = []
        start_hook(make_hook(kind, behaviour), "", on_done=box.append, caller_logs=caller_logs)
        return wait_until(lambda: box and box[0], 30, what=f"the {behaviour} hook's result")

    with caplog.at_level("DEBUG", logger="fetchwork.hooks.runner"):
        assert run("echo", True).ok
        assert not run("exit3", True).ok
        assert run("echo", False).ok
    levels = [(r.levelname, "took" in r.getMessage()) for r in caplog.records
              if r.name == "fetchwork.hooks.runner" and "took" in r.getMessage()]
    quiet = "DEBUG" if kind == "python" else "INFO"
    assert levels == [(quiet, True), ("INFO", True), ("INFO", True)]
