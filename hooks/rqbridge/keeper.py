"""What rq's worker does while its work horse runs, done from the job's starter (needs rq).

rq's worker, while its horse works, heartbeats the worker, the execution and
the job every job monitoring interval (30 s; `maintain_heartbeats`), so the
execution's entry in the started-job registry does not expire; kills a horse
still running 60 s past the job's timeout (the horse's own death penalty
should have ended it at the timeout); and listens on its pubsub channel for
rq's commands (`rq.command.send_stop_job_command`, ...). The prepare hook
starts one `Keeper` per job in the starter's process (in-process hooks only:
a program cannot outlive its call), which listens before the job starts and
takes the commands the startd heard since the job's fetch (listener.py); the
exit hook stops it. A job killed here is then recorded as rq records a horse
its worker killed.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

from fetchwork.config.protocol import KILL
from fetchwork.errors import FetchworkError
from fetchwork.hooks import control
from fetchwork.hooks.rqbridge import listener, slotworker
from fetchwork.hooks.rqbridge.needrq import PUBSUB_CHANNEL_TEMPLATE, Execution, Job
from fetchwork.hooks.workers import WORKERS

log = logging.getLogger(__name__)

# rq's worker kills a horse this long after the job's timeout (monitor_work_horse).
KILL_GRACE_S = 60.0
# Longest wait for a command before the keeper looks at its clock and its stop flag.
COMMAND_POLL_S = 0.5
# Longest wait for Redis to confirm the keeper's subscription before the job starts.
SUBSCRIBE_S = 5.0

_lock = threading.Lock()
_keepers: dict[str, Keeper] = {}


class Keeper:
    """Heartbeats one job every `interval_s` and serves rq's commands to its worker
    until stopped; asks the starter to kill the job once it has run `walltime_s` +
    KILL_GRACE_S (None: never)."""

    def __init__(self, worker: slotworker.SlotWorker, job: Job, execution: Execution,
                 interval_s: float, walltime_s: float | None):
        self.worker = worker
        self.job = job
        self.execution = execution
        self.interval_s = max(0.1, interval_s)
        self.kill_after_s = None if walltime_s is None else walltime_s + KILL_GRACE_S
        # The starter's run of this job: a keeper left past its job stops no later one.
        self.control_run = control.current()
        self.started = time.monotonic()
        self.killed_for_timeout = False
        self._stop_event = threading.Event()
        self._pubsub: Any = None
        self._early: list[dict[str, Any]] = []
        worker.serve_commands()

    @property
    def killed(self) -> bool:
        """The job was killed as rq's worker kills a horse (its timeout, `kill-horse`)."""
        return self.killed_for_timeout or self.worker.horse_killed

    def listen(self) -> None:
        """Subscribe to the worker's channel (confirmed by Redis), then take what the
        startd heard for this job before (listener.py): from here on no command to
        the job's worker is lost. Called before the job starts."""
        self._pubsub = self._listen()
        self._early = listener.kept_for(self.worker.connection, self.worker.name, self.job.id)

    def run(self) -> None:
        pubsub = self._pubsub
        for message in self._early:
            self._handle(message)
        next_beat = time.monotonic() + self.interval_s
        try:
            while not self._stop_event.is_set():
                now = time.monotonic()
                if self._overdue(now):
                    self._kill()
                if now >= next_beat:
                    next_beat = now + self.interval_s
                    self._heartbeat()
                wait_s = max(0.0, min(next_beat, self._kill_at()) - now)
                pubsub = self._serve(pubsub, min(wait_s, COMMAND_POLL_S))
        finally:
            if pubsub is not None:
                pubsub.close()

    def _listen(self) -> Any:
        """A subscription to the worker's command channel, or None when Redis refuses."""
        try:
            pubsub = self.worker.connection.pubsub()
            pubsub.subscribe(PUBSUB_CHANNEL_TEMPLATE % self.worker.name)
            deadline = time.monotonic() + SUBSCRIBE_S
            while (left := deadline - time.monotonic()) > 0:
                message = pubsub.get_message(timeout=left)
                if message is not None and message.get("type") == "subscribe":
                    return pubsub
            log.warning("rq job %s: Redis did not confirm the subscription to rq's commands "
                        "within %.0f s; listening all the same", self.job.id, SUBSCRIBE_S)
            return pubsub
        except redis.RedisError as exc:
            log.warning("rq job %s: not listening for rq's commands: %s", self.job.id, exc)
            return None

    def _serve(self, pubsub: Any, wait_s: float) -> Any:
        """Wait up to `wait_s` for a command (or the stop flag) and act on it."""
        if pubsub is None:
            self._stop_event.wait(wait_s)
            return None
        try:
            message = pubsub.get_message(timeout=wait_s)
        except redis.RedisError as exc:
            log.warning("rq job %s: rq's commands no longer heard: %s", self.job.id, exc)
            pubsub.close()
            return None
        if message is not None and message.get("type") == "message":
            self._handle(message)
        return pubsub

    def _handle(self, message: dict[str, Any]) -> None:
        if listener.is_sync(message):
            return
        try:
            self.worker.handle_payload(message)
        except Exception:  # a bad command must not stop the heartbeats
            log.exception("rq job %s: an rq command failed", self.job.id)

    def _heartbeat(self) -> None:
        try:
            slotworker.heartbeat(self.worker, self.job, self.execution)
        except (redis.RedisError, FetchworkError) as exc:  # rq's Redis away: next time
            log.warning("rq job %s: heartbeat failed: %s", self.job.id, exc)

    def _kill_at(self) -> float:
        if self.kill_after_s is None or self.killed_for_timeout:
            return float("inf")
        return self.started + self.kill_after_s

    def _overdue(self, now: float) -> bool:
        return now >= self._kill_at()

    def _kill(self) -> None:
        self.killed_for_timeout = True
        log.warning("rq job %s still runs %gs after its timeout; killing it, as rq's worker "
                    "kills its work horse", self.job.id, KILL_GRACE_S)
        try:
            control.request(KILL, self.control_run)
        except FetchworkError as exc:  # not in a starter: nothing to kill here
            log.warning("rq job %s cannot be killed here: %s", self.job.id, exc)

    def stop(self) -> None:
        self._stop_event.set()


def start(keeper: Keeper) -> None:
    """Run `keeper` in a hook thread, replacing any keeper of the same job; it listens
    for rq's commands before this returns."""
    keeper.listen()
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
