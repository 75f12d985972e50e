"""Non-blocking pipes and pidfds, shared by the hook runner and the startd's starters."""

from __future__ import annotations

import os

# Largest read from a pipe in one call.
CHUNK_BYTES = 65536


def read_available(fd: int, size: int = CHUNK_BYTES) -> bytes | None:
    """Read a non-blocking fd once: the bytes read, b"" at EOF, or None when it would block.

    A read error counts as EOF: the other end is gone either way.
    """
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def drain(fd: int) -> None:
    """Read and drop whatever a non-blocking fd holds now (a wake-up pipe)."""
    while read_available(fd):
        pass


def open_pidfd(pid: int) -> int | None:
    """A pidfd for `pid` (readable once it exits), or None where the OS has none."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:
        return None
