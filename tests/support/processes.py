"""Looking at processes a test started or left behind."""

from __future__ import annotations

import os
import signal
import subprocess

import psutil


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_now(pid: int) -> None:
    """SIGKILL `pid` if it is still there."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def terminate(proc: subprocess.Popen | None, timeout_s: float) -> int | None:
    """SIGTERM `proc` and wait for its exit status; past `timeout_s`, SIGKILL it and
    raise TimeoutExpired (a daemon that ignores SIGTERM is a failure of its own)."""
    if proc is None or proc.poll() is not None:
        return proc.returncode if proc else None
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
