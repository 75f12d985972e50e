"""A finished job stays finished: its end is reported through a Redis outage and
across a startd restart, and the job never runs again.

Each test runs its own redis-server (AOF on, killed with SIGKILL and started
again on the same files), a broker and a startd with the reference hooks, and
a job that waits for a `go` file so the test picks the moment it finishes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from fetchwork.starter.outcomes import pending_outcomes, writer_alive
from tests.support.poolprocs import Daemon, RedisProcess, kill_leftovers, pool_config
from tests.support.startd import pool_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

JOB = ("echo start >> runs; while [ ! -e go ]; do sleep 0.1; done; echo end >> runs")


class Setup:
    def __init__(self, root: Path, retry_s: float):
        self.root = root
        self.work = root / "work"
        self.work.mkdir()
        self.work.chmod(0o777)
        self.redis = RedisProcess(root / "redis")
        self.redis.start()
        config = pool_config(root, self.redis.url, "outage",
                             f"FETCHWORK_REPORT_RETRY_TIME = {retry_s}\n"
                             "JOB_DEFAULT_LEASE_DURATION = 90\n")
        self.broker_daemon = Daemon(config, root / "broker.log", "broker")
        self.startd = Daemon(config, root / "startd.log", "startd")
        self.client = redis.Redis(unix_socket_path=self.redis.socket)
        self.broker = Broker(self.client, pool="outage", config=Config.load(environ={}))
        self.outcomes = str(root / "state" / "spool" / "outcomes")

    def submit(self) -> str:
        [job] = self.broker.submit([{"Cmd": "/bin/sh", "Arguments": f"-c '{JOB}'",
                                     "Iwd": str(self.work)}], owner="test")
        return job

    def state(self, job: str) -> str:
        ad = self.broker.get(job)
        return str(ad.get("FetchworkState")) if ad is not None else "gone"

    def runs(self) -> list[str]:
        path = self.work / "runs"
        return path.read_text().split() if path.exists() else []

    def died(self) -> str | None:
        return self.startd.died() or self.broker_daemon.died()

    def close(self) -> None:
        self.startd.stop()
        self.broker_daemon.stop()
        self.client.close()
        self.redis.stop()
        kill_leftovers(str(self.work))


@pytest.fixture
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    with pool_root("outage") as root:
        built = Setup(root, request.param)
        try:
            built.broker_daemon.start()
            built.startd.start()
            yield built
        finally:
            built.close()


def _finish_while_redis_is_down(setup: Setup) -> str:
    job = setup.submit()
    wait_until(lambda: setup.state(job) == "RUNNING" and setup.runs() == ["start"], 60,
               fail_if=setup.died, what="the job running")
    setup.redis.kill()
    (setup.work / "go").touch()
    wait_until(lambda: setup.runs() == ["start", "end"], 30, fail_if=setup.startd.died,
               what="the job's end")
    wait_until(lambda: pending_outcomes(setup.outcomes), 30, fail_if=setup.startd.died,
               what="the outcome kept on disk")
    return job


@pytest.mark.parametrize("setup", [20.0], indirect=True)
def test_a_job_finished_while_redis_is_down_completes_once(setup: Setup) -> None:
    job = _finish_while_redis_is_down(setup)
    setup.redis.start()
    wait_until(lambda: setup.state(job) == "COMPLETED", 60, fail_if=setup.died,
               what="the job completed")
    wait_until(lambda: not pending_outcomes(setup.outcomes), 30, what="the outcome forgotten")
    assert setup.runs() == ["start", "end"]
    finishes = [fields for _id, fields in setup.broker.events("0-0", count=10000)
                if fields.get("job") == job and fields.get("type") in ("finish", "reap")]
    assert [f["state"] for f in finishes] == ["COMPLETED"]


@pytest.mark.parametrize("setup", [0.5], indirect=True)
def test_a_restarted_startd_reports_the_outcome_a_killed_one_left(setup: Setup) -> None:
    job = _finish_while_redis_is_down(setup)
    # The exit hook gave up quickly: the starter is gone, its outcome stays, and
    # the startd tries to report it itself.
    wait_until(lambda: all(not writer_alive(o) for _p, o in pending_outcomes(setup.outcomes)),
               30, fail_if=setup.startd.died, what="the starter gone")
    wait_until(lambda: "not reported yet" in setup.startd.text(), 30, fail_if=setup.startd.died,
               what="the startd's own attempt")
    setup.startd.kill()
    setup.redis.start()
    assert setup.state(job) == "RUNNING"
    assert len(pending_outcomes(setup.outcomes)) == 1
    setup.startd.start()
    wait_until(lambda: setup.state(job) == "COMPLETED", 60, fail_if=setup.died,
               what="the job completed")
    wait_until(lambda: not pending_outcomes(setup.outcomes), 30, what="the outcome forgotten")
    assert setup.runs() == ["start", "end"]
    assert "left by starter" in setup.startd.text()
    assert os.listdir(setup.outcomes) == []
