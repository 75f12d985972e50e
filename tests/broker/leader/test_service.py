"""The broker service: one leader among replicas, the reaper, and `fetchwork broker`."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.config.loader import Config, environ_without_config
from tests.support.waiting import wait_until

SLOT = {"Name": "slot1@svc", "Memory": 1}


@pytest.fixture
def broker(redis_client, pool_name):
    return Broker(redis_client, pool_name, Config.load(environ={}))


def claimed_with_short_lease(broker, lease_s=1):
    (job,) = broker.submit([{"Cmd": "x", "JobLeaseDuration": lease_s}])
    ad = broker.claim(SLOT)
    assert ad is not None and ad["ProcId"] == 0
    return job


def lease_lapsed(broker, job):
    seconds, micros = broker.client.time()
    return seconds + micros / 1e6 > broker.get(job)["FetchworkLeaseExpiry"]


def test_one_replica_leads_until_it_resigns(broker):
    first = BrokerService(broker, leader_lease_s=30, replica="a")
    second = BrokerService(broker, leader_lease_s=30, replica="b")
    assert first.try_lead() and not second.try_lead()
    assert first.try_lead(), "the leader extends its own lease"
    first.resign()
    assert second.try_lead() and not first.try_lead()
    second.resign()


def test_leadership_passes_on_when_the_leader_stops_renewing(broker):
    first = BrokerService(broker, leader_lease_s=0.3, replica="a")
    second = BrokerService(broker, leader_lease_s=0.3, replica="b")
    assert first.try_lead()
    wait_until(second.try_lead, timeout_s=30, what="the second replica taking over")
    assert not first.try_lead()


def test_only_the_leader_reaps(broker):
    job = claimed_with_short_lease(broker)
    leader = BrokerService(broker, reaper_interval_s=0, leader_lease_s=30, replica="a")
    follower = BrokerService(broker, reaper_interval_s=0, leader_lease_s=30, replica="b")
    assert leader.run_once().leader
    wait_until(lambda: lease_lapsed(broker, job), timeout_s=30, what="lease lapsed")
    result = follower.run_once()
    assert not result.leader and result.reaped == []
    assert broker.get(job)["JobStatus"] == 2
    assert leader.run_once().reaped == [job]
    assert broker.get(job)["JobStatus"] == 1
    leader.resign()


def test_reaper_respects_its_interval(broker):
    service = BrokerService(broker, reaper_interval_s=100, leader_lease_s=30, replica="a")
    assert service.run_once(now_s=1000.0).leader
    job = claimed_with_short_lease(broker)
    wait_until(lambda: lease_lapsed(broker, job), timeout_s=30, what="lease lapsed")
    assert service.run_once(now_s=1050.0).reaped == []
    assert service.run_once(now_s=1100.0).reaped == [job]
    service.resign()


def test_service_loop_reaps_and_resigns_when_stopped(broker):
    service = BrokerService(broker, reaper_interval_s=0.1, leader_lease_s=3, replica="loop")
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        job = claimed_with_short_lease(broker)
        wait_until(lambda: broker.get(job)["JobStatus"] == 1, timeout_s=30,
                   what="the loop requeueing a lapsed job")
        assert broker.client.get(broker.keys.leader) == b"loop"
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert broker.client.get(broker.keys.leader) is None


# -- the command -------------------------------------------------------------------

COMMAND = ("import logging; logging.basicConfig(); "
           "from fetchwork.broker.cli import broker_command; broker_command()")


def command_env(redis_url, pool_name, tmp_path, **knobs):
    env = environ_without_config()
    env.update(FETCHWORK_BROKER=redis_url, FETCHWORK_POOL=pool_name,
               FETCHWORK_CONFIG=str(tmp_path / "none.conf"), FETCHWORK_STATE_DIR=str(tmp_path))
    (tmp_path / "none.conf").write_text("")
    env.update({f"_FETCHWORK_{name}": str(value) for name, value in knobs.items()})
    return env


def test_broker_once_reaps_and_exits(broker, redis_url, pool_name, tmp_path):
    job = claimed_with_short_lease(broker)
    wait_until(lambda: lease_lapsed(broker, job), timeout_s=30, what="lease lapsed")
    done = subprocess.run([sys.executable, "-c", COMMAND, "--once"], capture_output=True,
                          text=True, timeout=60, env=command_env(redis_url, pool_name, tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"pool {pool_name}: leader; reaped 1 job(s): {job}"
    assert broker.get(job)["JobStatus"] == 1
    assert broker.client.get(broker.keys.leader) is None


def test_broker_daemon_reaps_then_stops_on_sigterm(broker, redis_url, pool_name, tmp_path):
    env = command_env(redis_url, pool_name, tmp_path, BROKER_REAPER_INTERVAL="0.2",
                      BROKER_REPLICA_NAME="daemon")
    process = subprocess.Popen([sys.executable, "-c", COMMAND], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: broker.client.get(broker.keys.leader) == b"daemon", timeout_s=60,
                   fail_if=process.poll, what="the daemon taking leadership")
        job = claimed_with_short_lease(broker)
        wait_until(lambda: broker.get(job)["JobStatus"] == 1, timeout_s=30,
                   fail_if=process.poll, what="the daemon requeueing a lapsed job")
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "lease expired" in err and job in err
    assert broker.client.get(broker.keys.leader) is None


def test_broker_once_as_a_follower_does_nothing(broker, redis_url, pool_name, tmp_path):
    BrokerService(broker, leader_lease_s=60, replica="someone-else").try_lead()
    job = claimed_with_short_lease(broker)
    wait_until(lambda: lease_lapsed(broker, job), timeout_s=30, what="lease lapsed")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", COMMAND, "--once"], capture_output=True,
                          text=True, timeout=60, env=command_env(redis_url, pool_name, tmp_path))
    assert done.returncode == 0, done.stderr
    assert "not leader; reaped 0 job(s)" in done.stdout
    assert broker.get(job)["JobStatus"] == 2
    assert time.monotonic() - started < 60


def _finish_all(broker, count):
    jobs = broker.submit([{"Cmd": "x"}] * count)
    for _ in jobs:
        ad = broker.claim(SLOT)
        assert broker.finish(f"{ad['ClusterId']}.{ad['ProcId']}", ad["FetchworkClaim"], "exit")
    return jobs


def test_the_history_keeps_only_the_newest_jobs(broker):
    jobs = _finish_all(broker, 7)
    assert broker.trim_history(3) == 4
    kept = sorted(f"{ad['ClusterId']}.{ad['ProcId']}" for ad in broker.history())
    assert kept == sorted(jobs[-3:])
    assert all(broker.get(job) is None for job in jobs[:4])
    assert broker.trim_history(3) == 0


def test_the_leader_trims_the_history_on_its_pass(broker):
    _finish_all(broker, 5)
    service = BrokerService(broker, reaper_interval_s=0, history_max_jobs=2)
    result = service.run_once()
    assert result.leader and result.forgotten == 3
    assert len(broker.history()) == 2
    service.resign()
