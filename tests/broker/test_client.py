"""The broker client on a real Redis: submit, order, claim, renew, finish, hold, remove."""

from __future__ import annotations

import time

import pytest

from fetchwork.broker.client import Broker
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.errors import (
    AdError,
    BrokerError,
    JobIdError,
    SubmitError,
)
from tests.support.rules import publish_rules

SLOT = parse_ad('Name = "slot1@host"\nMemory = 2048\nSTART = true\n')


@pytest.fixture
def broker(redis_client, pool_name):
    config = Config.load(environ={}).with_values(BROKER_CLAIM_SCAN_BATCH=16,
                                                 JOB_DEFAULT_LEASE_DURATION=600)
    publish_rules(redis_client, pool_name, config)
    return Broker(redis_client, pool_name, config)


def jid(ad) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


def claim(broker, slot=SLOT):
    ad = broker.claim(slot)
    assert ad is not None
    return jid(ad), ad["FetchworkClaim"]


# -- submitting ----------------------------------------------------------------


def test_submit_numbers_clusters_and_procs(broker):
    first = broker.submit([{"Cmd": "/bin/true"}] * 3)
    second = broker.submit([{"Cmd": "/bin/true"}])
    cluster = int(first[0].split(".")[0])
    assert first == [f"{cluster}.0", f"{cluster}.1", f"{cluster}.2"]
    assert second == [f"{cluster + 1}.0"]


def test_submitted_ad_has_htcondor_attributes(broker):
    (job,) = broker.submit([{"Cmd": "/bin/echo", "Arguments": "hi",
                             "Requirements": {"$expr": "TARGET.Memory > 100"}}], owner="alice")
    ad = broker.get(job)
    assert ad["Cmd"] == "/bin/echo" and ad["Owner"] == "alice"
    assert ad["JobStatus"] == 1 and ad["FetchworkState"] == "IDLE"
    assert ad["JobPrio"] == 0 and ad["Rerunnable"] is True and ad["JobLeaseDuration"] == 600
    assert abs(ad["QDate"] - time.time()) < 60
    assert abs(ad["EnteredCurrentStatus"] - time.time()) < 60
    assert ad["GlobalJobId"].endswith(f"#{job}#{ad['QDate']}")
    assert str(ad.lookup("Requirements")) == "TARGET.Memory > 100"


def test_classads_are_accepted_as_input(broker):
    (job,) = broker.submit([parse_ad('Cmd = "/bin/true"\nJobPrio = 3\nFoo = 1 + 2\n')])
    ad = broker.get(job)
    assert ad["JobPrio"] == 3 and ad.eval("Foo") == 3


def test_get_unknown_job_is_none(broker):
    assert broker.get("99999.0") is None
    with pytest.raises(JobIdError):
        broker.get("nonsense")


def test_held_at_submit_is_not_claimed_until_released(broker):
    (job,) = broker.submit([{"Cmd": "x", "hold": True}])
    ad = broker.get(job)
    assert ad["JobStatus"] == 5 and ad["HoldReason"] and ad["HoldReasonCode"] == 15
    assert broker.claim(SLOT) is None
    assert broker.release([job]) == [job]
    assert broker.get(job)["LastHoldReason"] == "submitted on hold"
    assert claim(broker)[0] == job


def test_submit_into_a_cluster_from_next_cluster(broker):
    cluster = broker.next_cluster()
    assert broker.submit([{"Cmd": "a"}, {"Cmd": "b"}], cluster_id=cluster) == [
        f"{cluster}.0", f"{cluster}.1"]


def test_a_cluster_is_filled_by_one_submission_only(broker):
    cluster = broker.next_cluster()
    broker.submit([{"Cmd": "a"}], cluster_id=cluster)
    with pytest.raises(SubmitError):
        broker.submit([{"Cmd": "b"}] * 2500, cluster_id=cluster)
    assert broker.select([str(cluster)]) == [f"{cluster}.0"]
    assert broker.get(f"{cluster}.0")["Cmd"] == "a"
    assert broker.get(f"{cluster}.1") is None and broker.get(f"{cluster}.2499") is None


def test_cluster_never_allocated_is_refused(broker):
    with pytest.raises(SubmitError):
        broker.submit([{"Cmd": "a"}], cluster_id=broker.next_cluster() + 1000)
    assert broker.query() == []


def test_bad_ad_queues_nothing(broker):
    with pytest.raises(AdError):
        broker.submit([{"Cmd": "a"}, {"Requirements": {"$expr": "(((("}}])
    assert broker.query() == []


def test_big_submission_spans_batches_in_order(broker):
    ids = broker.submit([{"Cmd": "x", "N": n} for n in range(2500)])
    assert len(ids) == 2500
    assert broker.get(ids[-1])["N"] == 2499
    assert [claim(broker)[0] for _ in range(3)] == ids[:3]


# -- reading -----------------------------------------------------------------------


def test_query_select_and_constraints(broker):
    a = broker.submit([{"Cmd": "a", "Kind": "x"}, {"Cmd": "b", "Kind": "y"}])
    b = broker.submit([{"Cmd": "c", "Kind": "x"}])
    assert {jid(ad) for ad in broker.query()} == set(a + b)
    assert {jid(ad) for ad in broker.query('Kind == "x"')} == {a[0], b[0]}
    assert broker.select([a[0].split(".")[0]]) == a
    assert broker.select([b[0], "999999.0"]) == b
    assert broker.select(all_jobs=True) == a + b
    assert broker.select(all_jobs=True, constraint='Kind == "y"') == [a[1]]
    assert broker.select([a[0].split(".")[0]], constraint='Kind == "x"') == [a[0]]
    assert broker.select() == []
    with pytest.raises(JobIdError):
        broker.select(["1.x"])


def test_history_newest_first_with_constraint_and_limit(broker):
    ids = broker.submit([{"Cmd": "x", "N": n} for n in range(4)])
    for _ in ids:
        job, token = claim(broker)
        assert broker.finish(job, token, "exit", {"ExitCode": 0})
    assert [jid(ad) for ad in broker.history()][0] == ids[-1]
    assert {jid(ad) for ad in broker.history()} == set(ids)
    assert len(broker.history(limit=2)) == 2
    assert [ad["N"] for ad in broker.history("N < 2")] == [1, 0]
    assert broker.query() == []


# -- claim order and matching ---------------------------------------------------------


def test_claim_order_is_priority_then_submission(broker):
    low = broker.submit([{"Cmd": "low", "JobPrio": -5}])
    normal = broker.submit([{"Cmd": "n"}] * 3)
    high = broker.submit([{"Cmd": "h", "JobPrio": 10}] * 2)
    order = [claim(broker)[0] for _ in range(6)]
    assert order == high + normal + low
    assert broker.claim(SLOT) is None


def test_extreme_priorities_keep_exact_order(broker):
    top = broker.submit([{"Cmd": "t", "JobPrio": 10**9}] * 3)
    bottom = broker.submit([{"Cmd": "b", "JobPrio": -(10**9)}] * 2)
    middle = broker.submit([{"Cmd": "m", "JobPrio": 200000}] * 2)
    scores = broker.client.zrange(broker.keys.idle, 0, -1, withscores=True)
    assert len({score for _member, score in scores}) == 7
    first, token = claim(broker)
    assert first == top[0]
    assert broker.reject(first, token)
    order = [claim(broker)[0] for _ in range(7)]
    assert order == top + middle + bottom


def test_claim_sets_running_attributes(broker):
    (job,) = broker.submit([{"Cmd": "x", "JobLeaseDuration": 30}])
    ad = broker.claim(SLOT)
    assert jid(ad) == job
    assert ad["JobStatus"] == 2 and ad["FetchworkState"] == "RUNNING"
    assert ad["RemoteHost"] == "slot1@host" and len(ad["FetchworkClaim"]) == 32
    assert ad["NumJobMatches"] == 1
    assert abs(ad["FetchworkLeaseExpiry"] - (time.time() + 30)) < 10


def test_requirements_and_start_are_both_honoured(broker):
    big = broker.submit([{"Cmd": "big", "JobPrio": 5,
                          "Requirements": {"$expr": "TARGET.Memory > 4096"}}])
    mallory = broker.submit([{"Cmd": "m", "JobPrio": 4}], owner="mallory")
    fits = broker.submit([{"Cmd": "ok"}], owner="alice")
    picky = parse_ad('Name = "s2"\nMemory = 2048\nSTART = TARGET.Owner != "mallory"\n')
    assert claim(broker, picky)[0] == fits[0]
    assert broker.claim(picky) is None
    assert claim(broker)[0] == mallory[0]
    assert broker.get(big[0])["JobStatus"] == 1


def test_long_run_of_non_matching_jobs_is_scanned_through(broker):
    broker.submit([{"Cmd": "no", "JobPrio": 9, "Requirements": False}] * 300)
    (wanted,) = broker.submit([{"Cmd": "yes", "JobPrio": -1}])
    assert claim(broker)[0] == wanted
    assert broker.claim(SLOT) is None


def test_slot_given_as_mapping(broker):
    (job,) = broker.submit([{"Cmd": "x"}])
    ad = broker.claim({"Name": "slot9@h", "Memory": 1})
    assert jid(ad) == job and ad["RemoteHost"] == "slot9@h"


def test_reject_puts_job_at_head_of_its_group(broker):
    high = broker.submit([{"Cmd": "h", "JobPrio": 1}])
    normal = broker.submit([{"Cmd": "n"}] * 3)
    assert claim(broker)[0] == high[0]
    second, token = claim(broker)
    assert second == normal[0]
    third, _ = claim(broker)
    assert broker.reject(third, token) is False
    assert broker.reject(second, token) is True
    ad = broker.get(second)
    assert ad["JobStatus"] == 1 and "RemoteHost" not in ad and "FetchworkClaim" not in ad
    assert ad["LastRemoteHost"] == "slot1@host"
    assert claim(broker)[0] == second
    assert claim(broker)[0] == normal[2]


# -- renew and finish -------------------------------------------------------------------


def test_renew_stores_attributes_and_extends_the_lease(broker):
    broker.submit([{"Cmd": "x", "JobLeaseDuration": 20}])
    job, token = claim(broker)
    before = broker.get(job)["FetchworkLeaseExpiry"]
    assert broker.renew(job, token, {"RemoteUserCpu": 2.5, "ImageSize": 1000,
                                     "JobStatus": 4, "RemoteHost": "forged"}) == "ok"
    ad = broker.get(job)
    assert ad["RemoteUserCpu"] == 2.5 and ad["ImageSize"] == 1000
    assert ad["JobStatus"] == 2 and ad["RemoteHost"] == "slot1@host"
    assert ad["FetchworkLeaseExpiry"] >= before
    assert broker.renew(job, "not-the-token") == "gone"
    assert broker.renew("424242.0", token) == "gone"


def test_renew_replaces_attributes_case_insensitively(broker):
    broker.submit([{"Cmd": "x", "MyCounter": 1}])
    job, token = claim(broker)
    assert broker.renew(job, token, {"mycounter": 2}) == "ok"
    raw_fields = broker.client.hkeys(broker.keys.job(job))
    assert [f for f in raw_fields if f.lower() == b"mycounter"] == [b"mycounter"]
    assert broker.get(job)["MyCounter"] == 2


def test_suspend_and_continue(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = claim(broker)
    assert broker.renew(job, token, suspended=True) == "ok"
    ad = broker.get(job)
    assert ad["JobStatus"] == 7 and ad["FetchworkState"] == "SUSPENDED"
    assert broker.renew(job, token, suspended=False) == "ok"
    assert broker.get(job)["JobStatus"] == 2
    assert broker.renew(job, token, suspended=True) == "ok"
    assert broker.finish(job, token, "exit")
    assert broker.get(job)["JobStatus"] == 4


def test_finish_exit_completes_into_history(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = claim(broker)
    assert broker.finish(job, token, "exit", {"ExitCode": 3, "RemoteUserCpu": 0.25})
    ad = broker.get(job)
    assert ad["JobStatus"] == 4 and ad["FetchworkState"] == "COMPLETED"
    assert ad["ExitCode"] == 3 and ad["RemoteUserCpu"] == 0.25
    assert ad["CompletionDate"] > 0 and ad["LastRemoteHost"] == "slot1@host"
    assert "FetchworkClaim" not in ad and "RemoteHost" not in ad
    assert broker.finish(job, token, "exit") is False
    assert broker.renew(job, token) == "gone"
    assert [jid(a) for a in broker.history()] == [job]


def test_finish_evict_requeues_at_its_place(broker):
    ids = broker.submit([{"Cmd": "x"}] * 2)
    job, token = claim(broker)
    assert broker.finish(job, token, "evict")
    assert broker.get(job)["JobStatus"] == 1
    assert claim(broker)[0] == ids[0]


def test_finish_evict_of_a_job_that_is_not_rerunnable_fails_it(broker):
    broker.submit([{"Cmd": "x", "Rerunnable": False}])
    job, token = claim(broker)
    assert broker.finish(job, token, "evict")
    ad = broker.get(job)
    assert ad["FetchworkState"] == "FAILED" and ad["JobStatus"] == 3
    assert "not rerunnable" in ad["RemoveReason"]
    assert [jid(a) for a in broker.history()] == [job]


def test_finish_takes_the_hold_reason_from_the_attributes(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = claim(broker)
    assert broker.finish(job, token, "hold", {"HoldReason": "periodic hold", "ExitCode": 1})
    ad = broker.get(job)
    assert ad["HoldReason"] == "periodic hold" and ad["HoldReasonCode"] == 3
    assert ad["ExitCode"] == 1


def test_bad_pool_name_is_refused(redis_client):
    with pytest.raises(BrokerError):
        Broker(redis_client, "a:b", Config.load(environ={}))


def test_finish_hold_and_remove(broker):
    broker.submit([{"Cmd": "x"}] * 2)
    held, token = claim(broker)
    assert broker.finish(held, token, "hold", reason="job policy")
    ad = broker.get(held)
    assert ad["JobStatus"] == 5 and ad["HoldReason"] == "job policy"
    removed, token = claim(broker)
    assert broker.finish(removed, token, "remove")
    assert broker.get(removed)["JobStatus"] == 3
    with pytest.raises(Exception, match="how must be"):
        broker.finish(removed, token, "explode")


# -- remove, hold, release --------------------------------------------------------------


def test_remove_and_hold_idle_jobs(broker):
    ids = broker.submit([{"Cmd": "x"}] * 3)
    assert broker.hold([ids[0]], reason="wait") == [ids[0]]
    assert broker.hold([ids[0]]) == []
    ad = broker.get(ids[0])
    assert ad["JobStatus"] == 5 and ad["HoldReason"] == "wait" and ad["HoldReasonCode"] == 1
    cluster = ids[0].split(".")[0]
    assert broker.remove([cluster], reason="done") == ids
    assert broker.remove([cluster]) == []
    assert broker.query() == []
    assert all(broker.get(job)["RemoveReason"] == "done" for job in ids)
    assert broker.release(ids) == []


def test_remove_running_job_is_marked_until_it_stops(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = claim(broker)
    assert broker.remove([job]) == [job]
    assert broker.get(job)["JobStatus"] == 3
    assert broker.get(job)["FetchworkState"] == "RUNNING"
    assert broker.renew(job, token) == "removed"
    assert broker.finish(job, token, "exit", {"ExitCode": 0})
    ad = broker.get(job)
    assert ad["FetchworkState"] == "REMOVED" and ad["JobStatus"] == 3


def test_hold_running_job_then_evict_holds_it(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = claim(broker)
    assert broker.hold([job]) == [job]
    assert broker.renew(job, token) == "held"
    assert broker.finish(job, token, "evict")
    ad = broker.get(job)
    assert ad["FetchworkState"] == "HELD" and ad["JobStatus"] == 5
    assert broker.release([job]) == [job]
    assert claim(broker)[0] == job


def test_release_cancels_a_pending_hold(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = claim(broker)
    broker.hold([job])
    assert broker.release([job]) == [job]
    assert broker.renew(job, token) == "ok"
    assert broker.get(job)["JobStatus"] == 2


def test_actions_apply_to_jobs_selected_once(broker):
    ids = broker.submit([{"Cmd": "x", "Kind": "a"}, {"Cmd": "x", "Kind": "b"}])
    chosen = broker.select(all_jobs=True, constraint='Kind == "b"')
    assert broker.apply("hold", chosen, "by constraint") == [ids[1]]
    assert broker.get(ids[1])["HoldReason"] == "by constraint"
    assert broker.apply("release", chosen) == [ids[1]]
    assert broker.apply("remove", []) == []
    with pytest.raises(BrokerError, match="no user action"):
        broker.apply("vacate", chosen)
