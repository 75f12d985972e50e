"""Signed admission on a real Redis: the leader signs what it admits, one signature per
batch, and refuses a job whose signed attributes changed while it waited (its staged
digest no longer matches), one with no staged digest, or one whose hash names another
job."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.filters.leader import BATCH, FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.leader.publish import RulesPublisher, pool_rules
from fetchwork.broker.store import calls, codec
from fetchwork.broker.trust.signer import Signer, ensure_key_pair
from fetchwork.config import signedjob
from fetchwork.config.ads import format_ad, parse_ad
from fetchwork.config.loader import Config
from tests.support.sigbatches import SIG_REF, handed_ad, settle


@pytest.fixture
def signing(signing_leader):
    broker, leader, pem = signing_leader
    return broker, leader, signedjob.read_public_key(pem.read_bytes(), "p")


def state(broker: Broker, job: str) -> str:
    return str(broker.get(job)["FetchworkState"])


def test_every_job_waits_and_is_signed_when_admitted(signing) -> None:
    broker, leader, public = signing
    jobs = broker.submit([{"Cmd": "/bin/true", "Arguments": str(n)} for n in range(1200)],
                         owner="alice")
    assert {state(broker, job) for job in jobs[:3]} == {"VALIDATING"}
    settle(leader)
    assert {state(broker, job) for job in jobs} == {"IDLE"}
    for job in (jobs[0], jobs[-1]):
        assert signedjob.check(public, parse_ad(format_ad(handed_ad(broker, job))),
                               broker.pool) is None


def test_a_job_changed_while_it_waited_is_refused_not_signed(signing) -> None:
    broker, leader, public = signing
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 3, owner="alice")  # one cluster ad
    broker.client.hset(broker.keys.job(jobs[1]), "Cmd", msgpack.packb("/bin/evil"))
    settle(leader)
    assert [state(broker, job) for job in jobs] == ["IDLE", "FAILED", "IDLE"]
    assert "signed attributes changed" in broker.get(jobs[1])["RemoveReason"]
    assert "FetchworkSignature" not in broker.get(jobs[1])
    # The decided jobs' staged digests are gone.
    assert not broker.client.exists(broker.keys.staged(jobs[0].split(".")[0]))


def test_a_change_to_the_cluster_ad_is_caught_for_every_job(signing) -> None:
    broker, leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    cluster = jobs[0].split(".")[0]
    broker.client.hset(broker.keys.cluster(cluster), "Owner", msgpack.packb("root"))
    settle(leader)
    assert [state(broker, job) for job in jobs] == ["FAILED", "FAILED"]


def test_a_job_with_no_staged_digest_is_refused(signing) -> None:
    broker, leader, _public = signing
    [job] = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    broker.client.delete(broker.keys.staged(job.split(".")[0]))
    settle(leader)
    assert state(broker, job) == "FAILED"
    assert "no staged digest" in broker.get(job)["RemoveReason"]


def test_one_signature_covers_a_batch_and_each_proof_its_own_job(signing) -> None:
    broker, leader, public = signing
    jobs = broker.submit([{"Cmd": "/bin/true", "Arguments": str(n)} for n in range(40)],
                         owner="alice")
    settle(leader)
    ads = [parse_ad(format_ad(handed_ad(broker, job))) for job in jobs]
    values = [ad["FetchworkSignature"] for ad in ads]
    assert len({value.split(":")[4] for value in values}) == 1  # one root signature
    roots = signedjob.RootCache()
    assert all(signedjob.check(public, ad, broker.pool, roots) is None for ad in ads)
    # Another job's proof, another pool's name, a changed attribute: each refused.
    swapped = parse_ad(format_ad({**handed_ad(broker, jobs[0]), "FetchworkSignature": values[1]}))
    assert signedjob.check(public, swapped, broker.pool, roots) is not None
    assert signedjob.check(public, ads[2], "elsewhere", roots) is not None
    changed = parse_ad(format_ad({**handed_ad(broker, jobs[3]), "Arguments": "99"}))
    assert signedjob.check(public, changed, broker.pool, roots) is not None


def test_a_job_whose_hash_names_another_job_is_refused(signing) -> None:
    broker, leader, _public = signing
    [job] = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    broker.client.hset(broker.keys.job(job), "ProcId", msgpack.packb(7))
    settle(leader)
    assert state(broker, job) == "FAILED"
    assert "do not name job" in broker.get(job)["RemoveReason"]


def test_signed_admission_survives_a_server_that_lost_its_scripts(signing) -> None:
    broker, leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 3, owner="alice")
    settle(leader)  # loads admit_signed.lua
    more = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    broker.client.script_flush()  # as a restarted server would have
    settle(leader)
    assert {state(broker, job) for job in jobs + more} == {"IDLE"}


def test_a_batch_is_placed_as_one_job_at_a_time_would_be(signing) -> None:
    broker, leader, _public = signing
    low = broker.submit([{"Cmd": "/bin/true", "JobPrio": 0}] * 2, owner="alice")
    high = broker.submit([{"Cmd": "/bin/true", "JobPrio": 5}], owner="alice")
    held = broker.submit([{"Cmd": "/bin/true", "hold": True}], owner="alice")
    settle(leader)
    assert {state(broker, job) for job in low + high} == {"IDLE"}
    assert state(broker, held[0]) == "HELD"
    assert broker.get(held[0])["HoldReasonCode"] == 15
    # The idle order: the higher JobPrio first, then submission order.
    assert broker.store.members(broker.keys.idle) == high + low
    assert broker.client.zcard(broker.keys.validating) == 0
    # A claim finds them through the autocluster index, the highest priority first.
    claimed = broker.claim({"Name": "slot1@here", "Cpus": 1, "Memory": 1024,
                            "Requirements": True, "Start": True})
    assert claimed is not None and f"{claimed['ClusterId']}.{claimed['ProcId']}" == high[0]


def test_the_pools_limits_keep_admitted_jobs_blocked_for_the_policy(
        tmp_path: Path, redis_client: redis.Redis, pool_name: str) -> None:
    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    signer = Signer((tmp_path / "k.pem").read_bytes(), "k.pem", pool_name)
    config = Config.load(environ={"_FETCHWORK_MAX_JOBS_PER_USER": "10"})
    broker = Broker(redis_client, pool_name, config)
    leader = FilterLeader(broker.store, load_settings(config), broker.default_lease_s,
                          signer=signer)
    rules = pool_rules(config, leader.summary())
    leader.rules = rules
    RulesPublisher(broker.store, rules, leader.summary(), "tests").publish()
    try:
        jobs = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
        settle(leader)
        assert [state(broker, job) for job in jobs] == ["BLOCKED", "BLOCKED"]
        assert broker.get(jobs[0])["BlockedReason"]
        assert broker.client.zcard(broker.keys.idle) == 0
    finally:
        leader.close()


def test_a_listed_job_that_no_longer_waits_leaves_the_validating_set(signing) -> None:
    broker, leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    # A hand-made entry: a job that is not there, and one that is already RUNNING.
    broker.client.zadd(broker.keys.validating, {"999.0": 0})
    broker.client.hset(broker.keys.job(jobs[1]), "FetchworkState", msgpack.packb("RUNNING"))
    settle(leader)
    assert state(broker, jobs[0]) == "IDLE" and state(broker, jobs[1]) == "RUNNING"
    assert broker.client.zcard(broker.keys.validating) == 0


def test_a_job_removed_while_it_waits_leaves_no_staged_digest(signing) -> None:
    broker, _leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    staged = broker.keys.staged(jobs[0].split(".")[0])
    assert broker.client.hlen(staged) == 2
    broker.remove(jobs)
    assert not broker.client.exists(staged)


def test_a_lone_job_is_admitted_by_the_pass_its_event_brings(signing) -> None:
    # No batch window: the VALIDATING event makes a pass due at once, and that one
    # pass admits the job alone.
    broker, leader, public = signing
    leader.run_due(100.0)
    (job,) = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    leader.on_events([("1-0", {"type": "submit", "job": job, "state": "VALIDATING"})])
    assert leader.due_in_s(100.0) == 0
    leader.run_due(100.0)
    assert state(broker, job) == "IDLE"
    assert signedjob.check(public, parse_ad(format_ad(handed_ad(broker, job))), broker.pool) is None


def test_jobs_named_by_events_are_admitted_with_what_else_waits(signing) -> None:
    # The events' jobs first, then the waiting set: a job named twice, one already
    # admitted and one removed are all harmless.
    broker, leader, _public = signing
    first = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    settle(leader)
    named = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    unnamed = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    (removed,) = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    broker.remove([removed])
    (late,) = broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    leader.on_events([(f"2-{n}", {"type": "submit", "job": job, "state": "VALIDATING"})
                      for n, job in enumerate([*named, named[0], *first, removed, late])])
    leader.run_due(100.0)
    assert {state(broker, job) for job in [*first, *named, *unnamed, late]} == {"IDLE"}
    assert state(broker, removed) == "REMOVED"
    assert broker.client.zcard(broker.keys.validating) == 0
    # The named ones went first, ahead of a job submitted before the last of them.
    admitted = [fields["job"] for _id, fields in broker.store.events("0-0", count=1000)
                if fields.get("type") == "admit"]
    assert admitted.index(late) < admitted.index(unnamed[0])


def test_a_batch_and_one_more_are_admitted_in_one_pass(signing) -> None:
    broker, leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true"}] * (BATCH + 1), owner="alice")
    settle(leader)
    assert {state(broker, job) for job in jobs} == {"IDLE"}


def test_only_new_waiting_jobs_wake_a_signing_pass(signing) -> None:
    _broker, leader, _public = signing
    leader.run_due(100.0)
    assert leader.due_in_s(100.1) > 0
    leader.on_events([("1-0", {"type": "exit", "job": "1.0", "state": "COMPLETED"}),
                      ("1-1", {"type": "claim", "job": "2.0", "state": "RUNNING"})])
    assert leader.due_in_s(100.1) > 0  # claims and exits need no admission
    leader.on_events([("1-2", {"type": "submit", "job": "3.0", "state": "VALIDATING"})])
    assert leader.due_in_s(100.1) == 0


def test_admission_keeps_each_jobs_order_from_its_cluster_and_sequence(signing) -> None:
    # admit_signed.lua derives a linked job's FetchworkOrder from its cluster's order and
    # the sequences it reads for the batch: the idle order is the one the ad gives, and
    # a job changed since staging (in the same cluster) is refused whole: no batch
    # place, no idle entry, no autocluster member.
    broker, leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true", "JobPrio": 5}] * 4, owner="alice")
    broker.client.hset(broker.keys.job(jobs[2]), "Arguments", msgpack.packb("changed"))
    settle(leader)
    assert [state(broker, job) for job in jobs] == ["IDLE", "IDLE", "FAILED", "IDLE"]
    for job in (jobs[0], jobs[1], jobs[3]):
        order = broker.get(job)["FetchworkOrder"]
        assert broker.client.zscore(broker.keys.idle, job) == order
        # The ad's order is its cluster's: admission wrote no FetchworkOrder of its own.
        assert not broker.client.hexists(broker.keys.job(job), "FetchworkOrder")
    orders = [broker.get(job)["FetchworkOrder"] for job in (jobs[0], jobs[1], jobs[3])]
    assert orders == sorted(orders) and len(set(orders)) == 3 and orders[0] < 0
    refused = broker.keys.job(jobs[2])
    assert broker.client.hget(refused, SIG_REF) is None
    assert broker.client.zscore(broker.keys.idle, jobs[2]) is None
    members = broker.client.zrange(broker.keys.ac_members, 0, -1)
    assert not any(member.endswith(f"|{jobs[2]}".encode()) for member in members)
    assert broker.client.zcard(broker.keys.validating) == 0


def test_a_signed_admission_writes_one_event_entry_for_its_batch(signing) -> None:
    broker, leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true", "Arguments": str(n)} for n in range(30)],
                         owner="alice")
    more = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    since = broker.last_event_id()
    settle(leader)
    admits = [{codec.text(k): codec.text(v) for k, v in fields.items()}
              for _id, fields in broker.client.xrange(broker.keys.events, f"({since}")]
    first, second = jobs[0].split(".")[0], more[0].split(".")[0]
    assert admits == [{"type": "admit", "jobs": f"{first}.0-29 {second}.0-1", "state": "IDLE",
                       "status": "1"}]
    events = broker.events(since, count=10)
    assert [(fields["type"], fields["job"], fields["state"]) for _id, fields in events] == [
        ("admit", job, "IDLE") for job in jobs + more]


def test_the_admission_leaves_alone_a_job_that_stopped_waiting_after_the_read(signing) -> None:
    broker, leader, _public = signing
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 4, owner="alice")
    # What the leader read had all four waiting; before its admission runs, one is
    # removed, and two are HELD, one of them still listed in the validating set.
    broker.remove([jobs[0]])
    for job in jobs[1:3]:
        broker.client.hset(broker.keys.job(job), "FetchworkState", msgpack.packb("HELD"))
    broker.client.zrem(broker.keys.validating, jobs[2])
    signed = leader.signer.sign_batch([signedjob.leaf_digest(b"%d" % n) for n in range(4)])
    pipe = broker.client.pipeline(transaction=False)
    calls.admit_signed(broker.store, pipe, jobs=[(job, 0, False, "") for job in jobs],
                       batch=signed.blob, blocked_reason="waiting")
    assert pipe.execute() == [2]
    assert state(broker, jobs[0]) == "REMOVED", "a removed job is not brought back"
    assert broker.client.zscore(broker.keys.queue, jobs[0]) is None
    assert [state(broker, job) for job in jobs[1:]] == ["IDLE", "HELD", "IDLE"]
    assert broker.client.hget(broker.keys.job(jobs[2]), SIG_REF) is None
    idle = {member.decode() for member in broker.client.zrange(broker.keys.idle, 0, -1)}
    assert idle == {jobs[1], jobs[3]}
    assert broker.client.zcard(broker.keys.validating) == 0
    admits = [fields["job"] for _id, fields in broker.events("0-0", count=100)
              if fields["type"] == "admit"]
    assert admits == [jobs[1], jobs[3]]


def test_a_jobs_own_values_decide_for_it_in_a_cluster_decided_once(signing) -> None:
    broker, leader, public = signing
    jobs = broker.submit([{"Cmd": "/bin/true", "RequestMemory": 100}] * 5, owner="alice")
    # Own values that are not signed (their staged digests still hold): a priority, an
    # attribute the autoclusters group by.
    for job, own in ((jobs[1], {"JobPrio": 7}), (jobs[2], {"RequestMemory": 900}),
                     (jobs[3], {"JobPrio": 2})):
        broker.client.hset(broker.keys.job(job), items=list(codec.fields_of(own)))
    settle(leader)
    assert {state(broker, job) for job in jobs} == {"IDLE"}
    assert broker.store.members(broker.keys.idle)[:2] == [jobs[1], jobs[3]]
    groups = [broker.get(job)["FetchworkAutocluster"] for job in jobs]
    assert groups[0] == groups[1] == groups[3] == groups[4] != groups[2]
    for job in jobs:
        assert signedjob.check(public, parse_ad(format_ad(handed_ad(broker, job))),
                               broker.pool) is None
