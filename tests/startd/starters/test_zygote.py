"""Starters forked by the zygote, on a real startd with the reference hooks and a real Redis.

The failure modes: the zygote dies between jobs, a job's starter crashes, the
zygote cannot fork, the startd is stopped while a starter runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config, environ_without_config
from tests.support.poolprocs import pool_config
from tests.support.startd import pool_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

# Loaded by every Python of the startd's tree (PYTHONPATH); only the zygote
# with FW_TEST_FAIL_FORK set gets a fork that fails, as under a process limit.
FAILING_FORK = """\
import os
import sys

if os.environ.get("FW_TEST_FAIL_FORK") and "fetchwork.starter.zygote" in sys.orig_argv:
    import errno

    def _fork():
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    os.fork = _fork
"""


class Startd:
    """One startd, one slot, the reference hooks, a pool of the suite's Redis."""

    def __init__(self, root: Path, redis_url: str, pool: str, fail_fork: bool = False,
                 trace: Path | None = None):
        self.root = root
        self.config_path = pool_config(root, redis_url, pool, "MachineMaxVacateTime = 5\n")
        (root / "sitecustomize.py").write_text(FAILING_FORK)
        self.env = environ_without_config()
        self.env.update(FETCHWORK_CONFIG=str(self.config_path),
                        FETCHWORK_STATE_DIR=str(root / "state"),
                        PYTHONPATH=os.pathsep.join(filter(None, [str(root),
                                                                 os.environ.get("PYTHONPATH")])))
        if fail_fork:
            self.env["FW_TEST_FAIL_FORK"] = "1"
        if trace is not None:
            self.env["FETCHWORK_LATENCY_TRACE"] = str(trace)
        self.err = root / "startd.err"
        with open(self.err, "wb") as stderr:
            self.proc = subprocess.Popen([sys.executable, "-m", "fetchwork.startd"],
                                         env=self.env, stdout=subprocess.DEVNULL, stderr=stderr)

    def log(self) -> str:
        return self.err.read_text(errors="replace")

    def exited(self) -> str | None:
        if self.proc.poll() is not None:
            return f"startd exited {self.proc.returncode}: {self.log()[-3000:]}"
        return None

    def zygote(self) -> psutil.Process | None:
        for child in psutil.Process(self.proc.pid).children():
            try:
                if "fetchwork.starter.zygote" in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                continue
        return None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def broker(redis_url: str, pool_name: str) -> Iterator[Broker]:
    client = redis.Redis.from_url(redis_url)
    yield Broker(client, pool=pool_name, config=Config.load(environ={}))
    client.close()


@pytest.fixture
def root() -> Iterator[Path]:
    with pool_root("zygote") as folder:
        yield folder


def _submit(broker: Broker, cmd: str, args: str = "") -> str:
    ad = {"Cmd": cmd, "Iwd": "/tmp"}
    if args:
        ad["Arguments"] = args
    [job_id] = broker.submit([ad], owner="test")
    return job_id


def _state(broker: Broker, job_id: str) -> str:
    ad = broker.get(job_id)
    return str(ad.get("FetchworkState")) if ad is not None else "gone"


def _wait_state(broker: Broker, startd: Startd, job_id: str, state: str,
                timeout_s: float = 60) -> None:
    wait_until(lambda: _state(broker, job_id) == state, timeout_s, fail_if=startd.exited,
               what=f"job {job_id} {state}")


def _hops(trace: Path) -> list[str]:
    """The hops marked in a latency trace so far, in order."""
    return [line.split()[0] for line in trace.read_text().splitlines()]


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _kill_job_processes(command: str) -> None:
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] and " ".join(proc.info["cmdline"]) == command:
            try:
                proc.kill()
            except psutil.Error:
                pass


def test_a_zygote_that_dies_between_jobs_is_replaced_and_no_job_is_lost(
        root: Path, redis_url: str, pool_name: str, broker: Broker) -> None:
    startd = Startd(root, redis_url, pool_name)
    try:
        first = _submit(broker, "/bin/true")
        _wait_state(broker, startd, first, "COMPLETED")
        zygote = wait_until(startd.zygote, 30, fail_if=startd.exited, what="the zygote")
        zygote.kill()
        wait_until(lambda: _gone(zygote), 30, what="the zygote's end")
        second = _submit(broker, "/bin/true")
        _wait_state(broker, startd, second, "COMPLETED")
        replacement = startd.zygote()
        assert replacement is not None and replacement.pid != zygote.pid
        assert "starter zygote" in startd.log() and "is gone" in startd.log()
    finally:
        assert startd.stop() == 0


def test_a_crashed_starter_leaves_a_slot_that_runs_the_next_job(
        root: Path, redis_url: str, pool_name: str, broker: Broker) -> None:
    startd = Startd(root, redis_url, pool_name)
    try:
        crashed = _submit(broker, "/bin/sleep", "61")
        _wait_state(broker, startd, crashed, "RUNNING")
        zygote = wait_until(startd.zygote, 30, fail_if=startd.exited, what="the zygote")
        starter = wait_until(lambda: _starter_of(zygote, "61"), 30, what="the starter")
        os.kill(starter.pid, signal.SIGKILL)
        wait_until(lambda: f"starter {starter.pid} exited with status -9" in startd.log(), 30,
                   fail_if=startd.exited, what="the starter's end in the log")
        after = _submit(broker, "/bin/true")
        _wait_state(broker, startd, after, "COMPLETED")
    finally:
        _kill_job_processes("/bin/sleep 61")
        assert startd.stop() == 0


def test_a_fork_that_fails_is_logged_and_the_job_returns_to_the_queue(
        root: Path, redis_url: str, pool_name: str, broker: Broker) -> None:
    startd = Startd(root, redis_url, pool_name, fail_fork=True)
    try:
        job_id = _submit(broker, "/bin/true")
        # A fork made ahead of any job may fail first; wait for the job's own line.
        wait_until(lambda: f"job {job_id} not started" in startd.log(), 60,
                   fail_if=startd.exited, what="the job's fork failure in the log")
        assert "fork failed" in startd.log()
        rejected = wait_until(
            lambda: [fields for _id, fields in broker.events("0-0", count=1000)
                     if fields.get("type") == "reject" and fields.get("job") == job_id],
            30, fail_if=startd.exited, what="the job handed back")
        assert rejected[0]["state"] == "IDLE"
        assert _state(broker, job_id) in ("IDLE", "RUNNING")  # offered again and again
    finally:
        assert startd.stop() == 0
    assert _state(broker, job_id) == "IDLE"


def _starter_of(zygote: psutil.Process, argument: str) -> psutil.Process | None:
    """The zygote's child running `/bin/sleep <argument>` (others are standing by)."""
    for starter in zygote.children():
        try:
            if any(job.cmdline()[-1:] == [argument] for job in starter.children()):
                return starter
        except psutil.Error:
            continue
    return None


def test_a_startd_stopped_with_a_starter_running_vacates_its_job(
        root: Path, redis_url: str, pool_name: str, broker: Broker) -> None:
    startd = Startd(root, redis_url, pool_name)
    try:
        job_id = _submit(broker, "/bin/sleep", "62")
        _wait_state(broker, startd, job_id, "RUNNING")
        zygote = wait_until(startd.zygote, 30, fail_if=startd.exited, what="the zygote")
        starter = wait_until(lambda: _starter_of(zygote, "62"), 30, what="the starter")
    finally:
        assert startd.stop() == 0
    assert _gone(starter)
    assert _state(broker, job_id) == "IDLE"  # vacated, its exit hook requeued it
    assert f"starter {starter.pid} exited with status 0" in startd.log()


def test_a_starter_is_gone_once_a_zombie_or_reaped_and_not_before():
    """`_gone` reads /proc/<pid>/stat with plain system calls: a live process is
    there, a zombie (its parent has not reaped it yet) and a reaped one are gone."""
    from fetchwork.startd.starters.zygoteclient import _gone

    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert not _gone(proc.pid, None)
        os.kill(proc.pid, signal.SIGKILL)
        wait_until(lambda: _gone(proc.pid, None), 10, what="the zombie to be seen as gone")
        assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        proc.kill()
        proc.wait()
    assert _gone(proc.pid, None)


def test_a_jobs_start_is_logged_once_its_starter_has_it(
        root: Path, redis_url: str, pool_name: str, broker: Broker) -> None:
    """The fetch's verdict and the claim's start are written after the job went to its
    starter (off the start's path), and still before the move to Busy."""
    trace = root / "trace"
    startd = Startd(root, redis_url, pool_name, trace=trace)
    try:
        job_id = _submit(broker, "/bin/true")
        _wait_state(broker, startd, job_id, "COMPLETED")
        # The job can end before the startd's thread writes the lines (a loaded
        # machine): wait for them, then look at their place.
        wait_until(lambda: "startd.told" in _hops(trace)
                   and "Claimed/Idle -> Claimed/Busy" in startd.log(), 30,
                   fail_if=startd.exited, what="the accept's lines and the move to Busy")
        hops = _hops(trace)
        assert "startd.sent" in hops, hops
        assert hops.index("startd.sent") < hops.index("startd.told"), hops
        log = startd.log()
        accepted = log.index(f"job {job_id} accepted")
        assert accepted < log.index(f"(claimed for job {job_id})") \
            < log.index("Claimed/Idle -> Claimed/Busy")
    finally:
        assert startd.stop() == 0

