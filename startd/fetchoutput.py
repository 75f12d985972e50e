"""What a fetch hook's output means: no work, a job ad, or bad output (pure)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fetchwork.config import ads
from fetchwork.config.keptad import KeptAd
from fetchwork.errors import AdError
from fetchwork.hooks.runner import HookResult
from fetchwork.startd.slots.jobads import JOB_ADS, JobAds


@dataclass(frozen=True)
class Fetched:
    """What one fetch produced: nothing, a job ad, or output that must be rejected."""

    job_ad: KeptAd | None = None
    bad_reason: str | None = None

    @property
    def found_work(self) -> bool:
        return self.job_ad is not None and self.bad_reason is None

    @property
    def empty(self) -> bool:
        return self.job_ad is None and self.bad_reason is None


def read_fetch_output(stdout: str, *, failure: str | None = None,
                      output_too_large: bool = False, job_ads: JobAds = JOB_ADS) -> Fetched:
    """Interpret a fetch hook's stdout. Its exit status is ignored, as the text says.

    `failure` says why the hook did not run to its end (refused, timed out,
    crashed in-process): no work, unless it printed something, which is then
    bad output. The job's ad is one of `job_ads`, reused (no ClassAd is made
    per job): the values an in-process hook handed over, or the text's.
    """
    if output_too_large:
        return Fetched(bad_reason="output over the hook output limit")
    if not stdout.strip():
        return Fetched()
    if failure is not None:
        return Fetched(bad_reason=f"hook did not finish ({failure})")
    try:
        job_ad = job_ads.take(ads.parse_taken(stdout, "fetch hook output"))
    except AdError as exc:
        return Fetched(bad_reason=f"not a ClassAd: {exc}")
    if "Cmd" not in job_ad:
        return Fetched(job_ad=job_ad, bad_reason="the job ad has no Cmd")
    return Fetched(job_ad=job_ad)


def describe(result: HookResult) -> str:
    """How a fetch hook ended, for a log line; with the first line of its stderr when any."""
    first = next((line.strip() for line in result.stderr.splitlines() if line.strip()), "")
    return f"{result.outcome()}; stderr: {first[:500]}" if first else result.outcome()


def failed(result: HookResult, fetched: Fetched) -> bool:
    """Worth a warning: the hook did not end well, or printed something that is not a job."""
    return not result.ok or fetched.bad_reason is not None


def log_level(result: HookResult, fetched: Fetched) -> int:
    return logging.WARNING if failed(result, fetched) else logging.INFO


def note(result: HookResult, fetched: Fetched) -> str:
    """What to add to the log line of a fetched job: how the hook ended, when that went wrong."""
    return f"; hook {describe(result)}" if failed(result, fetched) else ""
