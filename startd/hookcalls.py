"""The startd's in-process hook calls whose timeouts its loop delivers itself.

A `python:` fetch, reply or evict hook runs in a hook thread. Left to
itself, each call would also take a second hook thread that only waits for
its timeout, and so two thread switches more a call, twice a job (the fetch
and the reply). The loop already wakes at its timers: it keeps each call with
its deadline, wakes by the earliest, and settles them each round, so a call
past its timeout is reported timed out (and abandoned, as a thread cannot be
killed) exactly as the watching thread would report it.
"""

from __future__ import annotations

import time

from fetchwork.hooks.inprocess import Call


class HookCalls:
    """In-process hook calls under way, with the `time.monotonic()` each times out at."""

    def __init__(self) -> None:
        self._calls: list[tuple[float, Call]] = []

    def add(self, call: Call | None, timeout_s: float) -> None:
        """Watch `call` (None, a program hook's run, is watched in its own thread)."""
        if call is not None:
            self._calls.append((time.monotonic() + timeout_s, call))

    def settle(self) -> None:
        """Deliver the timeouts that are due; forget the calls whose outcome is in."""
        if self._calls:
            self._calls = [(deadline, call) for deadline, call in self._calls
                           if not call.settle(deadline)]

    def next_at(self) -> float | None:
        """The earliest deadline of a call still under way, or None."""
        return min((deadline for deadline, _call in self._calls), default=None)
