"""What becomes of an rq job when its startd goes away or will not run it.

A real startd with the rq bridge, rq's Redis private to the module (one
database per test). A machine that dies mid-job (the startd, its starters and
jobs SIGKILLed at once) leaves its jobs where rq's own cleanup finds them;
a startd killed alone has its starters give their jobs back; a job the slot
rejects goes back to the front of its queue, intact for any worker.
"""

from __future__ import annotations

import re
import secrets
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redis
from rq import Queue, Retry, Worker
from rq.job import Job
from rq.registry import FailedJobRegistry, StartedJobRegistry

from tests.support import rqbridge
from tests.support.processes import alive
from tests.support.tlsredis import tls_redis
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

QUEUE = "lifecycle"


@dataclass
class World:
    root: Path
    port: int
    runtime: rqbridge.Runtime


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with rqbridge.fresh_root("lifecycle") as root, rqbridge.rq_redis(root) as port:
        yield World(root, port, rqbridge.runtime(root))


def _startd(world: World, name: str, db: int,
            extra: str = "") -> tuple[rqbridge.BridgeStartd, redis.Redis]:
    """A startd (not started) in a folder of its own holding the job functions."""
    pool = rqbridge.BridgeStartd(world.root / name, world.runtime)
    rq_url = rqbridge.url(world.port, db)
    pool.write_config(rqbridge.startd_config(pool.folder, rq_url, QUEUE, extra=extra))
    connection = redis.Redis.from_url(rq_url)
    connection.flushdb()
    return pool, connection


def _horses(pool: rqbridge.BridgeStartd) -> dict[str, psutil.Process]:
    """The startd's job processes, by rq job id."""
    assert pool.proc is not None
    found = {}
    for proc in psutil.Process(pool.proc.pid).children(recursive=True):
        try:
            words = proc.cmdline()
        except psutil.Error:
            continue
        if "fetchwork.hooks.rqbridge.horse" in words:
            found[words[words.index("fetchwork.hooks.rqbridge.horse") + 2]] = proc
    return found


def _kill_machine(pool: rqbridge.BridgeStartd) -> None:
    """SIGKILL the startd and every process under it at once (stopped first, so none
    acts on another's death)."""
    assert pool.proc is not None
    top = psutil.Process(pool.proc.pid)
    victims = [top, *top.children(recursive=True)]
    for proc in victims:
        try:
            proc.send_signal(signal.SIGSTOP)
        except psutil.Error:
            pass
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    pool.proc.wait(30)


def test_a_machine_that_dies_mid_job_leaves_its_jobs_to_rqs_cleanup(world: World) -> None:
    pool, connection = _startd(world, "machine", 3)
    queue = Queue(QUEUE, connection=connection)
    plain = queue.enqueue("rqtestjobs.sleepy", 60, job_timeout=600)
    retried = queue.enqueue("rqtestjobs.sleepy", 60, job_timeout=600, retry=Retry(max=1))
    pool.start()
    try:
        wait_until(lambda: {plain.id, retried.id} <= set(_horses(pool)), 60,
                   fail_if=pool.exited, what="both jobs running")
        _kill_machine(pool)
    finally:
        pool.stop()
    registry = StartedJobRegistry(QUEUE, connection=connection)
    assert {plain.id, retried.id} <= set(registry.get_job_ids(cleanup=False))
    assert rqbridge.status(connection, plain.id) == "started"
    # rq's cleanup (any rq worker runs it every 10 minutes, and so do the bridge's
    # fetches) once the executions' heartbeats have lapsed: an hour from now.
    registry.cleanup(timestamp=time.time() + 3600)
    assert rqbridge.status(connection, plain.id) == "failed"
    assert plain.id in FailedJobRegistry(QUEUE, connection=connection)
    assert "AbandonedJobError" in (Job.fetch(plain.id, connection=connection)
                                   .latest_result().exc_string or "")  # type: ignore[union-attr]
    assert rqbridge.status(connection, retried.id) == "queued"
    assert Job.fetch(retried.id, connection=connection).retries_left == 0


def test_a_startd_killed_alone_has_its_running_job_given_back(world: World) -> None:
    pool, connection = _startd(world, "alone", 4, extra="NUM_SLOTS = 1\n")
    queue = Queue(QUEUE, connection=connection)
    job = queue.enqueue("rqtestjobs.sleepy", 60, job_timeout=600)
    later = queue.enqueue("rqtestjobs.add", 1, 1)
    pool.start()
    try:
        horse = wait_until(lambda: _horses(pool).get(job.id), 60, fail_if=pool.exited,
                           what="the job running")
        assert pool.proc is not None
        pool.proc.kill()
        pool.proc.wait(30)
        # Its starter sees the startd gone, vacates the job, and the exit hook gives it back.
        wait_until(lambda: rqbridge.status(connection, job.id) == "queued", 60,
                   what="the job queued again")
        wait_until(lambda: not alive(horse.pid), 30, what="the job process gone")
    finally:
        pool.stop()
    assert queue.get_job_ids() == [job.id, later.id], pool.log_text()[-3000:]
    assert job.id not in StartedJobRegistry(QUEUE, connection=connection).get_job_ids()
    # The exit hook gives the job back first, then retires the slot's worker.
    wait_until(lambda: [worker.name for worker in Worker.all(connection=connection)] == [],
               30, what="the slot's rq worker retired")


def test_a_rejected_job_goes_back_to_the_front_intact(world: World) -> None:
    # The slot's START refuses this call: each fetch takes the job and gives it back.
    pool, connection = _startd(world, "reject", 5, extra=(
        'START = TARGET.RqDescription =!= "rqtestjobs.add(20, 22)"\nFetchWorkDelay = 1\n'))
    queue = Queue(QUEUE, connection=connection)
    job = queue.enqueue("rqtestjobs.add", 20, 22)
    pool.start()
    try:
        pool.wait_log("was rejected by the slot", 60)
    finally:
        pool.stop()
    assert f"rq job {job.id} was rejected by the slot" in pool.log_text()
    assert rqbridge.status(connection, job.id) == "queued"
    assert queue.get_job_ids() == [job.id]
    assert StartedJobRegistry(QUEUE, connection=connection).get_job_ids() == []
    pool_root = world.root / "reject"
    rqbridge.rq_worker(pool_root, rqbridge.url(world.port, 5), [QUEUE])
    assert Job.fetch(job.id, connection=connection).return_value() == 42


PROGRAM_HOOKS = ("FETCH_WORK", "REPLY_FETCH", "EVICT_CLAIM", "PREPARE_JOB", "UPDATE_JOB_INFO",
                 "JOB_EXIT")


def test_the_hooks_work_as_programs(world: World) -> None:
    knobs = "".join(f"RQ_HOOK_{name} = {world.runtime.python}\n"
                    f"RQ_HOOK_{name}_ARGS = -m fetchwork.hooks.rqbridge {name}\n"
                    for name in PROGRAM_HOOKS)
    pool, connection = _startd(world, "programs", 6, extra=knobs)
    queue = Queue(QUEUE, connection=connection)
    added = queue.enqueue("rqtestjobs.add", 2, 3)
    failed = queue.enqueue("rqtestjobs.boom", "as a program")
    pool.start(debug=True)  # a reply hook that did its work is a debug line
    try:
        rqbridge.wait_jobs_done(connection, [added.id, failed.id], 120, fail_if=pool.exited)
        wait_until(lambda: not Worker.all(connection=connection), 30, fail_if=pool.exited,
                   what="no rq worker left")
    finally:
        pool.stop()
    assert Job.fetch(added.id, connection=connection).return_value() == 5
    assert rqbridge.status(connection, failed.id) == "failed"
    assert "ValueError: as a program" in (Job.fetch(failed.id, connection=connection)
                                          .latest_result().exc_string or "")  # type: ignore[union-attr]
    assert "[-m fetchwork.hooks.rqbridge REPLY_FETCH accept]" in pool.log_text()


def _blocked_on_queues(connection: redis.Redis) -> bool:
    return any(client.get("cmd") in ("blmove", "blpop") for client in connection.client_list())


def test_a_job_taken_while_the_startd_stops_goes_back(world: World) -> None:
    pool, connection = _startd(world, "stopping", 7,
                               extra="NUM_SLOTS = 1\nRQ_FETCH_LONG_POLL = 5\n")
    queue = Queue(QUEUE, connection=connection)
    pool.start()
    try:
        wait_until(lambda: _blocked_on_queues(connection), 60, fail_if=pool.exited,
                   what="the idle slot waiting on the queue")
        assert pool.proc is not None
        pool.proc.send_signal(signal.SIGTERM)
        # Taken by the fetch still waiting: the stopping startd rejects it.
        job = queue.enqueue("rqtestjobs.add", 3, 4)
        assert pool.proc.wait(60) == 0
    finally:
        pool.stop()
    assert f"rq job {job.id} was rejected by the slot" in pool.log_text()
    assert rqbridge.status(connection, job.id) == "queued"
    assert queue.get_job_ids() == [job.id]
    assert StartedJobRegistry(QUEUE, connection=connection).get_job_ids() == []


def test_a_starter_kept_across_jobs_runs_each_rq_job(world: World) -> None:
    pool, connection = _startd(world, "kept", 8,
                               extra="NUM_SLOTS = 1\nSTARTER_JOBS_PER_PROCESS = 3\n")
    queue = Queue(QUEUE, connection=connection)
    jobs = [queue.enqueue("rqtestjobs.add", n, n) for n in range(4)]
    jobs.append(queue.enqueue("rqtestjobs.boom", "in a kept starter"))
    pool.start()
    try:
        rqbridge.wait_jobs_done(connection, [job.id for job in jobs], 120, fail_if=pool.exited)
    finally:
        pool.stop()
    assert [Job.fetch(job.id, connection=connection).return_value() for job in jobs[:4]] == \
        [0, 2, 4, 6]
    assert rqbridge.status(connection, jobs[4].id) == "failed"
    assert "Traceback" not in pool.log_text()
    starters = set(re.findall(r"\(starter (\d+) runs job", pool.log_text()))
    assert 0 < len(starters) < len(jobs), starters  # some starter ran several jobs


def test_a_startd_works_rq_over_tls_as_a_redis_user(world: World) -> None:
    with tls_redis(world.root / "tls-redis") as server:
        password = secrets.token_hex(8)
        server.write_acl_file([f"user rqworker on >{password} ~* &* +@all"])
        server.admin().acl_load()
        pool = rqbridge.BridgeStartd(world.root / "tls", world.runtime)
        # The startd's files, readable by the user it runs as (chowned at its start).
        for name in ("ca", "client_cert", "client_key"):
            shutil.copy(getattr(server.certs, name), pool.folder / f"{name}.pem")
        (pool.folder / "password").write_text(password + "\n")
        pool.write_config(rqbridge.startd_config(pool.folder, server.url, QUEUE, extra=(
            f"RQ_CA = {pool.folder / 'ca.pem'}\nRQ_CERT = {pool.folder / 'client_cert.pem'}\n"
            f"RQ_KEY = {pool.folder / 'client_key.pem'}\nRQ_USERNAME = rqworker\n"
            f"RQ_PASSWORD_FILE = {pool.folder / 'password'}\n")))
        connection = server.admin()
        job = Queue(QUEUE, connection=connection).enqueue("rqtestjobs.add", 20, 1)
        pool.start()
        try:
            rqbridge.wait_jobs_done(connection, [job.id], 120, fail_if=pool.exited)
        finally:
            pool.stop()
        assert Job.fetch(job.id, connection=connection).return_value() == 21
