"""Withdrawing the slots as the startd exits: each slot's withdraw hook, waited for.

After its claims are gone (a clean shutdown, or `--once` done), the startd
runs `<KEYWORD>_HOOK_WITHDRAW_SLOT` with each slot's ad so whatever keeps
slot ads (the reference hooks: the broker's, shown by `fetchwork status`)
forgets them now instead of when they lapse. The hooks run in the runner's
threads; each one that ends wakes the daemon loop through its pipe. The
timeline is `shutdown.Withdrawal`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from fetchwork.config import ads
from fetchwork.hooks.runner import HookResult, start_hook
from fetchwork.startd.shutdown import Withdrawal

if TYPE_CHECKING:
    from fetchwork.startd.daemon import Startd

log = logging.getLogger(__name__)


class Withdrawer:
    """Starts the withdraw hooks once, and says when the startd may exit."""

    def __init__(self, startd: Startd, wake_fd: int):
        self._startd = startd
        self._wake_fd = wake_fd
        self._lock = threading.Lock()
        self._plan: Withdrawal | None = None

    def done(self, now: float) -> bool:
        """Start the hooks on the first call; True once they have all ended or timed out."""
        with self._lock:
            if self._plan is None:
                self._begin(now)
            assert self._plan is not None
            return self._plan.over(now)

    def wake_at(self) -> float:
        """When the loop must look again (the plan's last moment), or infinity."""
        with self._lock:
            return self._plan.until if self._plan is not None else math.inf

    def _begin(self, now: float) -> None:
        slots = [(slot, slot.hooks.withdraw) for slot in self._startd.slots
                 if slot.hooks.withdraw is not None]
        self._plan = Withdrawal.begin(now, [spec.timeout_s for _slot, spec in slots if spec])
        for slot, spec in slots:
            assert spec is not None
            start_hook(spec, ads.format_ad(self._startd.slot_ad(slot)),
                       on_done=self._ended(slot.label))

    def _ended(self, label: str) -> Callable[[HookResult], None]:
        def ended(result: HookResult) -> None:
            log.log(logging.INFO if result.ok else logging.WARNING,
                    "%s: withdraw hook took %.3fs: %s", label, result.duration_s,
                    result.outcome())
            with self._lock:
                if self._plan is not None:
                    self._plan.one_done()
            try:
                os.write(self._wake_fd, b"w")
            except OSError:
                pass  # the loop is awake already (pipe full) or closing
        return ended
