"""Threads that run hooks, kept for the next hook instead of one new thread each.

Starting a thread makes the caller wait until the new thread runs, which in
a busy startd (other threads holding the GIL) took a quarter of its loop's
time at hundreds of hooks a second. A thread that finished its task waits
IDLE_S for another, then ends; when none is idle a new one starts, so a
hook that blocks (or an in-process call abandoned at its timeout) never
holds up another. No thread exists before the first task: a process that
forks (the starter zygote) never runs one.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# Seconds an idle thread waits for another task before it ends.
IDLE_S = 30.0

Task = Callable[[], None]


class Workers:
    """An elastic set of daemon threads running tasks."""

    def __init__(self, idle_s: float = IDLE_S):
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[tuple[Task, str]] = queue.SimpleQueue()
        self._idle = 0
        self._pid = os.getpid()

    def run(self, task: Task, name: str) -> None:
        """Run `task` in an idle thread, or in a new one (named `name`)."""
        with self._lock:
            self._forget_if_forked()
            if self._idle > 0:
                self._idle -= 1
                self._tasks.put((task, name))
                return
        self._start(task, name)

    def warm(self, count: int = 1) -> None:
        """Have `count` threads waiting for tasks (none is then started on their path)."""
        for _ in range(count - self.idle()):
            self._start(lambda: None, "hook-idle")

    def _start(self, task: Task, name: str) -> None:
        threading.Thread(target=self._serve, args=(task,), name=name, daemon=True).start()

    def _forget_if_forked(self) -> None:
        """With the lock held: in a forked child, the parent's threads are not here."""
        if self._pid != os.getpid():
            self._tasks, self._idle, self._pid = queue.SimpleQueue(), 0, os.getpid()

    def idle(self) -> int:
        """Threads waiting for a task."""
        with self._lock:
            self._forget_if_forked()
            return self._idle

    def _serve(self, task: Task) -> None:
        while True:
            try:
                task()
            except BaseException:  # noqa: BLE001 - a task's failure must not end the thread
                log.exception("a hook task failed")
            with self._lock:
                self._idle += 1
            try:
                task, name = self._tasks.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    try:  # counted idle and handed a task just as the wait ended
                        task, name = self._tasks.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return
            threading.current_thread().name = name


# The process's hook threads (the runner's and in-process calls').
WORKERS = Workers()
