"""The broker client on a real Redis: leases and the reaper, events, slots, configuration."""

from __future__ import annotations

import time

import pytest

from fetchwork.broker.client import Broker
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError
from tests.broker.test_client import SLOT, claim, jid
from tests.support.rules import publish_rules
from tests.support.waiting import wait_until


@pytest.fixture
def broker(redis_client, pool_name):
    config = Config.load(environ={}).with_values(BROKER_CLAIM_SCAN_BATCH=16,
                                                 JOB_DEFAULT_LEASE_DURATION=600)
    return Broker(redis_client, pool_name, config)


# -- leases ------------------------------------------------------------------------------


def test_reaper_requeues_lapsed_leases_only(broker):
    broker.submit([{"Cmd": "short", "JobLeaseDuration": 5}])
    broker.submit([{"Cmd": "long", "JobLeaseDuration": 500}])
    short, token = claim(broker)
    long_job, _ = claim(broker)
    assert broker.reap_expired() == []
    assert broker.reap_expired(now=time.time() + 60) == [short]
    ad = broker.get(short)
    assert ad["JobStatus"] == 1 and ad["LastRemoteHost"] == "slot1@host"
    assert broker.renew(short, token) == "gone"
    assert broker.finish(short, token, "exit") is False
    assert broker.get(long_job)["JobStatus"] == 2
    assert claim(broker)[0] == short


def test_reaper_fails_jobs_that_are_not_rerunnable(broker):
    broker.submit([{"Cmd": "x", "JobLeaseDuration": 1, "Rerunnable": False}])
    job, _ = claim(broker)
    assert broker.reap_expired(now=time.time() + 60) == [job]
    ad = broker.get(job)
    assert ad["FetchworkState"] == "FAILED" and "lease expired" in ad["RemoveReason"]


def test_reaper_completes_a_pending_removal(broker):
    broker.submit([{"Cmd": "x", "JobLeaseDuration": 1}])
    job, _ = claim(broker)
    broker.remove([job])
    assert broker.reap_expired(now=time.time() + 60) == [job]
    assert broker.get(job)["FetchworkState"] == "REMOVED"


def server_now(broker) -> float:
    seconds, micros = broker.client.time()
    return seconds + micros / 1e6


def test_renew_keeps_a_lease_alive_past_its_first_expiry(broker):
    broker.submit([{"Cmd": "x", "JobLeaseDuration": 1}])
    ad = broker.claim(SLOT)
    job, token, first_expiry = jid(ad), ad["FetchworkClaim"], ad["FetchworkLeaseExpiry"]
    wait_until(lambda: server_now(broker) > first_expiry - 0.4, timeout_s=30)
    assert broker.renew(job, token) == "ok"
    renewed_expiry = broker.get(job)["FetchworkLeaseExpiry"]
    assert renewed_expiry > first_expiry
    wait_until(lambda: server_now(broker) > first_expiry + 0.1, timeout_s=30)
    if server_now(broker) < renewed_expiry:
        assert broker.reap_expired() == []
        assert broker.get(job)["JobStatus"] == 2
    wait_until(lambda: server_now(broker) > renewed_expiry, timeout_s=30)
    assert broker.reap_expired() == [job]


# -- events and slots -----------------------------------------------------------------------


def test_one_event_per_transition(broker):
    start = "0-0"
    (job,) = broker.submit([{"Cmd": "x"}])
    _, token = claim(broker)
    broker.renew(job, token)
    broker.finish(job, token, "exit")
    events = [fields for _id, fields in broker.events(start)]
    assert [(e["type"], e["state"], e["status"]) for e in events] == [
        ("submit", "IDLE", "1"), ("claim", "RUNNING", "2"), ("finish", "COMPLETED", "4")]
    assert all(e["job"] == job for e in events)
    assert events[1]["slot"] == "slot1@host"
    assert broker.events("$") == []


def test_a_submission_trims_the_events_to_the_pools_cap_not_its_own(redis_client, pool_name):
    publish_rules(redis_client, pool_name,
                  Config.load(environ={}).with_values(BROKER_EVENTS_MAXLEN=100))
    config = Config.load(environ={}).with_values(BROKER_EVENTS_MAXLEN=1_000_000)
    Broker(redis_client, pool_name, config).submit([{"Cmd": "x"}] * 1500)
    assert redis_client.xlen(Broker(redis_client, pool_name).keys.events) < 500


def test_published_slots_are_listed_until_they_expire(broker):
    broker.publish_slot(parse_ad('Name = "slot1@a"\nState = "Unclaimed"\n'), ttl_s=60)
    broker.publish_slot({"Name": "slot2@a", "State": "Claimed"}, ttl_s=0.2)
    assert [ad["Name"] for ad in broker.slots()] == ["slot1@a", "slot2@a"]
    wait_until(lambda: [ad["Name"] for ad in broker.slots()] == ["slot1@a"], timeout_s=10)


def test_scripts_are_reloaded_after_a_flush(broker, redis_client):
    broker.submit([{"Cmd": "x"}])
    redis_client.script_flush()
    job, token = claim(broker)
    redis_client.script_flush()
    assert broker.submit([{"Cmd": "y"}])
    assert broker.finish(job, token, "exit")


def test_from_config_uses_the_configured_redis_and_pool(redis_url, pool_name):
    config = Config.load(environ={"FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name})
    configured = Broker.from_config(config)
    assert configured.pool == pool_name
    (job,) = configured.submit([{"Cmd": "x"}])
    assert configured.get(job)["GlobalJobId"].startswith(f"{pool_name}#")


def test_from_config_reports_an_unreachable_redis(tmp_path):
    config = Config.load(environ={"FETCHWORK_BROKER": f"unix://{tmp_path}/nothing.sock"})
    with pytest.raises(RedisUnavailableError):
        Broker.from_config(config)
