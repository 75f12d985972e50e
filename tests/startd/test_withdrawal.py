"""A startd that exits cleanly withdraws its slot ads: `fetchwork status` stops
listing them at once, not SLOT_AD_LIFETIME later. The reference withdraw hook
in both forms, and a real startd with the reference hooks stopped by SIGTERM
and by `--once`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fetchwork.broker.client import Broker
from fetchwork.config.loader import environ_without_config
from fetchwork.startd.shutdown import KILL_WAIT_S, Withdrawal
from tests.hooks.test_reference import FORMS, SLOT_AD, call, hook_env  # noqa: F401 - fixture
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def test_a_withdrawal_waits_for_every_hook_up_to_the_longest_timeout():
    plan = Withdrawal.begin(100.0, [10.0, 3.0])
    assert not plan.over(100.0)
    plan.one_done()
    assert not plan.over(105.0)
    plan.one_done()
    assert plan.over(105.0)
    assert Withdrawal.begin(100.0, [10.0, 3.0]).over(110.0 + KILL_WAIT_S)
    assert Withdrawal.begin(100.0, []).over(100.0)


@pytest.fixture
def broker(hook_env, redis_client, pool_name):  # noqa: F811 - hook_env is a fixture
    return Broker(redis_client, pool=pool_name)


def _names(broker: Broker) -> list[str]:
    return [str(ad["Name"]) for ad in broker.slots()]


@pytest.mark.parametrize("form", FORMS)
def test_the_reference_withdraw_hook_takes_the_slot_off_status(form, hook_env, broker):  # noqa: F811
    assert call(form, hook_env, "FETCH_WORK", SLOT_AD)[0] == 0
    assert _names(broker) == ["slot1@hooktest"]
    assert call(form, hook_env, "WITHDRAW_SLOT", SLOT_AD)[0] == 0
    assert _names(broker) == []
    # A later fetch (the startd came back) shows it again.
    assert call(form, hook_env, "FETCH_WORK", SLOT_AD)[0] == 0
    assert _names(broker) == ["slot1@hooktest"]


@pytest.mark.parametrize("form", FORMS)
def test_a_withdraw_hook_without_a_slot_name_fails_cleanly(form, hook_env, broker):  # noqa: F811
    code, out = call(form, hook_env, "WITHDRAW_SLOT", "Cpus = 1\n")
    assert code == 1 and out == ""


def _startd(redis_url: str, pool_name: str, tmp_path: Path, *args: str) -> subprocess.Popen:
    env = environ_without_config()
    env.update({"FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
                "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path / "state"),
                "_FETCHWORK_STARTD_JOB_HOOK_KEYWORD": "FETCHWORK",
                "_FETCHWORK_NUM_SLOTS": "2",
                "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "0.5"})
    log = open(tmp_path / "startd.log", "wb")  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen([sys.executable, "-m", "fetchwork", "startd", "--name",
                                 "leaving", *args], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    finally:
        log.close()


def test_a_startd_stopped_by_sigterm_leaves_status_at_once(redis_url, pool_name, redis_client,
                                                          tmp_path):
    broker = Broker(redis_client, pool=pool_name)
    startd = _startd(redis_url, pool_name, tmp_path)
    try:
        wait_until(lambda: _names(broker) == ["slot1@leaving", "slot2@leaving"], timeout_s=60,
                   fail_if=startd.poll, what="both slots in fetchwork status")
        startd.send_signal(signal.SIGTERM)
        assert startd.wait(timeout=60) == 0, (tmp_path / "startd.log").read_text()
    finally:
        if startd.poll() is None:
            startd.kill()
            startd.wait()
    assert _names(broker) == [], (tmp_path / "startd.log").read_text()
    assert "slot1: withdraw hook took" in (tmp_path / "startd.log").read_text()


def test_a_startd_run_once_withdraws_its_slots_too(redis_url, pool_name, redis_client,
                                                   tmp_path):
    broker = Broker(redis_client, pool=pool_name)
    startd = _startd(redis_url, pool_name, tmp_path, "--once")
    assert startd.wait(timeout=60) == 0, (tmp_path / "startd.log").read_text()
    log = (tmp_path / "startd.log").read_text()
    assert "slot1 withdrawn" in log or "slot1: withdraw hook took" in log, log
    assert _names(broker) == [], log
