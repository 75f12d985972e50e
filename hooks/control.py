"""Control requests to the running starter from inside its own process.

The words are the starter protocol's control words, which the startd writes
to a starter's stdin one per line. An in-process hook running in the starter
calls `request("remove")` (or hold, vacate, kill, suspend, continue) exactly
as the startd would write a control line. It lives with the hooks so that a
hook (the reference hooks among them) never imports the starter.
Thread-safe and safe in a signal handler: a request is one short write to a
pipe the starter's loop watches.
"""

from __future__ import annotations

import os

from fetchwork.config.protocol import CONTROL_WORDS
from fetchwork.errors import StarterError

_write_fd: int | None = None


def install(write_fd: int | None) -> None:
    """Route requests to `write_fd` (the starter's wake-up pipe); None to stop."""
    global _write_fd
    _write_fd = write_fd


def request(action: str) -> None:
    """Ask the starter of this process to `action` its job."""
    action = action.strip().lower()
    if action not in CONTROL_WORDS:
        raise StarterError(f"unknown starter request {action!r}; one of {', '.join(CONTROL_WORDS)}")
    fd = _write_fd
    if fd is None:
        raise StarterError("no starter is running in this process")
    try:
        os.write(fd, action.encode() + b"\n")
    except BlockingIOError:  # a full pipe already holds plenty of requests
        pass
