"""A whole local pool in one place: embedded Redis, broker service, a startd.

`fetchwork up` runs one in the foreground and `fetchwork demo` runs one on
a temporary state directory. The pool writes `pool.conf` into its state
directory, so every later command (`fetchwork submit`, `q`, another
`fetchwork startd`) that uses the same state directory finds the pool and
its hooks with no configuration of its own.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from fetchwork.broker.connections.embedded import EmbeddedRedis, embedded_for
from fetchwork.broker.trust.signer import ensure_key_pair
from fetchwork.config.loader import DEFAULTS_FILE, POOL_FILE, Config
from fetchwork.errors import FetchworkError
from fetchwork.transfer.localdelivery import LocalDelivery

log = logging.getLogger(__name__)

# The packaged configuration that makes a state directory a pool.
POOL_TEMPLATE = Path(DEFAULTS_FILE).with_name("pool.conf")
UP_LOCK = "up.lock"


def _terminate_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


class PoolError(FetchworkError):
    """A part of the local pool failed to start or died."""


class Pool:
    """The processes of one local pool, started and stopped in order."""

    def __init__(self, config: Config, slots: int | None = None,
                 extra_env: Mapping[str, str] | None = None, log_path: Path | None = None):
        self.config = config
        self.slots = slots
        self.state_dir = Path(config.require("FETCHWORK_STATE_DIR"))
        self.extra_env = dict(extra_env or {})
        self.redis: EmbeddedRedis | None = None
        self.started_redis = False
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._lock_handle: TextIO | None = None
        # Where the parts' stderr goes; None: this process's stderr.
        self.log_path = log_path
        # Jobs' returned outputs written into their Iwd as they complete.
        self.delivery = LocalDelivery(config)
        self._delivery_thread: threading.Thread | None = None

    @property
    def delivery_thread(self) -> threading.Thread | None:
        """The thread that writes completed jobs' outputs (None until started)."""
        return self._delivery_thread

    # -- starting ---------------------------------------------------------

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        shutil.copyfile(POOL_TEMPLATE, self.state_dir / POOL_FILE)
        self._signing_keys()
        if not (self.config.get("FETCHWORK_BROKER") or "").strip():
            self.redis = embedded_for(self.config)
            self.started_redis = self.redis.start()
        try:
            self._spawn("broker", ["broker"])
            self._wait_for_leader()
            self._spawn("startd", ["startd"], self._startd_env())
            self._delivery_thread = threading.Thread(target=self.delivery.run,
                                                     name="output-delivery", daemon=True)
            self._delivery_thread.start()
        except BaseException:
            self.stop()
            raise

    def _wait_for_leader(self, timeout_s: float = 60.0) -> None:
        """Wait until the broker leads and has published what submissions read, so the
        pool's first job is admitted (and signed) like every later one."""
        from fetchwork.broker.connections.clients import connect
        from fetchwork.broker.store.keys import PoolKeys

        config = Config.load(environ=self._child_env())
        client = connect(config, start=False)
        summary = PoolKeys(config.require("FETCHWORK_POOL").strip()).filters
        deadline = time.monotonic() + timeout_s
        try:
            while not client.exists(summary):
                dead = self.dead_child()
                if dead:
                    raise PoolError(f"{dead} exited while the pool started")
                if time.monotonic() > deadline:
                    log.warning("the broker did not lead within %gs; starting the startd "
                                "anyway", timeout_s)
                    return
                time.sleep(0.05)
        finally:
            client.close()

    def _signing_keys(self) -> None:
        """The pool's job signing key pair, made on the first start and named in the state
        directory's pool.conf (a configuration of the admin's that sets the knobs wins),
        so the broker signs and the startd checks (docs/trust.md)."""
        keys = self.state_dir / "keys"
        with open(self.state_dir / POOL_FILE, "a", encoding="utf-8") as handle:
            handle.write("\n# Written by `fetchwork up`: the pool signs its jobs and its startd "
                         "checks them.\n"
                         f"JOB_SIGNING_KEY = {keys / 'job-signing.key'}\n"
                         f"JOB_SIGNING_PUBLIC_KEY = {keys / 'job-signing.pub'}\n")
        config = Config.load(environ=self._child_env())
        private = (config.get("JOB_SIGNING_KEY") or "").strip()
        public = (config.get("JOB_SIGNING_PUBLIC_KEY") or "").strip()
        if private and public:
            ensure_key_pair(Path(private), Path(public))

    def _lock(self) -> None:
        """One pool per state directory: a second `up` would duplicate slot names."""
        path = self.state_dir / UP_LOCK
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held while the pool runs
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise PoolError(f"a pool is already up on {self.state_dir} (pid {holder}); "
                            "use that one, or set FETCHWORK_STATE_DIR to another "
                            "directory") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock_handle = handle

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["FETCHWORK_STATE_DIR"] = str(self.state_dir)
        return env

    def _startd_env(self) -> dict[str, str]:
        env = self._child_env()
        if self.slots is not None:
            env["_FETCHWORK_NUM_SLOTS"] = str(self.slots)
        return env

    def _spawn(self, name: str, args: list[str], env: Mapping[str, str] | None = None) -> None:
        # -P: the current folder is not put on the child's sys.path, so a
        # `fetchwork/` folder there (a clone's root) cannot shadow the package.
        argv = [sys.executable, "-P", "-m", "fetchwork", *args]
        log.info("starting %s: %s", name, " ".join(argv))
        # Own process group: Ctrl-C reaches only `up`, which stops the parts in
        # order. If `up` itself dies, the kernel sends each part SIGTERM.
        output = None
        if self.log_path is not None:
            output = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps its own copy
        try:
            self.children[name] = subprocess.Popen(
                argv, env=dict(env or self._child_env()), stdin=subprocess.DEVNULL,
                stdout=output, stderr=output, process_group=0,
                preexec_fn=_terminate_with_parent)
        finally:
            if output is not None:
                output.close()

    @property
    def url(self) -> str:
        if self.redis is not None:
            return self.redis.url
        return (self.config.get("FETCHWORK_BROKER") or "").strip()

    # -- running ----------------------------------------------------------

    def dead_child(self) -> str | None:
        """The name of a child that exited, if any."""
        for name, child in self.children.items():
            if child.poll() is not None:
                return f"{name} (exit status {child.returncode})"
        return None

    def wait(self, stop_requested: Callable[[], bool]) -> str | None:
        """Block until `stop_requested()` or a child dies; the dead child's name."""
        while not stop_requested():
            dead = self.dead_child()
            if dead:
                return dead
            time.sleep(0.2)
        return None

    # -- stopping ---------------------------------------------------------

    def stop(self) -> None:
        """Startd first (its jobs vacate and requeue), then the broker, then Redis."""
        grace_s = self.config.get_duration_s("STARTD_SHUTDOWN_GRACE") + 10.0
        self.delivery.stopping.set()
        for name in ("startd", "broker"):
            child = self.children.get(name)
            if child is None or child.poll() is not None:
                continue
            log.info("stopping %s (pid %s)", name, child.pid)
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; killing it", name, grace_s)
                child.kill()
                child.wait()
        if self._delivery_thread is not None:
            self._delivery_thread.join(timeout=5)
        if self.redis is not None and self.started_redis:
            self.redis.stop()
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None
