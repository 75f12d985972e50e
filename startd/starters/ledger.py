"""How many jobs this startd's starters ran, and the slot time they took.

Counted where it happens rather than sampled: a job counts once, when its
starter says it started, and its slot time runs from then until its starter
is reaped or abandoned. A short job that starts, ends and is reaped between
two rounds of the loop counts as any other. The glide-in's summary line reads
it (glidein/glidein.py).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class RunLedger:
    """Jobs started, and seconds of slot time: of the ended jobs, and of those running
    (by slot, from their start on the monotonic clock)."""

    jobs_run: int = 0
    ended_s: float = 0.0
    running: dict[Hashable, float] = field(default_factory=dict)

    def started(self, slot_id: Hashable, now: float) -> None:
        """A slot's job started (a second start on the slot ends the first)."""
        self.ended(slot_id, now)
        self.jobs_run += 1
        self.running[slot_id] = now

    def ended(self, slot_id: Hashable, now: float) -> None:
        """The slot's starter is gone; nothing when no job of it had started."""
        since = self.running.pop(slot_id, None)
        if since is not None:
            self.ended_s += max(now - since, 0.0)

    def busy_s(self, now: float) -> float:
        """Slot seconds of every job counted, the running ones until `now`."""
        return self.ended_s + sum(max(now - since, 0.0) for since in self.running.values())
