"""TCP ports for the servers tests start, safe when several test processes run at once.

A port is asked of the kernel for a moment (`bind` to port 0) and released
before the server binds it, so two test processes (the workers of one run,
or two runs on one machine) could be handed the same port, and an outgoing
connection could take it meanwhile. `reserve_port` closes both gaps: it
picks ports below the kernel's ephemeral range, which outgoing connections
never take, and holds an exclusive lock on a file named after the port in a
folder all test processes of the machine share; a port whose lock another
process holds is skipped. A process keeps its locks until it exits (the
kernel drops them then, even after a SIGKILL), so a server may stop and
start again on its port.
"""

from __future__ import annotations

import fcntl
import functools
import os
import random
import socket
import tempfile
from collections.abc import Iterable
from pathlib import Path

HOST = "127.0.0.1"
# Ports below this are left to the machine's own services.
LOWEST = 10000
HIGHEST = 65535
LOCK_FOLDER = Path(tempfile.gettempdir()) / "fetchwork-test-ports"

# The lock files this process holds open, by port.
_held: dict[int, int] = {}


class NoFreePort(Exception):
    """No port (with its companions) was free to reserve."""


def ephemeral_range(text: str | None = None) -> tuple[int, int]:
    """The kernel's ephemeral port range (`text`: the content of
    /proc/sys/net/ipv4/ip_local_port_range; read when None)."""
    if text is None:
        try:
            text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        except OSError:
            text = "32768 60999"  # Linux's default
    low, high = (int(word) for word in text.split()[:2])
    return low, high


@functools.cache
def candidates(offsets: tuple[int, ...], ephemeral: tuple[int, int]) -> list[int]:
    """Every port p in [LOWEST, HIGHEST] such that p and each p + offset lie outside
    `ephemeral`; when there is none, every p whose companions stay within HIGHEST."""
    top = HIGHEST - max(offsets, default=0)
    low, high = ephemeral
    outside = [port for port in range(LOWEST, top + 1)
               if all(not low <= port + offset <= high for offset in (0, *offsets))]
    return outside or list(range(LOWEST, top + 1))


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _lock(port: int) -> bool:
    """Take the machine-wide lock of `port` (True), or learn another process holds it."""
    if port in _held:
        return False
    if not LOCK_FOLDER.is_dir():
        LOCK_FOLDER.mkdir(exist_ok=True)
        try:
            LOCK_FOLDER.chmod(0o1777)  # every user's test runs share it
        except OSError:
            pass
    try:
        fd = os.open(LOCK_FOLDER / f"{port}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held[port] = fd
    return True


def _unlock(port: int) -> None:
    os.close(_held.pop(port))


def reserve_port(also: tuple[int, ...] = (), among: Iterable[int] | None = None) -> int:
    """A port p free to bind on 127.0.0.1, locked for this process, with p + each of
    `also` (a Cluster node's bus port, p + 10000) free and locked too. `among` are
    the ports to try, in order (default: those outside the ephemeral range, shuffled)."""
    if among is None:
        pool = candidates(also, ephemeral_range())
        among = random.sample(pool, min(len(pool), 500))
    for port in among:
        group = [port + offset for offset in (0, *also)]
        taken: list[int] = []
        for member in group:
            if not _lock(member):
                break
            taken.append(member)
        if len(taken) == len(group) and all(_bindable(member) for member in group):
            return port
        for member in taken:
            _unlock(member)
    raise NoFreePort(f"no free port{' group' if also else ''} to reserve on {HOST}")


def held() -> list[int]:
    """The ports this process holds, lowest first."""
    return sorted(_held)
