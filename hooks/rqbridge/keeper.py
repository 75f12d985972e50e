"""The heartbeats of a running rq job, kept from its starter (needs rq).

rq's worker, while its work horse runs, wakes every job monitoring interval
(30 s) to heartbeat the worker, the execution and the job
(`maintain_heartbeats`), so that the execution's entry in the started-job
registry does not expire; and it kills a horse still running 60 s past the
job's timeout (the horse's own death penalty should have ended it at the
timeout). The prepare hook starts one `Keeper` per job in the starter's
process (in-process hooks only: a program cannot outlive its call), and the
exit hook stops it; a job killed here is then recorded as rq records a horse
it killed.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from fetchwork.config.protocol import KILL
from fetchwork.errors import FetchworkError
from fetchwork.hooks import control
from fetchwork.hooks.rqbridge import slotworker
from fetchwork.hooks.rqbridge.needrq import Execution, Job
from fetchwork.hooks.workers import WORKERS

log = logging.getLogger(__name__)

# rq's worker kills a horse this long after the job's timeout (monitor_work_horse).
KILL_GRACE_S = 60.0

_lock = threading.Lock()
_keepers: dict[str, Keeper] = {}


class Keeper:
    """Heartbeats one job every `interval_s` until stopped; asks the starter to kill
    the job once it has run `walltime_s` + KILL_GRACE_S (None: never)."""

    def __init__(self, worker: slotworker.SlotWorker, job: Job, execution: Execution,
                 interval_s: float, walltime_s: float | None):
        self.worker = worker
        self.job = job
        self.execution = execution
        self.interval_s = max(0.1, interval_s)
        self.kill_after_s = None if walltime_s is None else walltime_s + KILL_GRACE_S
        self.started = time.monotonic()
        self.killed_for_timeout = False
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self._next_wait_s()):
            if self._overdue():
                self._kill()
            try:
                slotworker.heartbeat(self.worker, self.job, self.execution)
            except (redis.RedisError, FetchworkError) as exc:  # rq's Redis away: next time
                log.warning("rq job %s: heartbeat failed: %s", self.job.id, exc)

    def _next_wait_s(self) -> float:
        if self.kill_after_s is None or self.killed_for_timeout:
            return self.interval_s
        left_s = self.started + self.kill_after_s - time.monotonic()
        return max(0.0, min(self.interval_s, left_s))

    def _overdue(self) -> bool:
        return (self.kill_after_s is not None and not self.killed_for_timeout
                and time.monotonic() - self.started >= self.kill_after_s)

    def _kill(self) -> None:
        self.killed_for_timeout = True
        log.warning("rq job %s still runs %gs after its timeout; killing it, as rq's worker "
                    "kills its work horse", self.job.id, KILL_GRACE_S)
        try:
            control.request(KILL)
        except FetchworkError as exc:  # not in a starter: nothing to kill here
            log.warning("rq job %s cannot be killed here: %s", self.job.id, exc)

    def stop(self) -> None:
        self._stop_event.set()


def start(keeper: Keeper) -> None:
    """Run `keeper` in a hook thread, replacing any keeper of the same job."""
    with _lock:
        old = _keepers.pop(keeper.job.id, None)
        _keepers[keeper.job.id] = keeper
    if old is not None:
        old.stop()
    WORKERS.run(keeper.run, f"rq-heartbeat-{keeper.job.id}")


def stop(job_id: str) -> Keeper | None:
    """Stop the keeper of `job_id` (if this process runs one); it is returned."""
    with _lock:
        keeper = _keepers.pop(job_id, None)
    if keeper is not None:
        keeper.stop()
    return keeper
