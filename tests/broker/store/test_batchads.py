"""Batch reads of job ads, each cluster hash once (store/batchads.py), give what
read_ads.lua gives, names, values and order, for every shape a job can have."""

from __future__ import annotations

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.store import batchads, calls, codec
from fetchwork.config.loader import Config

AD = {"Cmd": "/bin/true", "Iwd": "/tmp", "Arguments": "a b", "MyShared": 7}


@pytest.fixture
def broker(redis_client, pool_name):
    config = Config.load(environ={}).with_values(JOB_DEFAULT_LEASE_DURATION=600)
    return Broker(redis_client, pool_name, config)


def by_script(broker: Broker, jobs: list[str]) -> list[dict]:
    return codec.decode_packed_hashes(calls.read_ads(broker.store, job_ids=jobs))


def by_reads(broker: Broker, jobs: list[str]) -> list[dict]:
    pipe = broker.client.pipeline(transaction=False)
    count = batchads.queue_reads(pipe, broker.store, jobs)
    replies = pipe.execute()
    assert count == len(replies)
    return [ad for ad, _own in batchads.split_ads_of(jobs, replies)]


def test_the_ads_read_are_read_ads_lua_s(broker):
    linked = broker.submit([AD] * 4, owner="alice")
    mixed = broker.submit([AD, {**AD, "Arguments": "other", "arguments": "x"}, AD,
                           {**AD, "JobPrio": 5}], owner="bob")
    [single] = broker.submit([{**AD, "JobPrio": -2}], owner="carol")
    # A job whose own hash overrides a shared attribute, one removed (its ad unlinked).
    fields = codec.fields_of({"Iwd": "/elsewhere", "Extra": [1, 2]})
    broker.client.hset(broker.keys.job(linked[1]), items=list(fields))
    broker.remove([mixed[2]])
    jobs = [*linked, *mixed, single, "999.0", f"{linked[0].split('.')[0]}.99"]
    read = by_reads(broker, jobs)
    expected = by_script(broker, jobs)
    assert read == expected
    for got, want in zip(read, expected, strict=True):
        assert list(got) == list(want)  # the same order too (signed texts depend on it)
    assert read[1]["Iwd"] == "/elsewhere" and read[1]["Extra"] == [1, 2]
    assert read[6]["Arguments"] == "a b" and "JobStatus" in read[6]
    assert read[0]["GlobalJobId"].endswith(f"#{linked[0]}#{read[0]['QDate']}")
    assert read[-1] == {} and read[-2] == {}


def test_an_empty_batch_reads_nothing(broker):
    pipe = broker.client.pipeline(transaction=False)
    assert batchads.queue_reads(pipe, broker.store, []) == 0
    assert batchads.split_ads_of([], pipe.execute()) == []


def test_split_ads_name_what_is_not_the_cluster_s(broker):
    from fetchwork.config.signedjob import SharedTexts, signed_text_of

    jobs = broker.submit([AD] * 5, owner="alice")
    # Own values for shared attributes, signed or not, and another spelling of one.
    for job, own in ((jobs[1], {"Iwd": "/elsewhere"}), (jobs[2], {"Arguments": "own"}),
                     (jobs[3], {"cmd": "/bin/x", "MyShared": 8})):
        broker.client.hset(broker.keys.job(job), items=list(codec.fields_of(own)))
    pipe = broker.client.pipeline(transaction=False)
    batchads.queue_reads(pipe, broker.store, jobs)
    split = batchads.split_ads_of(jobs, pipe.execute())
    assert [ad for ad, _own in split] == by_script(broker, jobs)
    linked = [(ad, own) for ad, own in split if own is not None]
    assert len(linked) == 5
    first, first_own = linked[0]
    for ad, own in linked:
        assert own is not None
        # What a job does not name as its own is its cluster's, the same for all.
        assert {name: value for name, value in ad.items() if name not in own} \
            == {name: value for name, value in first.items()
                if name not in own and name not in first_own and name in ad}
    texts = SharedTexts()
    for ad, own in split:
        text = texts.text(ad, own) if own is not None else signed_text_of(ad)
        assert text == signed_text_of(ad)
    assert batchads.split_ads_of([], []) == []
