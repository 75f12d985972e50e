"""Timestamps of a job's start and exit paths across the pool's processes, for the benches.

Off unless the environment names a file in FETCHWORK_LATENCY_TRACE when a
process starts (`bench/latency_trace.py` and `bench/cycle_trace.py` set it for
the pool they run); then
each `mark(hop)` appends one line, `<hop> <CLOCK_REALTIME ns> <pid>`, to that
file with a single O_APPEND write, so the lines of the startd, its starters
and the broker service interleave whole and their times compare across
processes. Marks carry no job id: the bench runs one job at a time and takes,
for each job, the first mark of each hop after its submission.

Off, a mark is one test of a module global: nothing is opened, written or
logged, and no configuration is read.
"""

from __future__ import annotations

import os
import time

ENV_VAR = "FETCHWORK_LATENCY_TRACE"

_fd: int | None = None
_path = os.environ.get(ENV_VAR) or None


def mark(hop: str) -> None:
    """Note that this process reached `hop` now (nothing when tracing is off)."""
    if _path is None:
        return
    global _fd
    stamp = time.time_ns()
    if _fd is None:
        _fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(_fd, f"{hop} {stamp} {os.getpid()}\n".encode())
    except OSError:
        pass  # a trace is evidence for a bench, never a reason for a job to fail

