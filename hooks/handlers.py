"""Setting a signal's handler for a moment, at the cost of the system call alone.

`signal.signal` wraps what it returns in the `Signals`/`Handlers` enums, and
for a Python function that means a failed enum lookup, an exception raised and
caught, on every call: a few microseconds each, where the system call takes a
fraction of one. The starter sets and restores its handlers around every job
and every in-process hook call, a dozen times a job, so it goes through here.
What `swap` returns is what it takes back: a handler, or `SIG_DFL`/`SIG_IGN`
as plain numbers, which `signal.signal` and `swap` both accept.
"""

from __future__ import annotations

import _signal
from collections.abc import Callable
from typing import Any

Handler = Callable[[int, Any], Any] | int | None


def swap(number: int, handler: Handler) -> Handler:
    """Set `handler` for signal `number`; the handler it replaces."""
    return _signal.signal(int(number), handler)  # type: ignore[no-any-return]


def current(number: int) -> Handler:
    """The handler set for signal `number` (`SIG_DFL` and `SIG_IGN` as plain numbers)."""
    return _signal.getsignal(int(number))  # type: ignore[no-any-return]
