"""Signals for a selector loop: handlers only queue the number; the loop acts on it.

`set_wakeup_fd` makes a signal wake the loop's `select` at once.
"""

from __future__ import annotations

import signal
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)


class SignalInbox:
    """Signals received and not yet handled, in order (install from the main thread)."""

    def __init__(self, wake_fd: int):
        self._wake_fd = wake_fd
        self._pending: list[int] = []
        self._previous: dict[int, Any] = {}
        self._previous_wake_fd: int | None = None

    def install(self) -> None:
        for signum in HANDLED:
            self._previous[signum] = signal.signal(signum, self._received)
        self._previous_wake_fd = signal.set_wakeup_fd(self._wake_fd, warn_on_full_buffer=False)

    def restore(self) -> None:
        if self._previous_wake_fd is not None:
            signal.set_wakeup_fd(self._previous_wake_fd)
            self._previous_wake_fd = None
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _received(self, signum: int, _frame: object) -> None:
        self._pending.append(signum)

    def take(self) -> list[int]:
        """The signals received since the last call, oldest first."""
        taken, self._pending = self._pending, []
        return taken
