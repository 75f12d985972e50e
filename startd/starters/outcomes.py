"""The startd reports the job outcomes its starters could not (starter/outcomes.py).

A kept outcome whose starter is gone (its exit hook kept failing, the
starter was killed, or this startd restarts after a crash) is given to the
exit hook of its keyword again, in the hook runner's threads, until the hook
succeeds; then the file goes. One whose job's lease (JobLeaseDuration, else
JOB_DEFAULT_LEASE_DURATION) has run out since it was written is given up:
the broker has requeued that job by then. Attempts of one file back off from
`_FIRST_RETRY_S` to STARTD_OUTCOME_RETRY_MAX seconds. The reference exit hook
is idempotent (a claim already settled answers "not ours", which is a
success), so a report that did arrive before a crash is harmless to repeat.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from fetchwork.config import ads, keywords
from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError
from fetchwork.hooks.runner import HookResult, resolve_hook, start_hook
from fetchwork.starter.jobspec import hook_env
from fetchwork.starter.outcomes import (
    Outcome,
    forget_outcome,
    outcome_dir,
    pending_outcomes,
    writer_alive,
)

log = logging.getLogger(__name__)

_FIRST_RETRY_S = 0.5


@dataclass
class _Attempts:
    next_at: float
    delay_s: float


def next_delay_s(delay_s: float, max_delay_s: float) -> float:
    """The wait after a failed attempt that followed a wait of `delay_s` (doubling, capped)."""
    return max(_FIRST_RETRY_S, min(delay_s * 2.0, max_delay_s))


class OutcomeReporter:
    """Reports left outcomes through the exit hook; `tick(now)` from the startd's loop."""

    def __init__(self, config: Config, execute_dir: str):
        self.config = config
        self.folder = outcome_dir(config)
        self.execute_dir = execute_dir
        self.max_delay_s = config.get_duration_s("STARTD_OUTCOME_RETRY_MAX")
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._attempts: dict[str, _Attempts] = {}
        self._scan_at = 0.0

    def tick(self, now: float) -> None:
        """Start a report for each left outcome that is due (monotonic `now`)."""
        if now < self._scan_at:
            return
        self._scan_at = now + _FIRST_RETRY_S
        for path, outcome in pending_outcomes(self.folder):
            with self._lock:
                attempts = self._attempts.get(path)
                if path in self._in_flight or (attempts and now < attempts.next_at):
                    continue
            if writer_alive(outcome):
                continue
            if time.time() - outcome.written_at > self._lease_s(outcome):
                log.warning("job %s (%s): giving up reporting %s, older than the job's lease",
                            outcome.job, outcome.how, path)
                forget_outcome(path)
                continue
            self._report(path, outcome, now)

    def _lease_s(self, outcome: Outcome) -> float:
        try:
            lease_s = ads.as_number(ads.evaluate_attr(
                ads.parse_ad(outcome.ad_text, source="kept outcome"), "JobLeaseDuration"))
        except FetchworkError:
            lease_s = None
        if lease_s is None or lease_s <= 0:
            return self.config.get_duration_s("JOB_DEFAULT_LEASE_DURATION")
        return float(lease_s)

    def _report(self, path: str, outcome: Outcome, now: float) -> None:
        spec = resolve_hook(self.config, outcome.keyword or None, keywords.JOB_EXIT)
        if spec is None:
            log.warning("job %s ended (%s) but keyword %s has no exit hook now; "
                        "forgetting %s", outcome.job, outcome.how, outcome.keyword, path)
            forget_outcome(path)
            return
        log.info("reporting job %s (%s), left by starter %s, through the exit hook",
                 outcome.job, outcome.how, outcome.writer_pid)
        with self._lock:
            self._in_flight.add(path)

        def done(result: HookResult) -> None:
            self._done(path, outcome, result, now)

        env = hook_env(os.environ, self.execute_dir, outcome.slot, self.execute_dir)
        start_hook(spec, outcome.ad_text, [outcome.how], env=env, cwd=self.execute_dir,
                   user=outcome.user, on_done=done)

    def _done(self, path: str, outcome: Outcome, result: HookResult, started: float) -> None:
        with self._lock:
            self._in_flight.discard(path)
            if result.ok:
                self._attempts.pop(path, None)
            else:
                last = self._attempts.get(path)
                delay_s = next_delay_s(last.delay_s if last else 0.0, self.max_delay_s)
                self._attempts[path] = _Attempts(started + result.duration_s + delay_s, delay_s)
        if result.ok:
            forget_outcome(path)
            log.info("job %s (%s) reported", outcome.job, outcome.how)
        else:
            log.warning("job %s (%s) not reported yet: %s", outcome.job, outcome.how,
                        result.outcome())
