"""The processes of a pool a test kills and restarts: its own redis-server, broker
replicas and startds, each restarted as a supervisor would.

`RedisProcess` runs redis-server as a child (not daemonized, so the test owns
its pid) on a unix socket with AOF on, and starts it again on the same socket
and AOF. `Daemon` runs `python -m fetchwork <command>` with one configuration
file, its output in a log file; `kill()` is SIGKILL, `start()` a restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fetchwork.broker.connections.embedded import find_server
from fetchwork.config.loader import environ_without_config
from tests.support.waiting import wait_until


class RedisProcess:
    """A redis-server child on `folder/redis.sock`, AOF in `folder`."""

    def __init__(self, folder: Path, appendfsync: str = "always"):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.socket = str(folder / "redis.sock")
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"unix://{self.socket}"

    def start(self) -> None:
        argv = [find_server(), "--port", "0", "--unixsocket", self.socket,
                "--unixsocketperm", "700", "--dir", str(self.folder), "--appendonly", "yes",
                "--appendfsync", self.appendfsync, "--save", ""]
        with open(self.folder / "redis.log", "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        wait_until(self.answers, 30, fail_if=self.died, what="redis-server answering")

    def answers(self) -> bool:
        try:
            with redis.Redis(unix_socket_path=self.socket, socket_timeout=2,
                             retry=Retry(NoBackoff(), 0)) as probe:
                return bool(probe.ping())
        except redis.RedisError:
            return False

    def died(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"redis-server exited {self.proc.returncode}"
        return None

    def kill(self) -> None:
        """SIGKILL: no shutdown, only what the AOF holds survives."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        Path(self.socket).unlink(missing_ok=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def pool_config(root: Path, redis_url: str, pool: str, extra: str = "") -> Path:
    """A configuration file for the daemons of one pool (small timing knobs)."""
    path = root / "fetchwork.conf"
    path.write_text(textwrap.dedent(f"""\
        FETCHWORK_STATE_DIR = {root / 'state'}
        LOG = {root / 'log'}
        EXECUTE = {root / 'execute'}
        FETCHWORK_BROKER = {redis_url}
        FETCHWORK_POOL = {pool}
        NUM_SLOTS = 1
        STARTD_JOB_HOOK_KEYWORD = FETCHWORK
        FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Busy", 300, 0)
        FETCH_WORK_MIN_INTERVAL = 0.2
        FETCHWORK_FETCH_LONG_POLL = 1
        FETCHWORK_RENEW_INTERVAL = 0.5
        POLLING_INTERVAL = 1
        MachineMaxVacateTime = 2
        STARTD_SHUTDOWN_GRACE = 20
        BROKER_REAPER_INTERVAL = 0.5
        STARTD_OUTCOME_RETRY_MAX = 1
    """) + extra)
    return path


class Daemon:
    """`fetchwork <command>` with configuration `config`, logging to `log`."""

    def __init__(self, config: Path, log: Path, *command: str, env: dict[str, str] | None = None):
        self.command = list(command)
        self.log = log
        self.env = environ_without_config()
        self.env.update(FETCHWORK_CONFIG=str(config))
        self.env.update(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log_offset = 0

    def start(self) -> None:
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "fetchwork", *self.command],
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.starts += 1

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"{' '.join(self.command)} exited {self.proc.returncode}: {self.text()[-3000:]}"
        return None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def text_of_this_run(self) -> str:
        """What the daemon logged since its latest start."""
        if not self.log.exists():
            return ""
        with open(self.log, "rb") as handle:
            handle.seek(self.log_offset)
            return handle.read().decode(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self, timeout_s: float = 60) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self.proc.returncode

    def descendants(self) -> list[psutil.Process]:
        if not self.running() or self.proc is None:
            return []
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []


def starters_of(daemon: Daemon) -> list[psutil.Process]:
    """The starters under a startd: the children of its starter zygote."""
    for proc in daemon.descendants():
        try:
            if "fetchwork.starter.zygote" in " ".join(proc.cmdline()):
                return proc.children()
        except psutil.Error:
            continue
    return []


def kill_leftovers(marker: str) -> None:
    """SIGKILL job processes whose command line holds `marker` (a test's own folder)."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.info["cmdline"] and marker in " ".join(proc.info["cmdline"]):
                os.kill(proc.pid, signal.SIGKILL)
        except (psutil.Error, ProcessLookupError):
            continue
