"""The slot ads' `Mips`: a speed figure measured once when the startd starts, or the MIPS knob.

HTCondor runs a Dhrystone benchmark; here a short fixed loop (a few
milliseconds) is timed, best of a few runs, and scaled to millions of loop
steps per second. It only orders machines by speed (resource sorting); a
site that wants a figure of its own sets MIPS.
"""

from __future__ import annotations

import time

from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError

_STEPS = 20000
_RUNS = 3


def _loop(steps: int) -> int:
    total = 0
    for step in range(steps):
        total += step ^ (total & 0xFF)
    return total


def measure_mips(steps: int = _STEPS, runs: int = _RUNS) -> int:
    """Millions of loop steps per second, best of `runs` timed runs; at least 1."""
    best_s = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        _loop(steps)
        best_s = min(best_s, time.perf_counter() - started)
    return max(1, round(steps / max(best_s, 1e-9) / 1e6))


def mips_of(config: Config) -> int:
    """MIPS when set (a positive whole number), else measured now."""
    if not (config.get("MIPS") or "").strip():
        return measure_mips()
    value = config.get_int("MIPS")
    if value < 1:
        raise ConfigError(f"MIPS must be at least 1, not {value}")
    return value
