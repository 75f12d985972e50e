"""The rq bridge against rq's own worker: the same jobs, the same assertions.

One module-scoped run per runner: the same rq jobs are enqueued (rq's
`Queue.enqueue`, on a private Redis, one database per runner) and worked
either by `rq worker --burst` or by a real startd whose slots use the bridge.
Every assertion then runs against both runs: return values, exceptions,
timeouts, retries, dependencies, callbacks, result and failure TTLs, and the
job process's folder and variables come out as rq's own worker gives them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Callback, Queue, Retry, Worker
from rq.command import send_stop_job_command
from rq.job import Dependency, Job
from rq.registry import FailedJobRegistry, FinishedJobRegistry
from rq.results import Result

from tests.support import rqbridge
from tests.support.waiting import wait_until

RUNNERS = ["rq worker", "fetchwork startd"]
QUEUE = "bridged"
DB = {"rq worker": 1, "fetchwork startd": 2}


@dataclass
class World:
    root: Path
    port: int
    runtime: rqbridge.Runtime


@dataclass
class Run:
    runner: str
    connection: redis.Redis
    ids: dict[str, str]
    root: Path
    # What `Worker.all()` showed while the "slow" job ran.
    busy_workers: list[tuple[str, str, str | None]] = field(default_factory=list)
    log: str = ""  # the startd's log
    rq_info: str = ""  # what `rq info --only-workers` printed while the "slow" job ran

    def job(self, name: str) -> Job:
        return Job.fetch(self.ids[name], connection=self.connection)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with rqbridge.fresh_root("bridge") as root, rqbridge.rq_redis(root) as port:
        rqbridge.write_jobs(root)
        yield World(root, port, rqbridge.runtime(root))


def enqueue_all(connection: redis.Redis) -> dict[str, str]:
    """The jobs both runners work; their ids by name."""
    queue = Queue(QUEUE, connection=connection)
    jobs = {}
    jobs["slow"] = queue.enqueue("rqtestjobs.sleepy", 2)
    jobs["add"] = queue.enqueue("rqtestjobs.add", 1, 2)
    jobs["boom"] = queue.enqueue("rqtestjobs.boom", "bad input",
                                 on_failure=Callback("rqtestjobs.on_failure"))
    jobs["timeout"] = queue.enqueue("rqtestjobs.sleepy", 30, job_timeout=1)
    jobs["retried"] = queue.enqueue("rqtestjobs.counted_failure", "attempts",
                                    retry=Retry(max=2))
    jobs["dependent"] = queue.enqueue("rqtestjobs.add", 10, 20, depends_on=jobs["add"])
    jobs["after_failure"] = queue.enqueue("rqtestjobs.add", 0, 0, depends_on=jobs["boom"])
    jobs["allowed_failure"] = queue.enqueue(
        "rqtestjobs.add", 5, 5, depends_on=Dependency(jobs=[jobs["boom"]], allow_failure=True))
    jobs["callback"] = queue.enqueue("rqtestjobs.add", 2, 2,
                                     on_success=Callback("rqtestjobs.on_success"))
    jobs["no_result"] = queue.enqueue("rqtestjobs.add", 1, 1, result_ttl=0)
    jobs["failure_ttl"] = queue.enqueue("rqtestjobs.boom", "kept a while", failure_ttl=500)
    jobs["where"] = queue.enqueue("rqtestjobs.where")
    jobs["extra_path"] = queue.enqueue("rqextra.found_at")
    jobs["killed"] = queue.enqueue("rqtestjobs.die")
    # Due already, in the scheduled-job registry: a worker with a scheduler enqueues it.
    jobs["scheduled"] = queue.enqueue_at(datetime.now(UTC) - timedelta(seconds=1),
                                         "rqtestjobs.add", 7, 8)
    jobs["stoppable"] = queue.enqueue("rqtestjobs.sleepy", 60, job_timeout=600,
                                      on_stopped=Callback("rqtestjobs.on_stopped"))
    return {name: job.id for name, job in jobs.items()}


def _busy_workers(connection: redis.Redis) -> list[tuple[str, str, str | None]]:
    return [(worker.name, worker.get_state(), worker.get_current_job_id())
            for worker in Worker.all(connection=connection)]


@contextmanager
def _working(runner: str, world: World, rq_url: str,
             logs: list[str]) -> Iterator[Callable[[], object]]:
    """The runner at work on the queue (rq's burst worker, or a startd, each started in a
    folder holding the job functions); yields what says it failed, stops it on leaving
    (a startd's log then goes into `logs`)."""
    if runner == "rq worker":
        with open(world.root / "rq-worker.log", "wb") as log:
            proc = subprocess.Popen(rqbridge.rq_worker_argv(rq_url, [QUEUE], "--with-scheduler",
                                                            "--path", str(world.root / "extra")),
                                    cwd=world.root, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": str(world.root)})
        try:
            yield lambda: proc.poll() not in (None, 0) and f"rq worker exited {proc.returncode}"
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return
    pool = rqbridge.BridgeStartd(world.root / "startd", world.runtime)
    pool.write_config(rqbridge.startd_config(
        pool.folder, rq_url, QUEUE,
        extra=f"RQ_WITH_SCHEDULER = true\nRQ_PYTHONPATH = {pool.folder / 'extra'}\n"))
    pool.start()
    try:
        yield pool.exited
    finally:
        pool.stop()
        logs.append(pool.log_text())
    assert "Traceback" not in logs[-1], logs[-1][-3000:]


@pytest.fixture(scope="module", params=RUNNERS)
def run(request: pytest.FixtureRequest, world: World) -> Iterator[Run]:
    runner = request.param
    rq_url = rqbridge.url(world.port, DB[runner])
    connection = redis.Redis.from_url(rq_url)
    connection.flushdb()
    ids = enqueue_all(connection)
    result = Run(runner, connection, ids, world.root)
    # Every job but the one whose dependency fails (it stays deferred).
    ending = [job_id for name, job_id in ids.items() if name != "after_failure"]
    logs: list[str] = []
    with _working(runner, world, rq_url, logs) as failed:
        result.busy_workers = wait_until(
            lambda: [seen for seen in _busy_workers(connection)
                     if seen[2] == ids["slow"] and seen[1] == "busy"],
            60, fail_if=failed, what="a busy rq worker on the slow job")
        result.rq_info = subprocess.run(
            [str(Path(sys.executable).parent / "rq"), "info", "--only-workers", "--url", rq_url],
            capture_output=True, text=True, timeout=60, check=True).stdout
        stoppable = Job.fetch(ids["stoppable"], connection=connection)
        # rq's own worker listens from its start; a slot's startd from before the job is
        # marked started, and its starter takes over what the startd heard. So one word,
        # sent as soon as rq names the job's worker, is enough.
        wait_until(lambda: stoppable.get_status() == "started" and stoppable.refresh() is None
                   and stoppable.worker_name, 90, fail_if=failed,
                   what="the stoppable job started, its worker named")
        send_stop_job_command(connection, stoppable.id)
        wait_until(lambda: stoppable.get_status() in ("stopped", "failed", "finished"), 60,
                   fail_if=failed, what="the stop word taken")
        rqbridge.wait_jobs_done(connection, ending, 120, fail_if=failed)
        wait_until(lambda: not Worker.all(connection=connection), 30, fail_if=failed,
                   what="no rq worker left")
    result.log = "".join(logs)
    yield result
    connection.close()


# -- outcomes, as rq's worker records them ----------------------------------

def test_return_value_is_rqs_result(run: Run) -> None:
    job = run.job("add")
    assert job.get_status() == "finished"
    assert job.return_value() == 3
    latest = job.latest_result()
    assert latest is not None and latest.type == Result.Type.SUCCESSFUL
    assert job.id in FinishedJobRegistry(QUEUE, connection=run.connection)


def test_exception_fails_with_its_traceback(run: Run) -> None:
    job = run.job("boom")
    assert job.get_status() == "failed"
    assert job.id in FailedJobRegistry(QUEUE, connection=run.connection)
    latest = job.latest_result()
    assert latest is not None and latest.type == Result.Type.FAILED
    assert "ValueError: bad input" in (latest.exc_string or "")
    assert 'in boom' in (latest.exc_string or "")


def test_timeout_is_rqs_timeout(run: Run) -> None:
    job = run.job("timeout")
    assert job.get_status() == "failed"
    exc = job.latest_result().exc_string or ""  # type: ignore[union-attr]
    assert "JobTimeoutException" in exc
    assert "maximum timeout value (1 seconds)" in exc


def test_retries_as_many_as_asked(run: Run) -> None:
    job = run.job("retried")
    assert job.get_status() == "failed"
    assert job.retries_left == 0
    assert run.connection.get("attempts") == b"3"


def test_dependents_run_after_their_dependency(run: Run) -> None:
    dependent = run.job("dependent")
    assert dependent.get_status() == "finished"
    assert dependent.return_value() == 30
    assert dependent.started_at >= run.job("add").ended_at  # type: ignore[operator]


def test_a_failed_dependency_keeps_dependents_back(run: Run) -> None:
    assert run.job("after_failure").get_status() == "deferred"
    allowed = run.job("allowed_failure")
    assert allowed.get_status() == "finished"
    assert allowed.return_value() == 10


def test_callbacks_run(run: Run) -> None:
    called = [item.decode() for item in run.connection.lrange("callbacks", 0, -1)]
    assert f"success:{run.ids['callback']}:4" in called
    assert f"failure:{run.ids['boom']}:ValueError" in called
    assert not [item for item in called if run.ids["add"] in item]


def test_due_scheduled_jobs_run_with_a_scheduler(run: Run) -> None:
    job = run.job("scheduled")
    assert job.get_status() == "finished"
    assert job.return_value() == 15


def test_a_job_process_killed_fails_as_rqs_dead_horse(run: Run) -> None:
    job = run.job("killed")
    assert job.get_status() == "failed"
    assert job.id in FailedJobRegistry(QUEUE, connection=run.connection)
    assert job.latest_result().exc_string == (  # type: ignore[union-attr]
        "Work-horse terminated unexpectedly; waitpid returned 9 (signal 9); ")
    if run.runner == "fetchwork startd":  # the startd's log shows the end of its stderr
        assert "its standard error ends: about to be killed" in run.log


def test_result_ttl_zero_deletes_the_job(run: Run) -> None:
    assert not Job.exists(run.ids["no_result"], connection=run.connection)


def test_failure_ttl_bounds_a_failed_job(run: Run) -> None:
    job = run.job("failure_ttl")
    assert job.get_status() == "failed"
    assert 0 < run.connection.ttl(job.key) <= 500


def test_the_job_process_sees_what_an_rq_horse_sees(run: Run) -> None:
    seen: Any = run.job("where").return_value()
    assert seen["job"] == run.ids["where"]
    assert seen["worker"]
    assert Path(seen["cwd"]).resolve() == (
        run.root if run.runner == "rq worker" else run.root / "startd").resolve()
    assert str(run.root) in seen["pythonpath"].split(":") or \
        str(run.root / "startd") in seen["pythonpath"].split(":")


def test_more_import_folders_are_searched(run: Run) -> None:
    found = Path(run.job("extra_path").return_value())
    assert found.parent.name == "extra" and found.name == "rqextra.py"


def test_a_stopped_job_is_stopped(run: Run) -> None:
    job = run.job("stoppable")
    assert job.get_status() == "stopped"
    assert job.id in FailedJobRegistry(QUEUE, connection=run.connection)
    assert "Job stopped by user" in (job.latest_result().exc_string or "")  # type: ignore[union-attr]
    assert f"stopped:{job.id}" in [item.decode()
                                    for item in run.connection.lrange("callbacks", 0, -1)]


def test_a_busy_worker_shows_its_job(run: Run) -> None:
    (name, state, job_id), = run.busy_workers
    assert (state, job_id) == ("busy", run.ids["slow"])
    if run.runner == "fetchwork startd":  # the slot's name, and the startd's pid
        assert name.startswith(("slot1@", "slot2@"))
    assert f"{name} (" in run.rq_info and "busy" in run.rq_info
