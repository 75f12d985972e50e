"""Control requests to the running starter from inside its own process.

The words are the starter protocol's control words, which the startd writes
to a starter's stdin one per line. An in-process hook running in the starter
calls `request("remove")` (or hold, vacate, kill, suspend, continue) exactly
as the startd would write a control line. It lives with the hooks so that a
hook (the reference hooks among them) never imports the starter.
Thread-safe and safe in a signal handler: a request is one short write to a
pipe the starter's loop watches.

A starter kept across jobs installs a new pipe for each job. Something a hook
left running past its job (a lease keeper whose exit hook failed) names the
run it was started in (`current()`), so its request never reaches a later job.
"""

from __future__ import annotations

import os

from fetchwork.config.protocol import CONTROL_WORDS
from fetchwork.errors import StarterError

_write_fd: int | None = None
_run = 0


def install(write_fd: int | None) -> None:
    """Route requests to `write_fd` (the starter's wake-up pipe); None to stop.
    Each call begins a new run (`current()`)."""
    global _write_fd, _run
    _write_fd = write_fd
    _run += 1


def current() -> int:
    """The number of the starter's present run: a request made with it reaches
    that run's job only."""
    return _run


def request(action: str, run: int | None = None) -> None:
    """Ask the starter of this process to `action` its job; with `run` (from
    `current()`), only while that run's job is the one the starter runs."""
    action = action.strip().lower()
    if action not in CONTROL_WORDS:
        raise StarterError(f"unknown starter request {action!r}; one of {', '.join(CONTROL_WORDS)}")
    if run is not None and run != _run:
        raise StarterError(f"the job the {action} request was for has ended here")
    fd = _write_fd
    if fd is None:
        raise StarterError("no starter is running in this process")
    try:
        os.write(fd, action.encode() + b"\n")
    except BlockingIOError:  # a full pipe already holds plenty of requests
        pass
