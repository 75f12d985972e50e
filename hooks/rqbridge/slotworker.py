"""A slot as an rq worker: rq's own `Worker` code, called at the moments the
hook protocol gives (needs rq).

The fetch hook, in the startd, registers the slot's worker, dequeues as
`rq worker` does (`Queue.dequeue_any`: BLMOVE into the intermediate queue for
one queue, BLPOP for several) and prepares the execution as rq's worker does
before it forks its work horse (`prepare_execution`: the execution enters the
queue's started-job registry with a heartbeat TTL) and as the horse does
first (`prepare_job_execution`: status `started`), so from then on a startd
that dies leaves the job where `StartedJobRegistry.cleanup` finds it. The
starter's hooks find the worker again by its key, heartbeat it
(`maintain_heartbeats`), and record what the job process could not
(outcome.py) with rq's `handle_job_failure` and `_handle_stopped_job`; the
worker's death is registered when the job has left the slot.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, cast

import redis

from fetchwork.config.protocol import KILL, REMOVE
from fetchwork.hooks import control
from fetchwork.hooks.rqbridge.needrq import (
    DEFAULT_MAINTENANCE_TASK_INTERVAL,
    DequeueTimeout,
    Execution,
    InvalidJobOperation,
    Job,
    Queue,
    RQScheduler,
    TimerDeathPenalty,
    Worker,
    now,
    parse_payload,
)

log = logging.getLogger(__name__)

_ip_lock = threading.Lock()
_ip_address: dict[int, str] = {}
_maintained_at: dict[tuple[str, ...], float] = {}
_scheduled_at: dict[tuple[str, ...], float] = {}
# rq's scheduler looks for due jobs this often (RQScheduler's interval).
SCHEDULER_INTERVAL_S = 1.0


class SlotQueue(Queue):
    """rq's Queue, which can put a job the slot took back at its front."""

    def put_back(self, job: Job, pipeline: redis.client.Pipeline) -> None:
        """Enqueue `job` again at the front, as rq's own requeues do (no dependency
        check: it was dequeued, so its dependencies were met)."""
        self._enqueue_job(job, pipeline=pipeline, at_front=True)


class SlotWorker(Worker):
    """rq's Worker, as a slot of a startd: it leaves the title of the startd's
    process alone (rq's worker sets its own to what it is doing); in the starter,
    its work horse is the starter's job, which rq's commands stop through the
    starter (`stop-job`, `stop-execution`, `kill-horse`)."""

    queue_class = SlotQueue
    # rq's callbacks run under a death penalty; here they run in a hook's thread,
    # where rq's signal-based one cannot (rq's thread-based one can).
    death_penalty_class = TimerDeathPenalty
    horse_killed = False  # rq's kill-horse command killed the job (in the starter)
    control_run: int | None = None  # the starter's run of the job served (control.current)

    def procline(self, message: str) -> None:
        log.debug("worker %s: %s", self.name, message)

    def serve_commands(self) -> None:
        """In the starter: rq's commands to this worker act on the starter's job."""
        self._horse_pid = os.getpid()  # rq only asks whether there is one
        self.horse_killed = False
        self.control_run = control.current()

    def kill_horse(self, sig: object = None) -> None:
        """As rq's worker kills its horse at once: a job stopped on request (`stop-job`,
        `stop-execution`) leaves as removed; one killed (`kill-horse`) as killed."""
        if self._stopped_job_id:
            control.request(REMOVE, self.control_run)  # then KILL: SIGKILL now, still removed
        else:
            self.horse_killed = True
        control.request(KILL, self.control_run)
        log.info("worker %s: rq asked to %s the job", self.name,
                 "stop" if self._stopped_job_id else "kill")

    def handle_payload(self, message: dict[str, Any]) -> None:
        """An rq command; `shutdown` is not rq's to give here: the startd's policy
        decides when its slots stop, so it is logged and ignored."""
        if parse_payload(message).get("command") == "shutdown":
            log.warning("worker %s: rq's shutdown command ignored: the startd decides when "
                        "its slots stop (fetchwork startd's own signals stop it)", self.name)
            return
        super().handle_payload(message)

    def stop_job(self, job: Job, queue: Queue, execution: Execution) -> None:
        """What rq's worker does with a job stopped on request (`send_stop_job_command`):
        status `stopped`, the job's on_stopped callback, rq's message."""
        self._stopped_job_id = job.id
        job.ended_at = now()
        self._handle_stopped_job(job, queue, execution)


def _ip_of(connection: redis.Redis) -> str:
    """This process's address as rq's Redis sees it (what rq's worker records), once."""
    with _ip_lock:
        known = _ip_address.get(id(connection))
    if known is not None:
        return known
    try:
        address = str(connection.client_info()["addr"])
    except (redis.RedisError, KeyError):
        address = "unknown"
    with _ip_lock:
        _ip_address[id(connection)] = address
    return address


def new_worker(connection: redis.Redis, queues: Sequence[str], name: str) -> SlotWorker:
    """The slot's worker on `queues` (in priority order), not registered yet."""
    worker = SlotWorker(list(queues), name=name, connection=connection, prepare_for_work=False)
    worker.hostname = socket.gethostname()
    worker.pid = os.getpid()
    worker.ip_address = _ip_of(connection)
    return worker


def found_worker(connection: redis.Redis, name: str) -> SlotWorker:
    """The slot's worker `name` as registered, or registered again when its key is gone
    (it expired while the job ran without heartbeats, or the job never started)."""
    worker = SlotWorker.find_by_key(SlotWorker.redis_worker_namespace_prefix + name,
                                    connection=connection)
    if isinstance(worker, SlotWorker):
        return worker
    worker = new_worker(connection, [], name)
    worker.register_birth()
    return worker


def maintain(worker: SlotWorker, at: float | None = None) -> None:
    """rq's maintenance of the queues' registries, as each rq worker runs it every
    10 minutes (one worker at a time, under rq's lock): abandoned started jobs fail
    or retry (StartedJobRegistry.cleanup), stuck intermediate jobs fail, expired
    entries go. The worker is registered meanwhile: rq counts failures on it."""
    key = tuple(worker.queue_names())
    if not _due(_maintained_at, key, at, DEFAULT_MAINTENANCE_TASK_INTERVAL):
        return
    # A name of its own: the slot's own worker may be registered with a running job.
    maintainer = new_worker(worker.connection, key, f"{worker.name}.maintenance")
    register(maintainer)
    try:
        maintainer.clean_registries()
        maintainer.clean_group_registries()
    finally:
        maintainer.register_death()


def _due(last_at: dict[tuple[str, ...], float], key: tuple[str, ...], at: float | None,
         interval_s: float) -> bool:
    """Whether `interval_s` has passed since the last run for `key` (noted in `last_at`,
    at monotonic time `at`, now when None); if so, this run is noted."""
    at = time.monotonic() if at is None else at
    last = last_at.get(key)
    if last is not None and at - last < interval_s:
        return False
    last_at[key] = at
    return True


def enqueue_scheduled(worker: SlotWorker, at: float | None = None) -> None:
    """What `rq worker --with-scheduler` does, at most once a second per startd: under
    rq's scheduler lock of each queue, move the jobs now due (enqueue_at, enqueue_in,
    a Retry with an interval) from the scheduled-job registry into their queues."""
    key = tuple(worker.queue_names())
    if not _due(_scheduled_at, key, at, SCHEDULER_INTERVAL_S):
        return
    scheduler = RQScheduler(list(key), connection=worker.connection,
                            serializer=worker.serializer)
    scheduler.acquire_locks()
    if scheduler.acquired_locks:
        try:
            scheduler.enqueue_scheduled_jobs()
        finally:
            scheduler.release_locks()


def dequeue(worker: SlotWorker, block_s: int | None) -> tuple[Job, SlotQueue] | None:
    """The next job of the worker's queues, as rq's worker dequeues it; None when there
    is none within `block_s` seconds (None: do not wait)."""
    try:
        taken = SlotQueue.dequeue_any(worker.queues, block_s, connection=worker.connection,
                                      job_class=worker.job_class, serializer=worker.serializer,
                                      death_penalty_class=worker.death_penalty_class)
    except DequeueTimeout:
        return None
    # dequeue_any makes the queue of the class it is called on.
    return None if taken is None else (taken[0], cast(SlotQueue, taken[1]))


def register(worker: SlotWorker) -> None:
    """Register the worker's birth; under a name of its own when a live worker has its
    name (the slot's running job's, when a busy slot fetches for RANK, or one whose
    death was never registered)."""
    try:
        worker.register_birth()
    except ValueError:  # rq: "There exists an active worker named ... already"
        worker.name = f"{worker.name}-{uuid.uuid4().hex[:6]}"
        worker.register_birth()


def start(worker: SlotWorker, job: Job, queue: SlotQueue) -> Execution:
    """Register the worker and take the job as rq's worker and work horse do before
    the job's function is called: execution in the started-job registry, status
    `started`, the job off the intermediate queue. On any failure the job goes back
    to the front of its queue (it was dequeued: nothing else would give it back)."""
    execution: Execution | None = None
    try:
        register(worker)
        job.redis_server_version = worker.get_redis_server_version()
        execution = worker.prepare_execution(job)
        worker.prepare_job_execution(job, remove_from_intermediate_queue=len(worker.queues) == 1)
    except BaseException:
        log.exception("rq job %s could not be taken; putting it back", job.id)
        _give_back_quietly(worker, job, queue, execution)
        raise
    return execution


def _give_back_quietly(worker: SlotWorker, job: Job, queue: SlotQueue,
                       execution: Execution | None) -> None:
    try:
        if execution is not None:
            requeue(worker, job, queue, execution)
        else:
            with worker.connection.pipeline() as pipeline:
                pipeline.lrem(queue.intermediate_queue_key, 1, job.id)
                queue.put_back(job, pipeline)
                pipeline.execute()
        worker.register_death()
    except (redis.RedisError, ValueError) as exc:  # rq's Redis away: rq's cleanup has it
        log.warning("rq job %s could not be put back (%s); rq's own cleanup will find it",
                    job.id, exc)


def status_of(connection: redis.Redis, job_id: str) -> str | None:
    """The job's status in rq (`started`, `finished`, ...); None when rq has no such job."""
    try:
        return str(Job(id=job_id, connection=connection).get_status().value)
    except InvalidJobOperation:
        return None


def holds(connection: redis.Redis, job_id: str, execution_id: str) -> bool:
    """Whether the execution `execution_id` of the job is still alive in rq: the slot
    still has the job. It is gone once recorded, requeued, or cleaned up as abandoned
    (and the job may then run elsewhere, under another execution)."""
    key = Execution(id=execution_id, job_id=job_id, connection=connection).key
    return bool(connection.exists(key))


def execution_of(worker: SlotWorker, job: Job, execution_id: str) -> Execution:
    """The execution `execution_id` of `job` by `worker` (it may already be gone)."""
    execution = Execution(id=execution_id, job_id=job.id, connection=worker.connection,
                          worker_name=worker.name)
    execution._job = job  # as rq's own spawned work horse does: the job is known
    worker.executions[execution.id] = execution
    return execution


def heartbeat(worker: SlotWorker, job: Job, execution: Execution) -> None:
    """What rq's worker does every job monitoring interval while its horse works."""
    worker.maintain_heartbeats(job, execution)


def requeue(worker: SlotWorker, job: Job, queue: SlotQueue, execution: Execution) -> None:
    """Put a job the slot took but did not finish back at the front of its queue."""
    with worker.connection.pipeline() as pipeline:
        worker.cleanup_execution(job, pipeline=pipeline, execution=execution)
        pipeline.lrem(queue.intermediate_queue_key, 1, job.id)
        job.started_at = None
        job.ended_at = None
        queue.put_back(job, pipeline)
        pipeline.execute()


def fail(worker: SlotWorker, job: Job, queue: Queue, execution: Execution, reason: str,
         wait_status: int | None = None) -> None:
    """What rq's worker does when its work horse died without recording the job's outcome."""
    job.ended_at = now()
    if wait_status is not None:
        worker.handle_work_horse_killed(job, None, wait_status, None)
    worker.handle_job_failure(job, queue=queue, exc_string=reason, execution=execution)


def retire(worker: SlotWorker) -> None:
    """The job has left the slot: the worker's death is registered (`rq info` drops it)."""
    worker.register_death()
