"""Where a big file's transfer spends its time: seconds by stage, logged once a file.

A file of several chunks goes through stages that run on several threads at once
(read, a chunk's digest, the file's digest, the pool's check of what it has, the
SET; at the other end the GET, the digests, the cache's write, the sandbox's
copy). `StageTimes` adds up, for each stage, the seconds spent in it on the
clock and on the thread's CPU (`time.thread_time`, so a stage that waits on
the socket or the disk shows it), and `summary()` says them in one line with
the file's own wall time: a stage whose busy seconds come near the wall time is
the one that bounds the transfer. The cost is two clock reads a stage a chunk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MB = 1 << 20


class StageTimes:
    """Busy and CPU seconds by stage for one file, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy_s: dict[str, float] = {}
        self._cpu_s: dict[str, float] = {}
        self._started = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Count the block's seconds (clock and this thread's CPU) to stage `name`."""
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - wall, time.thread_time() - cpu)

    def add(self, name: str, busy_s: float, cpu_s: float) -> None:
        with self._lock:
            self._busy_s[name] = self._busy_s.get(name, 0.0) + busy_s
            self._cpu_s[name] = self._cpu_s.get(name, 0.0) + cpu_s

    def seconds(self) -> dict[str, tuple[float, float]]:
        """Stage -> (busy seconds, CPU seconds), in the order the stages began."""
        with self._lock:
            return {name: (busy, self._cpu_s[name]) for name, busy in self._busy_s.items()}

    def summary(self, size: int) -> str:
        """One line: the wall time and rate since this object was made, then each stage's
        busy and CPU seconds."""
        wall_s = max(time.perf_counter() - self._started, 1e-9)
        stages = ", ".join(f"{name} {busy:.2f} s (CPU {cpu:.2f})"
                           for name, (busy, cpu) in self.seconds().items())
        return (f"{size / MB:.0f} MB in {wall_s:.2f} s, {size / MB / wall_s:.0f} MB/s; "
                f"by stage: {stages}")
