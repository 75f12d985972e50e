"""Whole pools for the pool-level tests: `fetchwork up` as a child process, the
environment its commands share, and the `fetchwork` commands run against it.

`pool_env` is the environment of one pool: its state directory (and so its
embedded Redis), no configuration file, and small timing knobs. `Up` runs
`fetchwork up` in it; `fw`, `q_json` and `history_json` run the user's
commands. `pool_up` stands a pool up under a folder and takes it down again,
for the fixtures of tests that need nothing more special.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from fetchwork.config.loader import environ_without_config
from tests.support.waiting import wait_until


def pool_env(state: Path, **knobs: str) -> dict[str, str]:
    """This process's environment less its configuration, with the state directory
    `state`, no configuration file, small timing knobs, and `knobs` (as overrides)."""
    env = environ_without_config()
    env["FETCHWORK_STATE_DIR"] = str(state)
    env["FETCHWORK_CONFIG"] = os.devnull
    # Small timing knobs so nothing waits on production defaults.
    env.update({
        "_FETCHWORK_BROKER_REAPER_INTERVAL": "0.5",
        "_FETCHWORK_BROKER_LEADER_LEASE": "3",
        "_FETCHWORK_STARTER_INITIAL_UPDATE_INTERVAL": "1",
        "_FETCHWORK_STARTER_UPDATE_INTERVAL": "2",
        "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "1",
        "_FETCHWORK_STARTD_SHUTDOWN_GRACE": "10",
        "_FETCHWORK_MachineMaxVacateTime": "2",
        "_FETCHWORK_FETCHWORK_RENEW_INTERVAL": "0.5",
    })
    env.update({f"_FETCHWORK_{k}": v for k, v in knobs.items()})
    return env


def fw(env: dict[str, str], *args: str, check: bool = True, cwd: Path | None = None,
       timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`fetchwork <args>` in `env`; with `check`, a non-zero exit fails the test."""
    done = subprocess.run([sys.executable, "-m", "fetchwork", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"fetchwork {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def q_json(env: dict[str, str], *extra: str) -> list[dict[str, Any]]:
    """The queue, as `fetchwork q --json` prints it."""
    return json.loads(fw(env, "q", "--json", *extra).stdout)


def history_json(env: dict[str, str]) -> list[dict[str, Any]]:
    """The history, as `fetchwork history --json` prints it."""
    return json.loads(fw(env, "history", "--json").stdout)


class Up:
    """`fetchwork up` as a child process, stopped at the end of the test."""

    def __init__(self, env: dict[str, str], slots: int, log_path: Path,
                 command: Sequence[str] = (sys.executable, "-m", "fetchwork"),
                 cwd: Path | None = None):
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.log_path = log_path
        self.process = subprocess.Popen(
            [*command, "up", "--slots", str(slots)], env=env, cwd=cwd,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def died(self) -> str | None:
        if self.process.poll() is not None:
            return f"fetchwork up exited {self.process.returncode}: {self.log_path.read_text()}"
        return None

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill_all()
        if not self.log.closed:
            self.log.close()
        return self.process.returncode

    def kill_all(self) -> None:
        """SIGKILL every process of the pool: up, broker, startd, starters, jobs, redis."""
        victims = [psutil.Process(self.process.pid)]
        victims += victims[0].children(recursive=True)
        for proc in victims:
            try:
                proc.kill()
            except psutil.Error:
                pass
        self.process.wait(timeout=30)
        self.log.close()


@dataclass
class UpPool:
    """A pool `pool_up` stood up: its environment, its `fetchwork up`, its folder."""

    env: dict[str, str]
    up: Up
    root: Path

    def folder(self, name: str) -> Path:
        """A new folder `name` under the root that the jobs (nobody, under a root
        test run) may write to."""
        folder = self.root / name
        folder.mkdir()
        folder.chmod(0o777)
        return folder


@contextmanager
def pool_up(root: Path, slots: int, **knobs: str) -> Iterator[UpPool]:
    """`fetchwork up --slots <slots>` on the state directory `root/state` with `knobs`,
    logging to `root/up.log`, once `fetchwork status` shows every slot. On leaving,
    it must stop with exit status 0; its Redis is stopped in any case."""
    env = pool_env(root / "state", **knobs)
    up = Up(env, slots, root / "up.log")
    try:
        wait_until(lambda: fw(env, "status", check=False).stdout.count("slot") >= slots,
                   timeout_s=60, fail_if=up.died,
                   what=f"{slots} slot(s) reported by fetchwork status")
        yield UpPool(env, up, root)
        assert up.stop() == 0, up.log_path.read_text()
    finally:
        if up.process.poll() is None:
            up.kill_all()
        fw(env, "redis", "stop", check=False)
