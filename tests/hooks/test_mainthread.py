"""In-process hooks called in the caller's thread with a watchdog (`hooks.mainthread`).

Real modules written into tmp_path; the same outcomes as the hook-thread form,
and a hung hook is stopped at its timeout, not left running.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fetchwork.hooks import mainthread
from fetchwork.hooks.runner import HookResult, HookSpec, run_hook
from tests.support.waiting import WaitTimeout, wait_until

# The suite's per-test timeout would keep SIGALRM, which this form needs free.
pytestmark = pytest.mark.timeout(300, method="thread")


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[Callable[..., HookSpec]]:
    folder = tmp_path / "hooks"
    folder.mkdir()
    sys.path.insert(0, str(folder))

    def make(body: str, timeout_s: float = 20.0) -> HookSpec:
        module = f"here_{uuid.uuid4().hex[:8]}"
        (folder / f"{module}.py").write_text(
            "import os\nimport time\n\nfrom fetchwork.hooks.runner import current_call\n\n\n"
            "def hook(args, stdin_text):\n" + "".join(f"    {line}\n"
                                                     for line in body.splitlines()))
        return HookSpec(hook="TEST", keyword="T", value=f"python:{module}:hook",
                        timeout_s=timeout_s)

    yield make
    sys.path.remove(str(folder))


def _run(spec: HookSpec, **options: object) -> HookResult:
    return run_hook(spec, "the ads", ["exit"], here=True, **options)  # type: ignore[arg-type]


def test_the_hook_runs_in_this_thread_and_knows_its_call(hook, tmp_path):
    spec = hook("import threading\n"
                "call = current_call()\n"
                "return threading.current_thread().name + ' ' + call.cwd + ' '"
                " + call.env['MARK'] + ' ' + ' '.join(args) + ' ' + stdin_text")
    result = _run(spec, env={"MARK": "m1"}, cwd=str(tmp_path))
    assert result.ok
    assert result.stdout == f"{threading.current_thread().name} {tmp_path} m1 exit the ads"
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("body, check", [
    ("return (3, 'partial')", lambda r: r.exit_code == 3 and r.stdout == "partial"),
    ("raise RuntimeError('hook broke')", lambda r: "RuntimeError: hook broke" in r.error),
    ("raise SystemExit(4)", lambda r: "SystemExit" in r.error),
    ("return 42", lambda r: "not text" in r.error),
    ("return b'\\xff ok'", lambda r: r.ok and r.stdout.endswith(" ok")),
])
def test_outcomes_are_the_thread_forms(hook, body, check):
    spec = hook(body)
    here = _run(spec)
    there = run_hook(spec, "the ads", ["exit"])
    assert check(here) and check(there)
    assert (here.ok, here.exit_code, here.stdout, here.error) == \
        (there.ok, there.exit_code, there.stdout, there.error)


def test_a_missing_hook_is_an_error(hook):
    result = _run(HookSpec(hook="TEST", keyword="T", value="python:no_such_mod_x:hook",
                           timeout_s=5))
    assert not result.ok and "cannot load" in (result.error or "")


@pytest.mark.parametrize("body", [
    "time.sleep(1.5)\nopen(os.environ['RECORD'], 'w').close()",
    # Swallows the first one and goes on: the next reminder stops it.
    "try:\n"
    "    time.sleep(1.5)\n"
    "except BaseException:\n"
    "    pass\n"
    "time.sleep(1.5)\n"
    "open(os.environ['RECORD'], 'w').close()",
])
def test_a_hung_hook_is_stopped_at_its_timeout(hook, tmp_path, monkeypatch, body):
    record = tmp_path / "went-on"
    monkeypatch.setenv("RECORD", str(record))
    started = time.monotonic()
    result = _run(hook(body, timeout_s=0.3))
    assert result.timed_out and not result.ok and "timed out" in result.outcome()
    assert time.monotonic() - started < 10
    with pytest.raises(WaitTimeout):  # stopped, not abandoned: it never goes on
        wait_until(record.exists, 2.0)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


# A hook's first line: it marks that it runs (the environment's STARTED names the file).
MARK_STARTED = "open(os.environ['STARTED'], 'w').close()\n"


def _pipe_writer(word: bytes, started: Path) -> tuple[int, threading.Thread]:
    """A pipe and a thread that writes `word` to it once the hook has marked `started`,
    so the word comes while the hook runs."""
    read_fd, write_fd = os.pipe()

    def later() -> None:
        try:
            wait_until(started.exists, 30, what="the hook to start")
            os.write(write_fd, word)
        finally:
            os.close(write_fd)

    return read_fd, threading.Thread(target=later)


def test_a_stop_request_on_a_watched_fd_cancels_the_call(hook, tmp_path, monkeypatch):
    monkeypatch.setenv("STARTED", str(tmp_path / "started"))
    read_fd, writer = _pipe_writer(b"vacate\n", tmp_path / "started")
    heard: list[bytes] = []

    def stop_asked() -> bool:
        try:
            heard.append(os.read(read_fd, 100))
        except BlockingIOError:
            return False
        return b"vacate" in b"".join(heard)

    os.set_blocking(read_fd, False)
    flags = fcntl.fcntl(read_fd, fcntl.F_GETFL)
    writer.start()
    started = time.monotonic()
    try:
        result = _run(hook(MARK_STARTED + "time.sleep(30)"), stop_asked=stop_asked,
                      watch_fds=[read_fd])
    finally:
        writer.join()
    assert result.cancelled and not result.timed_out and not result.ok
    assert time.monotonic() - started < 20
    assert fcntl.fcntl(read_fd, fcntl.F_GETFL) == flags
    assert signal.getsignal(signal.SIGIO) is signal.SIG_DFL
    os.close(read_fd)


def test_other_words_leave_the_hook_running(hook, tmp_path, monkeypatch):
    monkeypatch.setenv("STARTED", str(tmp_path / "started"))
    read_fd, writer = _pipe_writer(b"suspend\n", tmp_path / "started")
    asked: list[bool] = []

    def stop_asked() -> bool:
        asked.append(True)
        return False

    writer.start()
    try:
        result = _run(hook(MARK_STARTED + "time.sleep(2.0)\nreturn 'done'"),
                      stop_asked=stop_asked, watch_fds=[read_fd])
    finally:
        writer.join()
    assert result.ok and result.stdout == "done"
    assert len(asked) >= 2  # before the call, and when the word came
    os.close(read_fd)


def test_a_stop_asked_before_the_call_never_calls_the_hook(hook, tmp_path, monkeypatch):
    record = tmp_path / "called"
    monkeypatch.setenv("RECORD", str(record))
    result = _run(hook("open(os.environ['RECORD'], 'w').close()"), stop_asked=lambda: True)
    assert result.cancelled and not record.exists()


def test_off_the_main_thread_the_hook_thread_form_serves(hook):
    spec = hook("import threading\nreturn threading.current_thread().name")
    results: list[HookResult] = []
    caller = threading.Thread(target=lambda: results.append(_run(spec)), name="caller")
    caller.start()
    caller.join(30)
    assert not mainthread.usable() or threading.current_thread() is threading.main_thread()
    [result] = results
    assert result.ok and result.stdout not in ("caller", "")


def test_not_used_when_the_process_keeps_its_own_alarm(hook):
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        assert not mainthread.usable()
        result = _run(hook("import threading\nreturn threading.current_thread().name"))
        assert result.ok and result.stdout != threading.current_thread().name
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert mainthread.usable()


def test_a_call_that_did_its_work_is_logged_at_debug_a_failure_at_info(hook, caplog):
    caplog.set_level(logging.DEBUG, logger="fetchwork.hooks.runner")
    _run(hook("return 'fine'"))
    _run(hook("return (2, '')"))
    levels = [(record.levelno, record.getMessage().rsplit(": ", 1)[-1])
              for record in caplog.records if "T_HOOK_TEST" in record.getMessage()]
    assert [level for level, _ in levels] == [logging.DEBUG, logging.INFO]
    assert "exit 2" in levels[1][1] or "2" in levels[1][1]
