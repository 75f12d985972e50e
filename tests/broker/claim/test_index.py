"""The autocluster index in a real pool: every script keeps it in step with the idle set,
and a claim evaluates one job per autocluster without changing which job it takes."""

from __future__ import annotations

from typing import Any

import pytest

from fetchwork.broker.claim.index import SlotVerdicts
from fetchwork.broker.client import Broker
from fetchwork.broker.scheduling.leaderpass import SchedulingRunner
from fetchwork.broker.scheduling.settings import scheduling_settings
from fetchwork.broker.store.acmembers import AUTOCLUSTER_ATTR, parse_member
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config

pytestmark = pytest.mark.timeout(60)

NEEDS_MEMORY = {"$expr": "TARGET.Memory >= MY.RequestMemory"}
BIG = {"Cmd": "/bin/true", "RequestMemory": 10**6, "Requirements": NEEDS_MEMORY}
SMALL = {"Cmd": "/bin/true", "RequestMemory": 10, "Requirements": NEEDS_MEMORY}
SLOT = parse_ad('Name = "slot1@ac"\nMemory = 1000\nSTART = true\n')


def make_config(**knobs: Any) -> Config:
    return Config.load(environ={}).with_values(BROKER_CLAIM_SCAN_BATCH=16,
                                               JOB_DEFAULT_LEASE_DURATION=600, **knobs)


def make_broker(redis_client: Any, pool_name: str, **knobs: Any) -> Broker:
    return Broker(redis_client, pool_name, make_config(**knobs))


def with_policy(redis_client: Any, pool_name: str, **knobs: Any) -> tuple[Broker, SchedulingRunner]:
    broker = make_broker(redis_client, pool_name, **knobs)
    return broker, SchedulingRunner(broker.store, scheduling_settings(make_config(**knobs)))


@pytest.fixture
def broker(redis_client: Any, pool_name: str) -> Broker:
    return make_broker(redis_client, pool_name)


def jid(ad: Any) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


def index_of(broker: Broker) -> tuple[dict[str, float], dict[str, float]]:
    """(idle job -> score as the index holds it, autocluster -> best score)."""
    client, keys = broker.client, broker.store.keys
    members = {}
    for raw in client.zrange(keys.ac_members, 0, -1):
        _gid, order, job = parse_member(raw.decode())
        members[job] = float(order)
    groups = {gid.decode(): score
              for gid, score in client.zrange(keys.ac_groups, 0, -1, withscores=True)}
    return members, groups


def assert_in_step(broker: Broker) -> None:
    """The index holds exactly the idle set, at the same scores, each group at its best."""
    client, keys = broker.client, broker.store.keys
    idle = {job.decode(): score for job, score in client.zrange(keys.idle, 0, -1,
                                                                 withscores=True)}
    members, groups = index_of(broker)
    assert members == idle
    best: dict[str, float] = {}
    for raw in client.zrange(keys.ac_members, 0, -1):
        gid, order, _job = parse_member(raw.decode())
        best[gid] = min(best.get(gid, float(order)), float(order))
    assert groups == best


def test_submitted_jobs_of_one_shape_share_one_autocluster(broker: Broker) -> None:
    ids = broker.submit([BIG] * 5 + [SMALL] * 3)
    gids = {broker.get(job)[AUTOCLUSTER_ATTR] for job in ids}
    assert len(gids) == 2
    assert_in_step(broker)


def test_a_claim_behind_non_matching_jobs_reads_only_its_candidates(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker.submit([BIG] * 300)
    (wanted,) = broker.submit([SMALL])
    read: list[str] = []
    hashes = broker.store.hashes

    def counting(job_ids: Any) -> Any:
        read.extend(job_ids)
        return hashes(job_ids)

    monkeypatch.setattr(broker.store, "hashes", counting)
    ad = broker.claim(SLOT)
    assert ad is not None and jid(ad) == wanted
    assert read == [], "the quiet claim reads no job before claim_quiet.lua"
    assert broker.claim(SLOT) is None
    assert read == [], "a slot that matches nothing reads no job"
    assert_in_step(broker)


def test_priority_order_holds_across_autoclusters(broker: Broker) -> None:
    other = {**SMALL, "RequestMemory": 20}
    low = broker.submit([SMALL] * 2)
    high = broker.submit([{**other, "JobPrio": 5}])
    later = broker.submit([other])
    taken = [jid(broker.claim(SLOT)) for _ in range(4)]
    assert taken == [*high, *low, *later]
    assert broker.claim(SLOT) is None
    assert_in_step(broker)


def test_a_start_that_reads_other_attributes_evaluates_each_job(broker: Broker) -> None:
    slot = parse_ad('Name = "slot1@picky"\nMemory = 1000\nSTART = TARGET.Cmd == "/bin/date"\n')
    first = broker.submit([SMALL] * 3)
    (wanted,) = broker.submit([{**SMALL, "Cmd": "/bin/date"}])
    assert len({broker.get(job)[AUTOCLUSTER_ATTR] for job in [*first, wanted]}) == 1
    ad = broker.claim(slot)
    assert ad is not None and jid(ad) == wanted
    assert broker.claim(slot) is None


def test_hold_release_remove_reject_and_eviction_keep_the_index_in_step(
        broker: Broker) -> None:
    ids = broker.submit([SMALL] * 4 + [BIG] * 2)
    broker.hold(ids[:2])
    assert_in_step(broker)
    broker.remove([ids[4]])
    assert_in_step(broker)
    broker.release(ids[:1])
    assert_in_step(broker)
    ad = broker.claim(SLOT)
    assert ad is not None and jid(ad) == ids[0]
    assert_in_step(broker)
    assert broker.reject(jid(ad), ad["FetchworkClaim"])
    assert_in_step(broker)
    ad = broker.claim(SLOT)
    assert ad is not None
    broker.finish(jid(ad), ad["FetchworkClaim"], "evict")
    assert_in_step(broker)
    members, _groups = index_of(broker)
    assert jid(ad) in members


def test_an_update_of_what_a_match_reads_takes_the_job_out_of_its_autocluster(
        broker: Broker) -> None:
    ids = broker.submit([SMALL] * 2)
    ad = broker.claim(SLOT)
    assert ad is not None and jid(ad) == ids[0]
    broker.renew(ids[0], ad["FetchworkClaim"], {"RequestMemory": 10**6})
    assert broker.get(ids[0])[AUTOCLUSTER_ATTR] == ""
    broker.finish(ids[0], ad["FetchworkClaim"], "evict")
    assert_in_step(broker)
    ad = broker.claim(SLOT)
    assert ad is not None and jid(ad) == ids[1], "the grown job no longer fits"
    assert broker.claim(SLOT) is None


def test_an_update_of_other_attributes_keeps_the_autocluster(broker: Broker) -> None:
    (job,) = broker.submit([SMALL])
    gid = broker.get(job)[AUTOCLUSTER_ATTR]
    ad = broker.claim(SLOT)
    assert ad is not None
    broker.renew(job, ad["FetchworkClaim"], {"ImageSize": 1234})
    assert broker.get(job)[AUTOCLUSTER_ATTR] == gid


def test_jobs_the_index_does_not_hold_are_still_claimed(broker: Broker) -> None:
    ids = broker.submit([BIG] * 3 + [SMALL])
    keys = broker.store.keys
    broker.client.delete(keys.ac_members, keys.ac_groups)
    ad = broker.claim(SLOT)
    assert ad is not None and jid(ad) == ids[3]


def test_the_policy_pass_reorders_the_index_with_the_idle_set(redis_client: Any,
                                                               pool_name: str) -> None:
    broker, runner = with_policy(redis_client, pool_name, PRIORITY_RESOURCE_WEIGHT=1)
    small = broker.submit([SMALL], owner="alice")
    wide = broker.submit([{**SMALL, "RequestCpus": 4}], owner="bob")
    runner.run_pass()
    assert_in_step(broker)
    first = broker.claim(parse_ad('Name = "s"\nMemory = 1000\nCpus = 8\n'))
    assert first is not None and jid(first) == wide[0], "more CPUs ranks first"
    assert jid(broker.claim(SLOT)) == small[0]
    assert_in_step(broker)


def test_the_policy_pass_blocking_and_unblocking_keeps_the_index_in_step(
        redis_client: Any, pool_name: str) -> None:
    broker, runner = with_policy(redis_client, pool_name, MAX_IDLE_JOBS_PER_USER=2)
    ids = broker.submit([SMALL] * 4, owner="alice")
    runner.run_pass()
    assert_in_step(broker)
    ad = broker.claim(SLOT)
    assert ad is not None and jid(ad) == ids[0]
    broker.finish(ids[0], ad["FetchworkClaim"], "exit")
    runner.run_pass()
    assert_in_step(broker)
    members, _groups = index_of(broker)
    assert sorted(members) == ids[1:3]


def test_alike_ads_are_shaped_once_yet_each_job_keeps_its_own_attributes(
        broker: Broker) -> None:
    per_proc = {**SMALL, "Requirements": {"$expr": "MY.ProcId >= 0"}}
    ads = [SMALL, SMALL, BIG, dict(SMALL), per_proc, per_proc, {**SMALL, "RequestMemory": 11}]
    ids = broker.submit(ads, owner="alice")
    for proc, (job, ad) in enumerate(zip(ids, ads, strict=True)):
        stored = broker.get(job)
        assert stored["ProcId"] == proc and stored["RequestMemory"] == ad["RequestMemory"]
        assert stored["GlobalJobId"].split("#")[1] == job and stored["Owner"] == "alice"
        assert str(stored.lookup("Requirements")) == ad["Requirements"]["$expr"]
    gids = [broker.get(job)[AUTOCLUSTER_ATTR] for job in ids]
    assert gids[0] == gids[1] == gids[3] and len(set(gids)) == 5
    assert_in_step(broker)


def test_order_holds_across_many_autoclusters_past_non_matching_ones(broker: Broker) -> None:
    broker.submit([{**BIG, "RequestMemory": 10**6 + n} for n in range(20)])
    wanted = broker.submit([{**SMALL, "RequestMemory": 10 + n % 20} for n in range(40)])
    taken = []
    for _ in range(40):
        ad = broker.claim(SLOT)
        assert ad is not None
        taken.append(jid(ad))
    assert taken == wanted
    assert broker.claim(SLOT) is None
    assert_in_step(broker)


def test_a_claim_reloads_the_index_script_when_the_server_lost_it(broker: Broker) -> None:
    (job,) = broker.submit([SMALL])
    assert broker.claim(parse_ad('Name = "other"\nMemory = 1\n')) is None
    broker.client.script_flush()
    ad = broker.claim(SLOT)
    assert ad is not None and jid(ad) == job


def test_slot_verdicts_hand_the_quiet_claim_its_autoclusters_by_verdict() -> None:
    verdicts = SlotVerdicts()
    assert verdicts.args() == ("", "", "")
    verdicts.learn([("a", True, True), ("b", False, False), ("c", False, True)])
    verdicts.learn([("d", True, True)])
    assert verdicts.args() == ("a d", "b", "c")
    assert verdicts.get("c") == (False, True) and verdicts.get("e") is None
