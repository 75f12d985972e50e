"""Submission filters and templates in the broker service, with a real Redis and
real filter programs: jobs wait VALIDATING (never claimable) for the leader's
verdict; failed jobs go to history with their RemoveReason."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.config.loader import Config
from fetchwork.submit import tables
from tests.support.filterprogs import calls, write_filter
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)

SLOT = {"Name": "slot1@sub", "Cpus": 4, "Memory": 1024}


def configured(tmp_path: Path, text: str) -> Config:
    conf = tmp_path / "site.conf"
    conf.write_text(text)
    return Config.load(environ={"FETCHWORK_CONFIG": str(conf),
                                "FETCHWORK_STATE_DIR": str(tmp_path / "state")})


def pool(redis_client, pool_name, config) -> tuple[Broker, BrokerService]:
    broker = Broker(redis_client, pool_name, config)
    service = BrokerService.from_config(broker, config)
    service.run_once()  # leads and publishes the filter summary
    return broker, service


def state(broker: Broker, job: str) -> str:
    ad = broker.get(job)
    assert ad is not None
    return ad["FetchworkState"]


@pytest.fixture
def site(tmp_path):
    write_filter(tmp_path, "quota", code="$(cat " + str(tmp_path) + "/quota.code)",
                 body="echo 'over quota for alice' >&2")
    (tmp_path / "quota.code").write_text("0\n")
    write_filter(tmp_path, "audit", code=1, body="echo 'Audited = true' >> \"$file\"; "
                 "echo 'Owner = \"mallory\"' >> \"$file\"")
    write_filter(tmp_path, "slow", body="sleep 30")
    return configured(tmp_path, f"""
SUBMIT_FILTER_NAMES = AUDIT, QUOTA
SUBMIT_FILTER_AUDIT = {tmp_path}/audit
SUBMIT_FILTER_QUOTA = {tmp_path}/quota
SUBMIT_FILTER_SLOW = {tmp_path}/slow
SUBMIT_FILTER_GONE = {tmp_path}/not-there
SUBMIT_FILTER_TIMEOUT = 1
JOB_TEMPLATE_NAMES = Default, Short, Slow, Gone
JOB_TEMPLATE_SHORT_DEFAULT_JobPrio = 5
JOB_TEMPLATE_SHORT_REQUIREMENTS = RequestCpus <= 4
JOB_TEMPLATE_SHORT_REQUIREMENTS_REASON = "Short jobs use at most 4 CPUs"
JOB_TEMPLATE_SLOW_SUBMIT_FILTER_NAMES = SLOW
JOB_TEMPLATE_GONE_SUBMIT_FILTER_NAMES = GONE
""")


def test_without_filters_a_job_is_idle_at_once(redis_client, pool_name, tmp_path):
    broker = Broker(redis_client, pool_name, configured(tmp_path, ""))
    (job,) = broker.submit([{"Cmd": "/bin/true"}])
    assert state(broker, job) == "IDLE"


def test_a_job_waits_validating_and_cannot_be_claimed(redis_client, pool_name, site):
    broker, service = pool(redis_client, pool_name, site)
    (job,) = broker.submit([{"Cmd": "/bin/true"}])
    assert state(broker, job) == "VALIDATING"
    assert broker.get(job)["JobStatus"] == 1
    assert tables.status_letter(broker.get(job)) == "V"  # its own letter in fetchwork q
    assert broker.claim(SLOT) is None
    service.run_once()
    assert state(broker, job) == "IDLE"
    assert broker.claim(SLOT) is not None
    service.resign()


def test_code_1_takes_the_rewrite_but_not_managed_attributes(redis_client, pool_name, site,
                                                            tmp_path):
    broker, service = pool(redis_client, pool_name, site)
    (job,) = broker.submit([{"Cmd": "/bin/true", "Tag": "a"}], owner="alice")
    service.run_once()
    ad = broker.get(job)
    assert ad["Audited"] is True and ad["Owner"] == "alice"
    assert calls(tmp_path) == ['audit submit "a"', 'quota submit "a"']
    service.resign()


def test_a_failing_filter_fails_the_job_into_history_and_reverts(redis_client, pool_name,
                                                                 site, tmp_path):
    (tmp_path / "quota.code").write_text("3\n")
    broker, service = pool(redis_client, pool_name, site)
    (job,) = broker.submit([{"Cmd": "/bin/true", "Tag": "b"}])
    service.run_once()
    assert broker.query() == []
    [ad] = broker.history()
    assert ad["FetchworkState"] == "FAILED" and ad["JobStatus"] == 3
    assert ad["RemoveReason"] == ("submission filter QUOTA failed the job: exit 3: "
                                  "over quota for alice")
    assert calls(tmp_path) == ['audit submit "b"', 'quota submit "b"', 'quota revert "b"',
                               'audit revert "b"']
    service.resign()


def test_a_timeout_and_a_missing_program_fail_the_job(redis_client, pool_name, site, tmp_path):
    broker, service = pool(redis_client, pool_name, site)
    slow, gone = broker.submit([{"Cmd": "x", "JobTemplate": "Slow"},
                                {"Cmd": "x", "JobTemplate": "Gone"}])
    service.run_once()
    reasons = {f"{ad['ClusterId']}.{ad['ProcId']}": ad["RemoveReason"]
               for ad in broker.history()}
    assert reasons[slow] == "submission filter SLOW timed out after 1 s"
    assert reasons[gone] == f"submission filter GONE not found: {tmp_path}/not-there"
    service.resign()


def test_templates_give_defaults_and_refuse_with_their_reason(redis_client, pool_name, site):
    broker, service = pool(redis_client, pool_name, site)
    small, big, unknown = broker.submit([
        {"Cmd": "x", "JobTemplate": "Short", "RequestCpus": 2},
        {"Cmd": "x", "JobTemplate": "Short", "RequestCpus": 8},
        {"Cmd": "x", "JobTemplate": "Huge"}])
    service.run_once()
    ad = broker.get(small)
    assert ad["FetchworkState"] == "IDLE" and ad["JobPrio"] == 5
    assert broker.get(big)["RemoveReason"] == ("job template Short refused the job: "
                                               "Short jobs use at most 4 CPUs")
    assert "unknown job template 'Huge'" in broker.get(unknown)["RemoveReason"]
    service.resign()


def test_the_template_prio_orders_the_idle_queue(redis_client, pool_name, site):
    broker, service = pool(redis_client, pool_name, site)
    plain, short = broker.submit([{"Cmd": "x"}, {"Cmd": "x", "JobTemplate": "Short",
                                                 "RequestCpus": 1}])
    service.run_once()
    first = broker.claim(SLOT)
    assert f"{first['ClusterId']}.{first['ProcId']}" == short
    service.resign()


def test_a_job_submitted_on_hold_is_held_after_admission(redis_client, pool_name, site):
    broker, service = pool(redis_client, pool_name, site)
    (job,) = broker.submit([{"Cmd": "x", "hold": True}])
    assert state(broker, job) == "VALIDATING"
    service.run_once()
    assert state(broker, job) == "HELD"
    service.resign()


def test_a_validating_job_can_be_removed_but_not_held(redis_client, pool_name, site):
    broker, service = pool(redis_client, pool_name, site)
    first, second = broker.submit([{"Cmd": "x"}, {"Cmd": "x"}])
    assert broker.hold([first]) == []
    assert broker.remove([second]) == [second]
    service.run_once()
    assert state(broker, first) == "IDLE" and state(broker, second) == "REMOVED"
    service.resign()


def test_timed_holds_end_by_themselves_without_any_filter(redis_client, pool_name, tmp_path):
    broker, service = pool(redis_client, pool_name, configured(tmp_path, ""))
    timed, early, plain = broker.submit([{"Cmd": "x"}] * 3)
    # Far enough ahead that the first pass below, slow on a loaded machine, comes before it.
    until = int(time.time()) + 5
    assert broker.hold([timed, early], hold_until=until) == [timed, early]
    assert broker.hold([plain]) == [plain]
    assert broker.get(timed)["HoldUntil"] == until
    assert broker.release([early]) == [early]
    assert "HoldUntil" not in broker.get(early)
    service.run_once()
    assert state(broker, timed) == "HELD"
    wait_until(lambda: service.run_once() and state(broker, timed) == "IDLE", 30,
               what="the leader releasing the timed hold")
    assert time.time() >= until and state(broker, plain) == "HELD"
    started = broker.claim(SLOT)
    assert started is not None and "HoldUntil" not in started
    service.resign()
