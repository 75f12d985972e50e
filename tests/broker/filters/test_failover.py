"""No job is lost when the broker service dies mid-activation, and the broker
refuses to start with filter knobs it cannot use."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.config.loader import Config, environ_without_config
from tests.support.filterprogs import write_filter
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

SLOT = {"Name": "slot1@failover", "Cpus": 1, "Memory": 1024}
BROKER = ("import logging; logging.basicConfig(); "
          "from fetchwork.broker.cli import broker_command; broker_command()")
CLAIMER = ("import sys; from fetchwork.broker.client import Broker; "
           "print(Broker.from_config().claim({'Name': 'slot9@failover', 'Memory': 1}))")


def setup(tmp_path: Path, redis_url: str, pool_name: str) -> tuple[dict[str, str], Config]:
    pidfile = tmp_path / "filter.pid"
    write_filter(tmp_path, "gate", body=f"echo $$ > {pidfile}; sleep 60")
    conf = tmp_path / "site.conf"
    conf.write_text(f"ACTIVATION_FILTER_NAMES = GATE\nACTIVATION_FILTER_GATE = {tmp_path}/gate\n"
                    "ACTIVATION_FILTER_TIMEOUT = 4\nBROKER_LEADER_LEASE = 2\n"
                    "BROKER_REAPER_INTERVAL = 0.3\n")
    env = environ_without_config()
    env.update(FETCHWORK_BROKER=redis_url, FETCHWORK_POOL=pool_name, FETCHWORK_CONFIG=str(conf),
               FETCHWORK_STATE_DIR=str(tmp_path))
    return env, Config.load(environ=env)


def kill_filter(tmp_path: Path) -> None:
    try:
        os.killpg(int((tmp_path / "filter.pid").read_text()), signal.SIGKILL)
    except (ProcessLookupError, ValueError):
        pass


def test_a_claim_gets_its_job_back_when_the_service_dies(tmp_path, redis_url, redis_client,
                                                          pool_name):
    env, config = setup(tmp_path, redis_url, pool_name)
    broker = Broker(redis_client, pool_name, config)
    service = subprocess.Popen([sys.executable, "-c", BROKER], env=env,
                               stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: broker.client.get(broker.keys.leader), 60, fail_if=service.poll,
                   what="the service leading")
        wait_until(lambda: broker.client.hget(broker.keys.filters, "activate") == b"1", 30)
        (job,) = broker.submit([{"Cmd": "/bin/true"}])
        box: dict = {}
        claim = threading.Thread(target=lambda: box.setdefault("ad", broker.claim(SLOT)))
        started = time.monotonic()
        claim.start()
        wait_until(lambda: (tmp_path / "filter.pid").exists(), 30, what="the filter running")
        assert broker.get(job)["FetchworkState"] == "ACTIVATING"
        service.kill()
        claim.join(timeout=30)
        assert box["ad"] is None
        assert time.monotonic() - started < 4 + 1 + 0.5 + 3  # its timeout plus a little
        ad = broker.get(job)
        assert ad["FetchworkState"] == "IDLE" and broker.client.zcard(broker.keys.activating) == 0
    finally:
        service.kill()
        service.wait()
        kill_filter(tmp_path)


def test_a_new_leader_returns_a_job_whose_claim_and_service_both_died(
        tmp_path, redis_url, redis_client, pool_name):
    env, config = setup(tmp_path, redis_url, pool_name)
    broker = Broker(redis_client, pool_name, config)
    first = BrokerService.from_config(broker, config)
    first.run_once()  # publishes the summary, then "dies": it never passes again
    (job,) = broker.submit([{"Cmd": "/bin/true"}])
    claimer = subprocess.Popen([sys.executable, "-c", CLAIMER], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: broker.get(job)["FetchworkState"] == "ACTIVATING", 30,
                   what="the job activating")
        claimer.kill()
    finally:
        claimer.wait()
    deadline_ms = broker.client.zscore(broker.keys.activating, job)
    wait_until(lambda: time.time() * 1000 > deadline_ms, 30, what="the claim's deadline")
    broker.client.delete(broker.keys.leader)  # the first leader's lease lapsed
    second = BrokerService.from_config(broker, config.with_values(BROKER_REPLICA_NAME="second"))
    second.run_once()  # too late to run the chain for a claim that is gone
    assert broker.get(job)["FetchworkState"] == "ACTIVATING"
    wait_until(lambda: second.run_once() and broker.get(job)["FetchworkState"] == "IDLE", 30,
               what="the new leader putting the job back after the claim's deadline")
    ad = broker.get(job)
    assert "FetchworkReservedSlot" not in ad and "FetchworkClaim" not in ad
    assert not (tmp_path / "filter.pid").exists()  # no chain ran for a dead claim
    second.resign()


@pytest.mark.parametrize(("knobs", "words"), [
    ({"DEFAULT_HOLD_DURATION": "30"}, "DEFAULT_HOLD_DURATION = 30 is outside 60..604800"),
    ({"DEFAULT_HOLD_DURATION": "700000"}, "outside 60..604800 seconds"),
    ({"SUBMIT_FILTER_NAMES": "QUOTA"}, "SUBMIT_FILTER_QUOTA is not defined"),
])
def test_the_broker_refuses_to_start(tmp_path, redis_url, pool_name, knobs, words):
    env = environ_without_config()
    env.update(FETCHWORK_BROKER=redis_url, FETCHWORK_POOL=pool_name,
               FETCHWORK_CONFIG=os.devnull, FETCHWORK_STATE_DIR=str(tmp_path))
    env.update({f"_FETCHWORK_{name}": value for name, value in knobs.items()})
    done = subprocess.run([sys.executable, "-m", "fetchwork", "broker", "--once"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert words in done.stderr and "Traceback" not in done.stderr
