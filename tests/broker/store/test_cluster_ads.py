"""Cluster ads on a real Redis: a submission's shared attributes are stored once,
in its cluster hash, and every read sees each job's whole ad (lua/jobad.lua)."""

from __future__ import annotations

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.store import calls, codec
from fetchwork.broker.store.states import idle_order
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config

SLOT = parse_ad('Name = "slot1@host"\nMemory = 2048\nSTART = true\n')
AD = {"Cmd": "/bin/true", "Iwd": "/tmp", "Arguments": "a b", "MyShared": 7}
PROCS = 5


@pytest.fixture
def broker(redis_client, pool_name):
    config = Config.load(environ={}).with_values(JOB_DEFAULT_LEASE_DURATION=600)
    return Broker(redis_client, pool_name, config)


def cluster_of(job: str) -> int:
    return int(job.split(".")[0])


def raw_hash(broker: Broker, key: str) -> dict[str, bytes]:
    return {name.decode(): value for name, value in broker.client.hgetall(key).items()}


def submit(broker: Broker, n: int = PROCS) -> list[str]:
    return broker.submit([AD] * n, owner="alice")


def claim(broker: Broker) -> tuple[str, str]:
    ad = broker.claim(SLOT)
    assert ad is not None
    return f"{ad['ClusterId']}.{ad['ProcId']}", ad["FetchworkClaim"]


def test_shared_attributes_are_stored_once(broker):
    jobs = submit(broker)
    shared = raw_hash(broker, broker.keys.cluster(cluster_of(jobs[0])))
    for name in ("Cmd", "Iwd", "Arguments", "MyShared", "Owner", "QDate", "JobStatus"):
        assert name in shared, name
    assert int(shared["#procs"]) == PROCS
    for job in jobs:
        own = raw_hash(broker, broker.keys.job(job))
        assert not {"Cmd", "Iwd", "Arguments", "MyShared", "Owner", "QDate"} & set(own), own
        assert set(own) == {"#c"}, own  # the link alone: the rest is shared or derived


def test_an_ad_read_back_is_the_ad_submitted(broker):
    jobs = submit(broker)
    for proc, job in enumerate(jobs):
        ad = broker.get(job)
        assert ad is not None
        assert ad["Cmd"] == "/bin/true" and ad["Iwd"] == "/tmp" and ad["Arguments"] == "a b"
        assert ad["MyShared"] == 7 and ad["Owner"] == "alice"
        assert ad["ProcId"] == proc and ad["ClusterId"] == cluster_of(job)
        assert ad["GlobalJobId"] == f"{broker.pool}#{job}#{ad['QDate']}"
        assert ad["FetchworkState"] == "IDLE" and ad["JobStatus"] == 1
        assert ad["FetchworkOrder"] == broker.client.zscore(broker.keys.queue, job)  # JobPrio 0
    rows = broker.job_fields(jobs, ["ProcId", "GlobalJobId", "Cmd", "Nothing"])
    assert [row["ProcId"] for row in rows] == list(range(PROCS))
    assert all(row["Cmd"] == "/bin/true" and row["Nothing"] is None for row in rows)
    assert rows[1]["GlobalJobId"] == broker.get(jobs[1])["GlobalJobId"]
    # Bookkeeping fields are never attributes.
    assert not [name for name in broker.job_data(jobs)[0] if name.startswith("#")]


def test_a_write_to_a_shared_attribute_stays_with_its_job(broker):
    jobs = submit(broker)
    job, token = claim(broker)
    assert broker.renew(job, token, {"MyShared": 8, "Arguments": "c"}) == "ok"
    assert broker.get(job)["MyShared"] == 8 and broker.get(job)["Arguments"] == "c"
    for other in jobs:
        if other != job:
            assert broker.get(other)["MyShared"] == 7
            assert broker.get(other)["Arguments"] == "a b"


def test_a_case_change_of_a_shared_name_leaves_one_field(broker):
    jobs = submit(broker)
    job, token = claim(broker)
    assert broker.renew(job, token, {"myshared": 9}) == "ok"
    data = broker.job_data([job])[0]
    assert [name for name in data if name.lower() == "myshared"] == ["myshared"]
    assert data["myshared"] == 9
    sibling = next(other for other in jobs if other != job)
    assert broker.job_data([sibling])[0]["MyShared"] == 7


def test_deleting_a_shared_attribute_leaves_it_undefined_there_only(broker):
    broker.client.delete(broker.keys.settings)  # no rules published: submissions wait
    jobs = submit(broker, 3)
    assert broker.get(jobs[0])["FetchworkState"] == "VALIDATING"
    calls.admit(broker.store, job_id=jobs[0], prio=0, deleted=["MyShared"], fields=[])
    assert "MyShared" not in broker.job_data([jobs[0]])[0]
    assert broker.get(jobs[0])["Cmd"] == "/bin/true"
    assert broker.get(jobs[0])["FetchworkState"] == "IDLE"
    for other in jobs[1:]:
        assert broker.get(other)["MyShared"] == 7
        assert broker.get(other)["FetchworkState"] == "VALIDATING"
    # The unlinked job holds its whole ad; its siblings still share theirs.
    cluster = broker.keys.cluster(cluster_of(jobs[0]))
    assert int(broker.client.hget(cluster, "#procs")) == 2
    own = raw_hash(broker, broker.keys.job(jobs[0]))
    assert "Cmd" in own and "#c" not in own and "MyShared" not in own


def test_history_holds_the_whole_ad_and_the_cluster_hash_goes_with_the_last(broker):
    jobs = submit(broker, 3)
    cluster = broker.keys.cluster(cluster_of(jobs[0]))
    job, token = claim(broker)
    assert broker.finish(job, token, "exit", {"ExitCode": 0})
    assert broker.client.exists(cluster)
    own = raw_hash(broker, broker.keys.job(job))
    assert "Cmd" in own and "ProcId" in own and "GlobalJobId" in own and "#c" not in own
    [done] = broker.history(f'GlobalJobId == "{broker.get(job)["GlobalJobId"]}"')
    assert done["Cmd"] == "/bin/true" and done["MyShared"] == 7
    assert done["JobStatus"] == 4 and done["ProcId"] == int(job.split(".")[1])
    assert done["FetchworkOrder"] == codec.unpack(own["FetchworkOrder"])
    broker.remove(jobs[1:])
    assert not broker.client.exists(cluster)
    for other in jobs[1:]:
        ad = broker.get(other)
        assert ad["JobStatus"] == 3 and ad["Arguments"] == "a b" and ad["MyShared"] == 7


def test_a_removed_job_is_gone_for_reads_while_siblings_remain(broker):
    jobs = submit(broker, 2)
    broker.remove([jobs[0]])
    assert broker.trim_history(0) == 1
    assert broker.get(jobs[0]) is None
    assert broker.job_fields([jobs[0]], ["Cmd"]) == []
    assert broker.get(jobs[1])["Cmd"] == "/bin/true"


def test_a_linked_jobs_order_follows_its_priority(broker):
    jobs = broker.submit([{**AD, "JobPrio": 3}] * 2, owner="alice")
    seq = broker.client.zscore(broker.keys.queue, jobs[1])
    assert broker.get(jobs[1])["FetchworkOrder"] == idle_order(3, int(seq))
    assert broker.client.zscore(broker.keys.idle, jobs[1]) == idle_order(3, int(seq))


def test_distinct_ads_in_one_cluster_keep_their_own_attributes(broker):
    other = {**AD, "Arguments": "other"}
    jobs = broker.submit([AD, AD, other, AD], owner="alice")
    assert [broker.get(job)["Arguments"] for job in jobs] == ["a b", "a b", "other", "a b"]
    cluster = broker.keys.cluster(cluster_of(jobs[0]))
    assert int(broker.client.hget(cluster, "#procs")) == 2  # the first run's jobs
    assert "Cmd" in raw_hash(broker, broker.keys.job(jobs[2]))


def test_a_single_job_keeps_its_whole_ad(broker):
    [job] = broker.submit([AD], owner="alice")
    assert not broker.client.exists(broker.keys.cluster(cluster_of(job)))
    own = raw_hash(broker, broker.keys.job(job))
    assert "Cmd" in own and "ProcId" in own and "FetchworkOrder" in own and "#c" not in own
    ad = broker.get(job)
    assert ad["Cmd"] == "/bin/true" and ad["GlobalJobId"] == f"{broker.pool}#{job}#{ad['QDate']}"
