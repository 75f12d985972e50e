"""What the rq bridge's tests and benchmark stand up: rq's Redis, job functions,
an interpreter the jobs can run, and a startd configured with the bridge.

rq's Redis is a private `redis-server` 7 on a TCP port of 127.0.0.1 (the
jobs' processes connect to it, and under a root test run they run as nobody,
who may not open the session server's private socket). Each run (rq's own
worker, or a startd) uses a database of its own on it.

Under a root run the jobs run as nobody, who cannot enter the folder this
interpreter lives in (the test machine's Python is under /root): the jobs
then run on the system's `python3` of the same version, in a virtual
environment made here whose `.pth` adds this environment's site-packages
(RQ_PYTHON names it, as a site names its application's interpreter). redis-py
needs `async_timeout` on a Python older than 3.11.3, where asyncio already
has the same `timeout`: a one-line module stands in for it there.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.support.ports import HOST, reserve_port
from tests.support.processes import terminate
from tests.support.tlsredis import redis7_binary
from tests.support.waiting import wait_until

# The job functions the tests enqueue, written into the folder the startd (or
# `rq worker`) is started in, so both import them as `rqtestjobs.<name>`.
JOBS_MODULE = "rqtestjobs"
JOBS_SOURCE = '''\
"""Job functions for the rq bridge's tests: each records what it saw in rq's Redis."""
import os
import time

from rq import get_current_job


def add(a, b):
    return a + b


def boom(message):
    raise ValueError(message)


def sleepy(seconds):
    time.sleep(seconds)
    return seconds


def counted_failure(key):
    """Fails every time; counts its attempts in `key`."""
    get_current_job().connection.incr(key)
    raise RuntimeError("attempt failed")


def die():
    """Killed before rq can record anything, as by the out-of-memory killer."""
    import signal
    import sys
    print("about to be killed", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def where():
    """What the job's process was given: folder, import path, rq's variables."""
    return {"cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH", ""),
            "job": os.environ.get("RQ_JOB_ID"), "worker": os.environ.get("RQ_WORKER_ID")}


def on_success(job, connection, result, *args, **kwargs):
    connection.rpush("callbacks", "success:%s:%r" % (job.id, result))


def on_failure(job, connection, type, value, traceback):
    connection.rpush("callbacks", "failure:%s:%s" % (job.id, type.__name__))


def on_stopped(job, connection):
    connection.rpush("callbacks", "stopped:%s" % job.id)
'''


@contextmanager
def rq_redis(folder: Path) -> Iterator[int]:
    """A private redis-server 7 on a TCP port of 127.0.0.1; its port."""
    binary = redis7_binary()
    port = reserve_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no",
         "--dir", str(folder), "--databases", "16"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host=HOST, port=port)
    try:
        wait_until(lambda: _pings(client), 20, fail_if=lambda: proc.poll() is not None,
                   what="rq's redis-server to answer")
        yield port
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def url(port: int, db: int) -> str:
    return f"redis://{HOST}:{port}/{db}"


# A module found only on a folder named by RQ_PYTHONPATH (or `rq worker --path`).
EXTRA_MODULE = "rqextra"
EXTRA_SOURCE = '''\
def found_at():
    return __file__
'''


def write_jobs(folder: Path) -> None:
    """The job functions in `folder`, and the extra module in `folder`/extra."""
    (folder / f"{JOBS_MODULE}.py").write_text(JOBS_SOURCE)
    (folder / f"{JOBS_MODULE}.py").chmod(0o644)
    (folder / "extra").mkdir(exist_ok=True)
    (folder / "extra").chmod(0o755)
    (folder / "extra" / f"{EXTRA_MODULE}.py").write_text(EXTRA_SOURCE)
    (folder / "extra" / f"{EXTRA_MODULE}.py").chmod(0o644)


@dataclass(frozen=True)
class Runtime:
    """Who runs the bridge's startd (and so its jobs), and on which interpreter."""

    python: str
    user: tuple[int, int] | None  # (uid, gid) to run as; None: as the tests


def runtime(folder: Path) -> Runtime:
    """This interpreter as the tests' user; under root, nobody on an interpreter
    nobody can run (made in `folder`)."""
    if os.geteuid() != 0:
        return Runtime(sys.executable, None)
    nobody = pwd.getpwnam("nobody")
    return Runtime(_python_for_others(folder), (nobody.pw_uid, nobody.pw_gid))


def _python_for_others(folder: Path) -> str:
    """An interpreter of this version that other users can run, with this one's
    packages; skips the test when the system has none."""
    system = shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin")
    if system is None:
        pytest.skip("jobs run as nobody under root, and no system python3 is there for them")
    probe = subprocess.run([system, "-c", "import sys; print(*sys.version_info[:2])"],
                           capture_output=True, text=True, check=False)
    if probe.stdout.split() != [str(part) for part in sys.version_info[:2]]:
        pytest.skip(f"the system python3 ({probe.stdout.strip()}) is not Python "
                    f"{sys.version_info[0]}.{sys.version_info[1]}, which the jobs need")
    venv = folder / "job-venv"
    subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    purelib = Path(subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    ours = sysconfig.get_paths()["purelib"]
    (purelib / "fetchwork-tests.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    (purelib / "async_timeout.py").write_text("from asyncio import timeout  # noqa: F401\n")
    return str(venv / "bin" / "python")


def startd_config(root: Path, rq_url: str, queues: str, slots: int = 2,
                  extra: str = "") -> str:
    """A startd configuration whose slots use the rq bridge."""
    text = f"""
        FETCHWORK_STATE_DIR = {root / 'state'}
        LOG = {root / 'log'}
        EXECUTE = {root / 'execute'}
        STARTD_JOB_HOOK_KEYWORD = RQ
        RQ_URL = {rq_url}
        RQ_QUEUES = {queues}
        RQ_FETCH_LONG_POLL = 1
        NUM_SLOTS = {slots}
        FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Busy", 300, 0)
        FETCH_WORK_MIN_INTERVAL = 0.1
        STARTER_INITIAL_UPDATE_INTERVAL = 1
        STARTER_UPDATE_INTERVAL = 2
        MachineMaxVacateTime = 5
        STARTD_SHUTDOWN_GRACE = 20
        HOOK_TIMEOUT_FETCH_WORK = 20
    """
    return textwrap.dedent(text) + textwrap.dedent(extra)


class BridgeStartd:
    """A startd with the rq bridge, in `folder` (its working folder, holding the job
    functions, its state and its log), run as `runtime` says."""

    def __init__(self, folder: Path, runtime: Runtime):
        self.folder = folder
        self.runtime = runtime
        self.proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)
        write_jobs(folder)

    def write_config(self, text: str) -> None:
        (self.folder / "fetchwork.conf").write_text(text)

    def start(self, debug: bool = False) -> subprocess.Popen[bytes]:
        """Start it; with `debug`, its log has the debug lines (each hook run)."""
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(("FETCHWORK_", "_FETCHWORK_", "PYTHON"))}
        env.update(HOME=str(self.folder), PYTHONPATH=str(self.folder),
                   FETCHWORK_CONFIG=str(self.folder / "fetchwork.conf"))
        user = self.runtime.user
        if user is not None:
            for path in (self.folder, *self.folder.rglob("*")):
                os.chown(path, *user)
        with open(self.folder / "startd.err", "wb") as log:
            self.proc = subprocess.Popen(
                [self.runtime.python, "-m", "fetchwork", "-vv", "startd"] if debug
                else [self.runtime.python, "-m", "fetchwork.startd"], cwd=self.folder, env=env,
                stdout=subprocess.DEVNULL, stderr=log,
                user=user[0] if user else None, group=user[1] if user else None,
                extra_groups=[] if user else None)
        return self.proc

    def log_text(self) -> str:
        path = self.folder / "startd.err"
        return path.read_text(errors="replace") if path.exists() else ""

    def exited(self) -> str | None:
        """For wait_until's fail_if: the startd's exit and its last log lines."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"startd exited {self.proc.returncode}: {self.log_text()[-3000:]}"
        return None

    def wait_log(self, text: str, timeout_s: float = 30.0) -> str:
        return wait_until(lambda: text in self.log_text() and self.log_text(), timeout_s,
                          fail_if=self.exited, what=f"log line {text!r}")

    def stop(self, timeout_s: float = 60.0) -> int | None:
        return terminate(self.proc, timeout_s)


def rq_worker_argv(rq_url: str, queues: list[str], *options: str) -> list[str]:
    """`rq worker --burst` with `options` on `queues`."""
    return [str(Path(sys.executable).parent / "rq"), "worker", "--burst", *options,
            "--url", rq_url, *queues]


def rq_worker(root: Path, rq_url: str, queues: list[str], *options: str,
              timeout_s: float = 120.0) -> str:
    """rq's own worker in burst mode with `options`, started in `root`, to the end of
    the queues; its output."""
    done = subprocess.run(rq_worker_argv(rq_url, queues, *options),
                          cwd=root, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


@contextmanager
def fresh_root(prefix: str) -> Iterator[Path]:
    """A folder every user can enter (the startd runs as nobody under a root run),
    removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=f"fw-rq-{prefix}-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def status(connection: redis.Redis, job_id: str) -> str | None:
    """The job's status in rq; None when rq no longer has it."""
    from rq.exceptions import InvalidJobOperation
    from rq.job import Job

    try:
        return str(Job(id=job_id, connection=connection).get_status().value)
    except InvalidJobOperation:
        return None


def wait_jobs_done(connection: redis.Redis, job_ids: list[str], timeout_s: float,
                   fail_if: Callable[[], object] | None = None) -> None:
    """Until no job of `job_ids` is queued, started or scheduled any more."""
    wait_until(lambda: all(status(connection, job_id) not in ("queued", "started", "scheduled")
                           for job_id in job_ids),
               timeout_s, interval_s=0.1, fail_if=fail_if, what="the rq jobs to end")
