"""Looking at processes a test started or left behind."""

from __future__ import annotations

import os
import signal

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
