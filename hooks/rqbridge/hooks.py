"""The rq bridge's hooks (keyword RQ): slots that work the queues of an rq deployment.

Each hook is `hook(args, stdin_text)` with the protocol's text in and out,
called in-process (`python:fetchwork.hooks.rqbridge.hooks:<name>`), or as a
program (`python -m fetchwork.hooks.rqbridge <NAME>`, __main__.py). The
prepare hook's keeper (heartbeats, rq's commands, the kill 60 s past the
timeout) lives in the starter's process, so only the in-process form has it;
programs heartbeat at each update hook only:

- fetch_work (startd): dequeues the next job of RQ_QUEUES as an rq worker
  does, under an rq worker named after the slot, and prints a job ad whose
  process performs it (settings.py, horse.py); nothing when the queues are
  empty (an idle slot blocks up to RQ_FETCH_LONG_POLL seconds first).
- reply_fetch (startd): a rejected job goes back to the front of its queue.
- evict_claim (startd): a claim evicted before its job started gives the job
  back to the front of its queue; otherwise advisory.
- prepare_job (starter): refuses a job rq no longer has as started (removed,
  cancelled, requeued meanwhile); starts its heartbeats (keeper.py); sends
  the job process's standard error to a file of the sandbox.
- update_job_info (starter): a heartbeat, as rq's worker sends while its
  horse works.
- job_exit (starter): records what the job process could not (outcome.py)
  and registers the slot's worker's death.

The starter's and reply hooks act only while the slot's own execution of the
job is alive in rq: once it is gone (recorded, given back, or cleaned up as
abandoned, after which the job may run elsewhere) they leave the job alone.
Every hook refuses to run as root (rq_redis).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import classad2
import redis

from fetchwork.config import ads
from fetchwork.config.loader import get_config
from fetchwork.config.protocol import ACCEPT, EXIT, EXIT_HOWS, REJECT
from fetchwork.errors import FetchworkError
from fetchwork.hooks import slotadtext
from fetchwork.hooks.inprocess import current_call
from fetchwork.hooks.rqbridge import keeper, listener, outcome, redisconn, settings, slotworker
from fetchwork.hooks.rqbridge.needrq import (
    DEFAULT_JOB_MONITORING_INTERVAL,
    Job,
    NoSuchJobError,
)

log = logging.getLogger(__name__)

# The program form (__main__.py) turns this off: a program cannot outlive its call.
_mode = {"in_process": True}


def set_program_mode() -> None:
    _mode["in_process"] = False


# How many bytes of the job process's standard error a failure's log line shows.
ERR_TAIL_BYTES = 2000


class RqHookError(FetchworkError):
    """An rq bridge hook was given a job ad it cannot use."""


@dataclass(frozen=True)
class RqIds:
    """The rq names a job ad of the bridge carries."""

    job_id: str
    queue: str
    worker: str
    execution_id: str


def _ids(job_ad: classad2.ClassAd) -> RqIds:
    values = []
    for name in (settings.JOB_ID_ATTR, settings.QUEUE_ATTR, settings.WORKER_ATTR,
                 settings.EXECUTION_ATTR):
        value = job_ad.get(name)
        if not isinstance(value, str) or not value:
            raise RqHookError(f"the job ad has no {name}: it was not fetched by the rq bridge")
        values.append(value)
    return RqIds(*values)


@dataclass
class Taken:
    """A job of the bridge as the starter's and reply hooks find it again in rq."""

    worker: slotworker.SlotWorker
    job: Job | None
    queue: slotworker.SlotQueue | None
    execution: slotworker.Execution | None


def rq_redis() -> redis.Redis:
    """rq's Redis, for a hook of a process that is not root.

    rq keeps a job's function and arguments, its meta and its result pickled, and
    rq's own code unpickles them when it reads a job (a worker trusts whoever can
    write to its Redis as itself). Run as root, the bridge would give root to
    anyone who can write to rq's Redis: it refuses, and the startd runs as the
    user rq's workers would run as (its jobs then run as that user too).
    """
    if os.geteuid() == 0:
        raise RqHookError("the rq bridge does not run as root: reading rq's jobs unpickles "
                          "what anyone who can write to rq's Redis put there; run the startd "
                          "as the user rq's workers would run as")
    return redisconn.connect(get_config())


def _find(ids: RqIds) -> Taken:
    connection = rq_redis()
    worker = slotworker.found_worker(connection, ids.worker)
    try:
        job = Job.fetch(ids.job_id, connection=connection, serializer=worker.serializer)
    except NoSuchJobError:  # gone: deleted, or its result expired already
        return Taken(worker, None, None, None)
    queue = slotworker.SlotQueue(job.origin or ids.queue, connection=connection,
                                 job_class=worker.job_class, serializer=worker.serializer)
    return Taken(worker, job, queue, slotworker.execution_of(worker, job, ids.execution_id))


def _held(connection: redis.Redis, ids: RqIds) -> str | None:
    """The job's status in rq while this slot's execution of it is alive; None once the
    slot no longer has it (recorded, given back, or cleaned up and maybe run elsewhere)."""
    if not slotworker.holds(connection, ids.job_id, ids.execution_id):
        return None
    return slotworker.status_of(connection, ids.job_id)


def _give_back(ids: RqIds, why: str) -> None:
    """Put a job the slot took but never ran back at the front of its queue (nothing
    when the slot no longer has it: it ran and left the slot already)."""
    if _held(rq_redis(), ids) != "started":
        return
    taken = _find(ids)
    try:
        if taken.job is not None and taken.queue is not None and taken.execution is not None:
            slotworker.requeue(taken.worker, taken.job, taken.queue, taken.execution)
            log.info("rq job %s %s; back at the front of queue %s", ids.job_id, why,
                     taken.queue.name)
    finally:
        slotworker.retire(taken.worker)


# -- startd hooks ------------------------------------------------------------

def fetch_work(args: Sequence[str], stdin_text: str) -> str | None:
    """Dequeue the next rq job for the slot ad on stdin; its job ad, or None."""
    slot_ad = slotadtext.parsed(stdin_text, source="slot ad")
    config = get_config()
    knobs = settings.read_settings(config)
    connection = rq_redis()
    slot_name = slot_ad.get("Name")
    name = settings.worker_name(slot_name if isinstance(slot_name, str) else "slot", os.getpid())
    worker = slotworker.new_worker(connection, knobs.queues, name)
    slotworker.maintain(worker)
    if knobs.with_scheduler:
        slotworker.enqueue_scheduled(worker)
    taken = slotworker.dequeue(worker, settings.block_s(knobs, slot_ad.get("Activity") == "Busy"))
    if taken is None:
        return None
    job, queue = taken
    if _mode["in_process"]:  # a program cannot listen past its call
        listener.follow(connection, worker.name)
    execution = slotworker.start(worker, job, queue)
    rq_ids = {"RQ_WORKER_ID": worker.name, "RQ_JOB_ID": job.id,
              "RQ_EXECUTION_ID": execution.id}
    dequeued = settings.DequeuedJob(job_id=job.id, queue=queue.name, worker=worker.name,
                                    execution_id=execution.id,
                                    description=job.description, timeout_s=job.timeout)
    env = settings.job_environment(os.environ, knobs.pythonpath, rq_ids)
    python = knobs.python or sys.executable
    job_ad = ads.from_dict(settings.job_ad(dequeued, python, os.getcwd(), env))
    log.info("slot %s: rq job %s (%s) from queue %s, as rq worker %s", slot_name, job.id,
             job.description, queue.name, worker.name)
    return ads.AdText(job_ad)  # the startd takes the ad rather than parse the text


def reply_fetch(args: Sequence[str], stdin_text: str) -> None:
    """On `reject`, the job goes back to the front of its queue."""
    decision = args[-1] if args else ""
    if decision not in (ACCEPT, REJECT):
        raise RqHookError(f"reply_fetch expects 'accept' or 'reject', got {decision!r}")
    if decision == REJECT:
        _give_back(_ids(ads.first_of_pair(stdin_text, source="hook input")),
                   "was rejected by the slot")
    return None


def evict_claim(args: Sequence[str], stdin_text: str) -> None:
    """A claim evicted while its slot is still Claimed/Idle never started its job (its
    starter could not be made): the job goes back. Otherwise the exit hook settles it."""
    job_ad, slot_ad = ads.split_pair(stdin_text, source="hook input")
    if slot_ad is not None and slot_ad.get("State") == "Claimed" \
            and slot_ad.get("Activity") == "Idle":
        _give_back(_ids(job_ad), "never started on the evicted claim")
    return None


# -- starter hooks -----------------------------------------------------------

def prepare_job(args: Sequence[str], stdin_text: str) -> tuple[int, str] | str:
    """Check rq still has the job as started; keep its heartbeats; its stderr to a file."""
    ids = _ids(ads.first_of_pair(stdin_text, source="hook input"))
    taken = _find(ids)
    status = _held(taken.worker.connection, ids)
    if taken.job is None or taken.execution is None or status != "started":
        log.warning("rq job %s is %s; not running it", ids.job_id,
                    f"{status} in rq" if status else "no longer this slot's in rq")
        return (1, "")
    if _mode["in_process"]:
        keeper.start(keeper.Keeper(taken.worker, taken.job, taken.execution,
                                   float(DEFAULT_JOB_MONITORING_INTERVAL),
                                   settings.walltime_s(taken.job.timeout)))
    call = current_call()
    sandbox = call.cwd if call is not None and call.cwd else os.getcwd()
    return ads.format_ad({"Err": os.path.join(sandbox, settings.HORSE_ERR)})


def update_job_info(args: Sequence[str], stdin_text: str) -> None:
    """A heartbeat of the worker, the execution and the job."""
    taken = _find(_ids(ads.parse_ad(stdin_text, source="job ad")))
    if taken.job is not None and taken.execution is not None:
        slotworker.heartbeat(taken.worker, taken.job, taken.execution)
    return None


def job_exit(args: Sequence[str], stdin_text: str) -> None:
    """Record in rq what the job's process could not, then retire the slot's worker."""
    how = args[-1] if args else ""
    if how not in EXIT_HOWS:
        raise RqHookError(f"job_exit expects one of {', '.join(EXIT_HOWS)}, got {how!r}")
    job_ad = ads.parse_ad(stdin_text, source="job ad")
    ids = _ids(job_ad)
    stopped = keeper.stop(ids.job_id)
    taken = _find(ids)
    try:
        _settle(taken, ids, how, job_ad, stopped is not None and stopped.killed)
    finally:
        slotworker.retire(taken.worker)
    return None


def _settle(taken: Taken, ids: RqIds, how: str, job_ad: classad2.ClassAd,
            killed: bool) -> None:
    by_signal = job_ad.get("ExitBySignal") is True
    exit_code, exit_signal = job_ad.get("ExitCode"), job_ad.get("ExitSignal")
    code = exit_code if isinstance(exit_code, int) and not by_signal else None
    signal_number = exit_signal if isinstance(exit_signal, int) and by_signal else None
    hold_reason = job_ad.get("HoldReason")
    decision = outcome.decide(how, _held(taken.worker.connection, ids), code, signal_number,
                              killed, hold_reason if isinstance(hold_reason, str) else None)
    job, queue, execution = taken.job, taken.queue, taken.execution
    if decision.record is outcome.Record.NOTHING or job is None or queue is None \
            or execution is None:
        log.info("rq job %s left the slot (%s); rq has it as %s", ids.job_id, how,
                 slotworker.status_of(taken.worker.connection, ids.job_id) or "gone")
        return
    if decision.record is outcome.Record.REQUEUE:
        slotworker.requeue(taken.worker, job, queue, execution)
        log.info("rq job %s was evicted; back at the front of queue %s", ids.job_id, queue.name)
    elif decision.record is outcome.Record.STOP:
        taken.worker.stop_job(job, queue, execution)
        log.info("rq job %s was removed from the slot; stopped in rq", ids.job_id)
    else:
        status = outcome.wait_status(code, signal_number)
        slotworker.fail(taken.worker, job, queue, execution, decision.reason,
                        status if how == EXIT or killed else None)
        log.warning("rq job %s failed: %s%s", ids.job_id, decision.reason, _err_tail(job_ad))


def _err_tail(job_ad: classad2.ClassAd) -> str:
    """The end of the job process's standard error, for the log line of a failure."""
    path = job_ad.get("Err")
    if not isinstance(path, str) or not path:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - ERR_TAIL_BYTES))
            tail = handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f"; its standard error ends: {tail}" if tail else ""


HOOKS = {
    "FETCH_WORK": fetch_work,
    "REPLY_FETCH": reply_fetch,
    "EVICT_CLAIM": evict_claim,
    "PREPARE_JOB": prepare_job,
    "UPDATE_JOB_INFO": update_job_info,
    "JOB_EXIT": job_exit,
}
