"""A killed broker leader is replaced within a few seconds, and the new leader reaps.

Two `fetchwork broker` replicas with the default BROKER_LEADER_LEASE on the
suite's Redis; the leader gets SIGKILL (it cannot resign), the standby takes
the lease when it ends and requeues a job whose lease lapsed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.leadership import standby_wait_s
from fetchwork.config.loader import Config
from tests.broker.leader.test_service import claimed_with_short_lease, command_env
from tests.support.poolprocs import Daemon
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def test_a_standby_wakes_when_the_lease_ends_not_a_tick_later():
    assert standby_wait_s(1.0, None) == 1.0
    assert standby_wait_s(1.0, -2) == 1.0  # no leader key: its own tick
    assert standby_wait_s(1.0, 300) == pytest.approx(0.32)
    assert standby_wait_s(1.0, 5000) == 1.0
    assert standby_wait_s(1.0, 0) == pytest.approx(0.02)


def test_the_default_lease_is_a_few_seconds():
    lease_s = Config.load(environ={}).get_duration_s("BROKER_LEADER_LEASE")
    assert 1 <= lease_s <= 5


@pytest.fixture
def replicas(redis_url, pool_name, tmp_path):
    daemons = {}
    for name in ("one", "two"):
        env = command_env(redis_url, pool_name, tmp_path, BROKER_REAPER_INTERVAL="0.5",
                          BROKER_REPLICA_NAME=name)
        daemons[name] = Daemon(Path(env["FETCHWORK_CONFIG"]), tmp_path / f"{name}.log",
                               "broker", env=env)
        daemons[name].start()
    yield daemons
    for daemon in daemons.values():
        daemon.stop()


def test_a_killed_leader_is_replaced_within_a_few_seconds(replicas, redis_client, pool_name):
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    lease_s = Config.load(environ={}).get_duration_s("BROKER_LEADER_LEASE")

    def leader() -> str | None:
        value = redis_client.get(broker.keys.leader)
        return value.decode() if value else None

    def died() -> str | None:
        return next(filter(None, (d.died() for d in replicas.values())), None)

    first = wait_until(leader, 60, fail_if=died, what="a leader")
    standby = "two" if first == "one" else "one"
    replicas[first].kill()
    killed_at = time.monotonic()
    job = claimed_with_short_lease(broker)
    wait_until(lambda: leader() == standby, 30, fail_if=replicas[standby].died,
               what="the standby leading")
    took_s = time.monotonic() - killed_at
    wait_until(lambda: broker.get(job)["JobStatus"] == 1, 30, fail_if=replicas[standby].died,
               what="the new leader requeueing a lapsed job")
    print(f"standby {standby} led {took_s:.2f}s after the leader's SIGKILL "
          f"(lease {lease_s:g}s)", file=sys.stderr)
    # The lease bounds the takeover; a loaded machine may add a little to it.
    assert took_s < lease_s + 3.0
    assert "took leadership" in replicas[standby].text()
