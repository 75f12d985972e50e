"""Fair share: each user's and project's share of the pool's recent CPU time.

Usage is CPUs x wall time of finished and running jobs within the last
FAIRSHARE_WINDOW, cut into FAIRSHARE_DEPTH intervals of equal length; the
newest interval weighs 1, each older one 1 / FAIRSHARE_DEPTH less, so the
oldest weighs 1 / FAIRSHARE_DEPTH (Maui's FSDEPTH and decay). A user's or
project's factor is its target percent (FAIRSHARE_TARGET_<NAME>) minus the
percent it used: positive while under its target, negative above it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from .settings import SchedulingSettings
from .snapshot import Usage


def decayed_seconds(start_s: float, end_s: float, now: float, window_s: float,
                    depth: int) -> float:
    """Wall seconds of [start_s, end_s], each weighted by the age of its interval."""
    interval_s = window_s / depth
    begin, end = max(start_s, now - window_s), min(end_s, now)
    if end <= begin:
        return 0.0
    total = 0.0
    first_age = min(depth - 1, int((now - end) // interval_s))
    for age in range(first_age, depth):
        high, low = now - age * interval_s, now - (age + 1) * interval_s
        if high <= begin:
            break
        overlap = min(end, high) - max(begin, low)
        if overlap > 0:
            total += overlap * (1.0 - age / depth)
    return total


class FairShare:
    """Decayed usage per user and project, and each one's fair-share factor."""

    def __init__(self, usage: Iterable[Usage], settings: SchedulingSettings, now: float):
        self.targets = settings.fairshare_targets
        self.used: defaultdict[str, float] = defaultdict(float)
        self.total = 0.0
        for record in usage:
            seconds = record.cpus * decayed_seconds(record.start_s, record.end_s, now,
                                                    settings.fairshare_window_s,
                                                    settings.fairshare_depth)
            if seconds <= 0:
                continue
            self.total += seconds
            self.used["user " + record.owner.lower()] += seconds
            if record.project is not None:
                self.used["project " + record.project.lower()] += seconds

    def used_percent(self, kind: str, name: str) -> float:
        """Percent of the pool's decayed CPU time used by user or project `name`."""
        if self.total <= 0:
            return 0.0
        return 100.0 * self.used.get(f"{kind} {name.lower()}", 0.0) / self.total

    def factor(self, owner: str, project: str | None) -> float:
        """Target minus used percent, summed over the user and the project that have targets."""
        value = 0.0
        for kind, name in (("user", owner), ("project", project)):
            if name is None:
                continue
            target = self.targets.get(name.lower())
            if target is not None:
                value += target - self.used_percent(kind, name)
        return value
