"""Waiting on conditions with a deadline, never on the clock alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold before its deadline."""


def wait_until(
    condition: Callable[[], T],
    timeout_s: float = 30.0,
    interval_s: float = 0.02,
    fail_if: Callable[[], object] | None = None,
    what: str | None = None,
) -> T:
    """Poll `condition` until it returns something truthy; return that.

    Raises WaitTimeout after `timeout_s`, reporting the last value seen, or
    at once when `fail_if()` becomes truthy (e.g. a daemon exited).
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        last = condition()
        if last:
            return last  # type: ignore[return-value]
        if fail_if is not None:
            failure = fail_if()
            if failure:
                # What failed (a daemon's exit) may have come just after the
                # condition was met: look once more before giving up.
                last = condition()
                if last:
                    return last  # type: ignore[return-value]
                raise WaitTimeout(f"gave up waiting for {what or condition!r}: {failure!r}; "
                                  f"last seen {last!r}")
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"waited {timeout_s}s for {what or condition!r}; last seen {last!r}")
        time.sleep(interval_s)


def retrying(call: Callable[[], T], errors: tuple[type[BaseException], ...],
             timeout_s: float = 30.0, interval_s: float = 0.1) -> T:
    """`call()`, again every `interval_s` while it raises one of `errors` (a server
    restarting, failing over), for at most `timeout_s`; then the last error."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except errors:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval_s)
