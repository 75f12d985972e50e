"""A glide-in's decisions: its lifetime, when to drain, when to give up idle, what fits.

Pure functions of their inputs and `now` (monotonic seconds for the
startd's loop, wall-clock seconds where a ClassAd's time() is compared).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fetchwork.errors import ConfigError

_WALLTIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")

NOCLAIM = "noclaim"
DRAIN = "drain"


def parse_walltime(text: str, source: str) -> float | None:
    """Seconds from "3600", "HH:MM:SS", "MM:SS", "D-HH[:MM[:SS]]" (Slurm's forms);
    None for "", "UNLIMITED", "NOT_SET" or "INVALID"."""
    text = text.strip()
    if text.upper() in ("", "UNLIMITED", "NOT_SET", "INVALID", "INFINITE"):
        return None
    try:
        return float(text)
    except ValueError:
        pass
    match = _WALLTIME_RE.match(text)
    if not match:
        raise ConfigError(f"{source} = {text!r} is not a time: use seconds, HH:MM:SS or "
                          "D-HH:MM:SS")
    days, first, second, third = match.groups()
    parts = [int(part) for part in (first, second, third) if part is not None]
    if days is None and len(parts) == 2:
        parts = [0, *parts]                 # MM:SS
    parts += [0] * (3 - len(parts))         # D-HH, D-HH:MM
    hours, minutes, seconds = parts
    return float(((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds)


def lifetime_s(given: str, knob: str, batch_end_at: str, now_wall: float) -> float | None:
    """The glide-in's lifetime: `given` (--lifetime), else the GLIDEIN_LIFETIME knob, else
    the batch job's end (SLURM_JOB_END_TIME, epoch seconds) less now; None: no end."""
    for text, source in ((given, "--lifetime"), (knob, "GLIDEIN_LIFETIME")):
        value = parse_walltime(text, source)
        if value is not None:
            return value
    if batch_end_at.strip().isdigit():
        return max(0.0, float(batch_end_at) - now_wall)
    return None


def check_drain(life_s: float | None, drain_s: float, lifetime_from: str) -> None:
    """ConfigError when a lifetime of `life_s` (set by `lifetime_from`) leaves no time to
    run a job before the drain, GLIDEIN_DRAIN_TIME = `drain_s` before its end: such a
    glide-in would drain at once and run nothing. Refused, not shortened: a drain window
    cut to fit would leave running jobs no time to vacate."""
    if life_s is None or life_s > drain_s:
        return
    raise ConfigError(f"{lifetime_from} = {life_s:g} s leaves no time to run jobs: a "
                      f"glide-in drains GLIDEIN_DRAIN_TIME = {drain_s:g} s before its end, "
                      f"so it would drain at once and run nothing; give {lifetime_from} more "
                      "than GLIDEIN_DRAIN_TIME, or lower GLIDEIN_DRAIN_TIME")


def lifetime_source(given: str, knob: str) -> str:
    """Which setting gave the lifetime (for messages), as lifetime_s chooses."""
    if given.strip():
        return "--lifetime"
    if knob.strip():
        return "GLIDEIN_LIFETIME"
    return "the batch job's end (SLURM_JOB_END_TIME)"


@dataclass(frozen=True)
class PilotPlan:
    """When a glide-in that started at `started_at` stops."""

    started_at: float
    lifetime_s: float | None
    drain_s: float
    noclaim_s: float | None

    @property
    def drain_at(self) -> float | None:
        """When running jobs are evicted back to the queue (None: never)."""
        if self.lifetime_s is None:
            return None
        return self.started_at + max(0.0, self.lifetime_s - self.drain_s)


def next_action(plan: PilotPlan, now: float, last_claim_at: float,
                fetching: bool = False) -> str | None:
    """DRAIN once the drain time has come, NOCLAIM after STARTD_NOCLAIM_SHUTDOWN seconds
    without any claim, else None. While a fetch is `fetching` (outstanding), NOCLAIM
    waits for its answer, which may be a claim: a fetch slow to answer (the first one,
    on a loaded machine) must not end a glide-in that was about to get work. An
    answer without work leaves the clock as it was, so back-to-back fetches do not
    keep an idle glide-in alive."""
    drain_at = plan.drain_at
    if drain_at is not None and now >= drain_at:
        return DRAIN
    if plan.noclaim_s is not None and now - last_claim_at >= plan.noclaim_s and not fetching:
        return NOCLAIM
    return None


def fits_expression(drain_at_wall: float | None) -> str:
    """A START clause: a job fits when its AllowedJobDuration (if any) ends before the drain."""
    if drain_at_wall is None:
        return "true"
    return ("(isUndefined(TARGET.AllowedJobDuration) || "
            f"TARGET.AllowedJobDuration <= {int(drain_at_wall)} - time())")


def summary(jobs_run: int, busy_s: float, alive_s: float, slots: int, why: str) -> str:
    """The one line a glide-in leaves in the batch system's log."""
    share = busy_s / (alive_s * slots) * 100 if alive_s > 0 and slots > 0 else 0.0
    return (f"fetchwork glidein: ran {jobs_run} job(s); slots busy {busy_s:.0f}s of "
            f"{alive_s:.0f}s x {slots} slot(s) ({share:.0f}%); stopped: {why}")
