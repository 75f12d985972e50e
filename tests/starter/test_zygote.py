"""The starter zygote and its client, on their own: real zygote, real starters, real jobs.

Each test starts a zygote through `ZygoteClient`, asks it for starters and
watches what the client reports: pids, pidfds, exit statuses, and what
happens when the zygote dies, cannot fork, or a starter crashes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from fetchwork.config.ads import format_ad
from fetchwork.errors import StarterError
from fetchwork.startd.starters.zygoteclient import STATUS_UNKNOWN, ForkedStarter, ZygoteClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

# A zygote whose fork always fails, as under a process limit.
FAILING_FORK = ("import errno, os, sys\n"
                "def fork():\n"
                "    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))\n"
                "os.fork = fork\n"
                "from fetchwork.starter.zygote import main\n"
                "sys.exit(main())\n")


def _env(base: Path, config_text: str = "") -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("_FETCHWORK_") and key != "FETCHWORK_CONFIG"}
    config = base / "zygote.conf"
    config.write_text(config_text)
    env.update(FETCHWORK_CONFIG=str(config), FETCHWORK_STATE_DIR=str(base / "state"))
    return env


class Client(ZygoteClient):
    """A client that closes the starters it spawned when the test ends."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.spawned: list[ForkedStarter] = []

    def spawn(self, args: Any) -> ForkedStarter:
        starter = super().spawn(args)
        self.spawned.append(starter)
        return starter

    def close(self) -> None:
        for starter in self.spawned:
            # Only while it lives: once the zygote reaped it, its pid (and group id)
            # may be another test's starter's.
            alive = starter.pidfd is not None and not select.select([starter.pidfd], [], [], 0)[0]
            if alive:
                try:
                    os.killpg(starter.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            starter.close()
        self.spawned = []
        super().close()


@pytest.fixture
def client(job_tmp: Path) -> Iterator[Client]:
    zygote = Client(env=_env(job_tmp))
    yield zygote
    zygote.close()


def _out(base: Path, name: str) -> Path:
    """A file a job may write (jobs run as nobody under a root test run)."""
    folder = base / "out"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o777)
    return folder / name


def _args(base: Path, name: str, job: dict[str, Any]) -> list[str]:
    sandbox = base / "execute" / name
    sandbox.mkdir(parents=True)
    sandbox.chmod(0o755)
    (sandbox / ".job.ad").write_text(format_ad({"Iwd": str(base), **job}))
    (sandbox / ".machine.ad").write_text(format_ad({"Name": "slot1@test", "SlotID": 1}))
    return ["--job-ad", str(sandbox / ".job.ad"), "--slot-ad", str(sandbox / ".machine.ad"),
            "--slot", "1", "--sandbox", str(sandbox)]


def _wait_status(client: ZygoteClient, starter: ForkedStarter) -> int:
    box: list[int] = []

    def ended() -> bool:
        fd = client.fileno()
        if fd is not None:
            select.select([fd], [], [], 0.05)
        status = client.exit_status(starter)
        if status is not None:
            box.append(status)
        return bool(box)

    wait_until(ended, 60, what=f"starter {starter.pid} to end")
    return box[0]


def _events(starter: ForkedStarter) -> list[dict[str, Any]]:
    os.set_blocking(starter.stdout.fileno(), True)
    return [json.loads(line) for line in starter.stdout.read().splitlines() if line.strip()]


def test_a_forked_starter_runs_its_job_and_reports(client: Client, job_tmp: Path) -> None:
    out = _out(job_tmp, "one")
    starter = client.spawn(_args(job_tmp, "one", {"Cmd": "/bin/sh",
                                                  "Arguments": f"-c 'echo ran > {out}'"}))
    assert _wait_status(client, starter) == 0
    kinds = [event["event"] for event in _events(starter)]
    assert kinds[0] == "prepared" and "started" in kinds and kinds[-1] == "exited"
    assert out.read_text().strip() == "ran"


def test_a_starter_has_its_own_session_under_the_zygote(client: Client,
                                                          job_tmp: Path) -> None:
    starter = client.spawn(_args(job_tmp, "own", {"Cmd": "/bin/sleep", "Arguments": "30"}))
    try:
        assert os.getsid(starter.pid) == starter.pid
        assert psutil.Process(starter.pid).ppid() == client.pid
        assert starter.pidfd is not None
    finally:
        starter.stdin.close()  # EOF on stdin: the starter vacates its job
    assert _wait_status(client, starter) == 0


def test_a_crashed_starter_reports_its_signal(client: Client, job_tmp: Path) -> None:
    starter = client.spawn(_args(job_tmp, "crash", {"Cmd": "/bin/sleep", "Arguments": "30"}))
    wait_until(lambda: b"started" in (starter.stdout.read() or b""), 30, what="job start")
    os.killpg(starter.pid, signal.SIGKILL)
    assert _wait_status(client, starter) == -signal.SIGKILL


def test_a_failing_starter_reports_its_exit_status(client: Client, job_tmp: Path) -> None:
    starter = client.spawn(["--job-ad", str(job_tmp / "missing.ad"), "--slot-ad",
                            str(job_tmp / "missing.ad"), "--slot", "1",
                            "--sandbox", str(job_tmp / "nowhere")])
    assert _wait_status(client, starter) == 1


def test_a_zygote_that_died_between_jobs_is_replaced(client: Client,
                                                     job_tmp: Path) -> None:
    first = client.spawn(_args(job_tmp, "a", {"Cmd": "/bin/true"}))
    assert _wait_status(client, first) == 0
    old = client.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(old) or
               psutil.Process(old).status() == psutil.STATUS_ZOMBIE, 30)
    out = _out(job_tmp, "b")
    second = client.spawn(_args(job_tmp, "b", {"Cmd": "/bin/sh",
                                               "Arguments": f"-c 'echo b > {out}'"}))
    assert client.pid != old and client.starts == 2
    assert _wait_status(client, second) == 0
    assert out.read_text().strip() == "b"


def test_a_starter_outlives_its_dead_zygote(client: Client, job_tmp: Path) -> None:
    starter = client.spawn(_args(job_tmp, "orphan", {"Cmd": "/bin/sleep", "Arguments": "30"}))
    wait_until(lambda: b"started" in (starter.stdout.read() or b""), 30, what="job start")
    zygote = client.pid
    assert zygote is not None
    os.kill(zygote, signal.SIGKILL)
    client.read_reports()
    assert client.exit_status(starter) is None  # still running, now an orphan
    starter.stdin.close()
    assert _wait_status(client, starter) == STATUS_UNKNOWN


def test_a_fork_that_fails_is_a_clear_error(job_tmp: Path) -> None:
    client = Client([sys.executable, "-P", "-c", FAILING_FORK], env=_env(job_tmp))
    try:
        with pytest.raises(StarterError, match="fork failed: Resource temporarily unavailable"):
            client.spawn(_args(job_tmp, "nofork", {"Cmd": "/bin/true"}))
        assert client.alive() and client.starts == 1  # the zygote itself is fine
    finally:
        client.close()


def test_a_zygote_that_cannot_start_is_a_clear_error(job_tmp: Path) -> None:
    client = Client([str(job_tmp / "no-such-python")], env=_env(job_tmp))
    with pytest.raises(StarterError, match="cannot start the starter zygote"):
        client.spawn(_args(job_tmp, "nozygote", {"Cmd": "/bin/true"}))


def test_the_zygote_leaves_when_the_startd_closes(client: Client, job_tmp: Path) -> None:
    starter = client.spawn(_args(job_tmp, "last", {"Cmd": "/bin/true"}))
    assert _wait_status(client, starter) == 0
    proc = client.proc
    assert proc is not None
    client.close()
    assert proc.returncode == 0
    assert client.proc is None


def test_a_forked_starter_answers_as_a_popen_would(client: Client, job_tmp: Path) -> None:
    starter = client.spawn(_args(job_tmp, "popen", {"Cmd": "/bin/sleep", "Arguments": "30"}))
    assert starter.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        starter.wait(timeout=0.2)
    starter.kill()
    assert starter.wait(timeout=30) == -signal.SIGKILL
    assert starter.poll() == starter.returncode == -signal.SIGKILL


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_killed_starters_job_and_its_children_die_with_it(client: Client,
                                                            job_tmp: Path) -> None:
    """A forked starter spawns its job without the parent-death signal: the zygote,
    a subreaper, adopts what the dead starter leaves and kills it."""
    child = _out(job_tmp, "child")
    starter = client.spawn(_args(job_tmp, "killed", {
        "Cmd": "/bin/sh", "Arguments": f"-c 'sleep 300 & echo $! > {child}; wait'"}))
    wait_until(lambda: child.exists() and child.read_text().strip(), 30, what="the job's child")
    job = psutil.Process(int(child.read_text())).ppid()
    assert psutil.Process(job).ppid() == starter.pid
    os.kill(starter.pid, signal.SIGKILL)
    assert _wait_status(client, starter) == -signal.SIGKILL
    wait_until(lambda: _gone(job), 30, what="the job to die with its starter")
    wait_until(lambda: _gone(int(child.read_text())), 30, what="the job's child to die too")
    assert client.alive()


def _waiting(client: ZygoteClient, count: int) -> list[int]:
    """The pids of the `count` starters the zygote has forked ahead (no other runs)."""
    assert client.pid is not None
    zygote = psutil.Process(client.pid)

    def forked() -> list[int] | None:
        pids = [child.pid for child in zygote.children()]
        return pids if len(pids) == count else None

    return wait_until(forked, 60, what=f"{count} starter(s) forked ahead")


def test_a_starter_forked_ahead_waits_for_its_job_and_runs_it(client: Client,
                                                             job_tmp: Path) -> None:
    client.keep_ahead(1)
    [waiting] = _waiting(client, 1)
    # Its own session, before it has a job (made just after the fork: wait for it).
    wait_until(lambda: os.getsid(waiting) == waiting, 10, what="the waiting starter's setsid")
    out = _out(job_tmp, "ahead")
    starter = client.spawn(_args(job_tmp, "ahead", {"Cmd": "/bin/sh",
                                                    "Arguments": f"-c 'echo s > {out}'"}))
    assert starter.pid == waiting
    assert _wait_status(client, starter) == 0
    assert out.read_text().strip() == "s"


def test_a_starter_forked_ahead_is_given_its_job_without_the_zygote(client: Client,
                                                                    job_tmp: Path) -> None:
    client.keep_ahead(1)
    [waiting] = _waiting(client, 1)
    wait_until(client.waiting, 60, what="the fork ahead reported")
    assert client.pid is not None
    os.kill(client.pid, signal.SIGSTOP)  # a zygote that answers nothing
    try:
        out = _out(job_tmp, "direct")
        starter = client.spawn(_args(job_tmp, "direct", {"Cmd": "/bin/sh",
                                                         "Arguments": f"-c 'echo d > {out}'"}))
        assert starter.pid == waiting
        wait_until(out.exists, 30, what="the job to run while the zygote is stopped")
    finally:
        os.kill(client.pid, signal.SIGCONT)
    assert _wait_status(client, starter) == 0
    assert out.read_text().strip() == "d"


def test_the_oldest_starter_forked_ahead_is_taken_and_none_forked_while_one_waits(
        client: Client, job_tmp: Path) -> None:
    client.keep_ahead(2)
    first, second = sorted(_waiting(client, 2))
    one = client.spawn(_args(job_tmp, "one", {"Cmd": "/bin/sleep", "Arguments": "30"}))
    client.keep_ahead(1)  # one waits still: nothing is forked
    two = client.spawn(_args(job_tmp, "two", {"Cmd": "/bin/sleep", "Arguments": "30"}))
    assert (one.pid, two.pid) == (first, second)
    assert client.pid is not None
    assert sorted(c.pid for c in psutil.Process(client.pid).children()) == [first, second]
    for starter in (one, two):
        starter.stdin.close()  # EOF on stdin: the starter vacates its job
        assert _wait_status(client, starter) == 0


def test_a_starter_that_died_while_waiting_is_replaced(client: Client, job_tmp: Path) -> None:
    client.keep_ahead(1)
    [dead] = _waiting(client, 1)
    os.kill(dead, signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(dead), 30, what="the dead one reaped")
    client.keep_ahead(1)
    [waiting] = _waiting(client, 1)
    assert waiting != dead
    starter = client.spawn(_args(job_tmp, "replaced", {"Cmd": "/bin/true"}))
    assert starter.pid == waiting and _wait_status(client, starter) == 0


@pytest.mark.parametrize("ahead", [0, 1], ids=["forked-for-it", "forked-ahead"])
def test_a_control_word_sent_at_once_is_obeyed(client: Client, job_tmp: Path,
                                               ahead: int) -> None:
    if ahead:
        client.keep_ahead(ahead)
        _waiting(client, ahead)
    starter = client.spawn(_args(job_tmp, f"word{ahead}", {"Cmd": "/bin/sleep",
                                                           "Arguments": "30"}))
    starter.stdin.write(b"kill\n")
    starter.stdin.flush()
    assert _wait_status(client, starter) == 0
    events = _events(starter)
    assert events[-1]["event"] == "exited" and events[-1]["how"] == "evict"


HOOK_MODULE = """\
import os

RECORD = {record!r}


def _note(word):
    with open(RECORD, "a") as handle:
        handle.write(f"{{word}} {{os.getpid()}}\\n")


def prepare_standby():
    _note("standby")


def prepare(args, stdin_text):
    _note("prepare")
"""


def test_a_starter_forked_ahead_prepares_its_hook_modules_before_its_job(
        job_tmp: Path) -> None:
    record = _out(job_tmp, "calls")
    hooks = job_tmp / "hooks"
    hooks.mkdir()
    (hooks / "aheadhook.py").write_text(HOOK_MODULE.format(record=str(record)))
    log_dir = job_tmp / "log"
    env = _env(job_tmp, f"STARTD_JOB_HOOK_KEYWORD = T\nT_HOOK_PREPARE_JOB = "
                        f"python:aheadhook:prepare\nLOG = {log_dir}\n")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hooks), env.get("PYTHONPATH")]))
    client = Client(env=env)
    try:
        client.keep_ahead(1)
        [waiting] = _waiting(client, 1)
        wait_until(record.exists, 60, what="prepare_standby() to run")
        starter = client.spawn(_args(job_tmp, "prepared", {"Cmd": "/bin/true",
                                                           "HookKeyword": "T"}))
        assert starter.pid == waiting and _wait_status(client, starter) == 0
    finally:
        client.close()
    assert record.read_text().splitlines() == [f"standby {waiting}", f"prepare {waiting}"]
    # Logging was set up before the slot was known; the job's lines name it.
    assert "starter[slot1] INFO job ended (exit)" in (log_dir / "StarterLog.slot1").read_text()


def _blocked_in(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return ""


WAITED_HOOK = """\
RECORD = {record!r}


def prepare_standby():
    open(RECORD, "a").close()


def prepare(args, stdin_text):
    return None
"""


def test_a_starter_forked_ahead_that_waited_rehearses_quietly_then_runs_its_job(
        job_tmp: Path, capfd: pytest.CaptureFixture[str]) -> None:
    record = _out(job_tmp, "prepared")
    hooks = job_tmp / "hooks"
    hooks.mkdir()
    (hooks / "waitedhook.py").write_text(WAITED_HOOK.format(record=str(record)))
    env = _env(job_tmp, "STARTD_JOB_HOOK_KEYWORD = T\n"
                        "T_HOOK_PREPARE_JOB = python:waitedhook:prepare\n")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hooks), env.get("PYTHONPATH")]))
    client = Client(env=env)
    try:
        client.keep_ahead(1)
        [waiting] = _waiting(client, 1)
        wait_until(record.exists, 60, what="prepare_standby() to run")
        if _blocked_in(waiting) in ("", "0"):
            pytest.skip("this kernel does not say where a process waits (/proc/PID/wchan)")
        # Blocked reading its socket (not waiting IDLE_S in select, not rehearsing):
        # the rehearsal is over, and nothing of it may show in the job's run.
        wait_until(lambda: _blocked_in(waiting).endswith("wait_for_more_packets"), 30,
                   what="the starter to wait on its socket after its rehearsal")
        out = _out(job_tmp, "waited")
        starter = client.spawn(_args(job_tmp, "waited", {"Cmd": "/bin/echo", "Arguments": "ran",
                                                         "Out": str(out), "HookKeyword": "T"}))
        assert starter.pid == waiting and _wait_status(client, starter) == 0
    finally:
        client.close()
    assert out.read_text() == "ran\n"
    err = capfd.readouterr().err
    assert "rehearsal" not in err.lower(), err
    assert "starter[slot1] INFO job ended (exit)" in err


def test_a_startd_gone_while_forks_ahead_are_made_ends_the_zygote_cleanly(
        client: Client) -> None:
    # Forks asked for and the socket closed at once: the zygote finds the startd gone
    # while it announces a fork, which is the end of its requests, not an error.
    client.keep_ahead(1)
    _waiting(client, 1)
    client.keep_ahead(12)
    proc = client.proc
    assert proc is not None
    client.close()
    assert proc.returncode == 0


def test_starters_waiting_for_a_job_leave_with_the_zygote(client: Client,
                                                          job_tmp: Path) -> None:
    client.keep_ahead(2)
    waiting = _waiting(client, 2)
    proc = client.proc
    assert proc is not None
    client.close()
    assert proc.returncode == 0
    wait_until(lambda: all(_gone(pid) for pid in waiting), 30, what="the waiting ones gone")


def test_a_starter_waiting_when_its_zygote_died_leaves(client: Client, job_tmp: Path) -> None:
    client.keep_ahead(1)
    [old] = _waiting(client, 1)
    old_zygote = client.pid
    assert old_zygote is not None
    os.kill(old_zygote, signal.SIGKILL)
    wait_until(lambda: not client.alive(), 30, what="the zygote's death seen")
    wait_until(lambda: _gone(old), 30, what="the waiting starter to leave")
    out = _out(job_tmp, "after")
    starter = client.spawn(_args(job_tmp, "after", {"Cmd": "/bin/sh",
                                                    "Arguments": f"-c 'echo a > {out}'"}))
    assert client.pid != old_zygote and starter.pid != old
    assert _wait_status(client, starter) == 0
    assert out.read_text().strip() == "a"
