"""A program hook's whole family: every process it started, even one that left its group.

A program hook runs as the leader of its own session and process group. Its
children may leave the group (`setpgid`) and even the session (`setsid`), so
the group alone does not find them. As HTCondor tracks a process family by
an environment marker when the kernel offers nothing better, each hook run
gets a marker variable with a value of its own, which every descendant
inherits whatever group or session it moves to; a process is in the family
when it sits in the hook's session or carries the marker. When the hook ends,
`kill_family` SIGKILLs them all, looking again until none is left (a member
may fork while it is being killed). Processes of other users whose
environment cannot be read are found by their session only.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
from collections.abc import Mapping

import psutil

log = logging.getLogger(__name__)

MARKER_VAR = "_FETCHWORK_HOOK_FAMILY"
# Rounds of look-and-kill before giving up on a family that keeps forking.
_ROUNDS = 5
# Processes started this long before the hook (clock granularity) are still looked at.
_SLACK_S = 1.0


def marked_env(env: Mapping[str, str] | None) -> tuple[dict[str, str], str]:
    """The hook's environment (the runner's own when None) with a fresh family marker."""
    marker = secrets.token_hex(12)
    marked = dict(os.environ if env is None else env)
    marked[MARKER_VAR] = marker
    return marked, marker


def _in_family(proc: psutil.Process, leader: int, marker: str, started_at: float) -> bool:
    try:
        if os.getsid(proc.pid) == leader:
            return True
        if proc.create_time() < started_at - _SLACK_S:
            return False  # older than the hook: not its child
        return proc.environ().get(MARKER_VAR) == marker
    except (OSError, psutil.Error):
        return False  # gone, a zombie, or not ours to read


def members(leader: int, marker: str, started_at: float) -> list[psutil.Process]:
    """The live processes of the family of hook `leader` (itself excluded)."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid in (leader, me):
            continue
        if _in_family(proc, leader, marker, started_at):
            found.append(proc)
    return found


def kill_family(leader: int, marker: str, started_at: float) -> int:
    """SIGKILL every member of the family of hook `leader`; how many were killed."""
    killed: set[int] = set()
    for _round in range(_ROUNDS):
        found = [proc for proc in members(leader, marker, started_at) if _running(proc)]
        if not found:
            break
        for proc in found:
            try:
                proc.send_signal(signal.SIGKILL)  # psutil checks the pid was not reused
                killed.add(proc.pid)
            except psutil.Error:
                pass
    if killed:
        log.info("killed %d process(es) left behind by hook process %d", len(killed), leader)
    return len(killed)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
