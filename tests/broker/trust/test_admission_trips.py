"""read_waiting.lua on a real Redis: the head of the validating set with what signed
admission reads of its jobs (their split ads, queue sequences and staged digests), as
the batch reads of store/batchads.py and filters/signing.py give them."""

from __future__ import annotations

from typing import Any

import pytest

from fetchwork.broker.filters.leader import BATCH
from fetchwork.broker.filters.signing import queue_staged, read_staged, staged_of
from fetchwork.broker.store import Store, batchads, calls, codec

pytestmark = pytest.mark.timeout(60)


def test_read_waiting_gives_what_the_batch_reads_give(signing_leader) -> None:
    broker, _leader, _pem = signing_leader
    store = broker.store
    linked = broker.submit([{"Cmd": "/bin/true", "Shared": 1}] * 3, owner="alice")
    other = broker.submit([{"Cmd": "/bin/echo", "Arguments": "b"}], owner="bob")
    # An own value over the cluster's, a job with no staged digest, a hand-made entry.
    broker.client.hset(broker.keys.job(linked[1]), items=list(codec.fields_of({"Shared": 2})))
    broker.client.hdel(broker.keys.staged(other[0].split(".")[0]), "0")
    broker.client.zadd(broker.keys.validating, {"999.0": 10**9})
    waiting = [*linked, *other, "999.0"]

    def by_script(count: int) -> tuple[list[str], list[Any], list[Any]]:
        pipe = broker.client.pipeline(transaction=False)
        calls.read_waiting(store, pipe, count=count)
        (reply,) = pipe.execute()
        ids, reads = Store.ids(reply[0]), 1 + batchads.READS
        return ids, reply[1:reads], reply[reads:]

    ids, reads, staged = by_script(BATCH)
    assert ids == waiting
    pipe = broker.client.pipeline(transaction=False)
    count = batchads.queue_reads(pipe, store, ids)
    queue_staged(pipe, store, ids)
    replies = pipe.execute()
    assert batchads.split_ads_of(ids, reads) == batchads.split_ads_of(ids, replies[:count])
    assert staged_of(ids, staged) == read_staged(store, ids) == staged_of(ids, replies[count:])
    assert staged_of(ids, staged)[3:] == [None, None] and all(staged_of(ids, staged)[:3])
    assert batchads.split_ads_of(ids, reads)[1][0]["Shared"] == 2
    # At most `count` ids, from the head; none when nothing waits.
    assert by_script(2)[0] == linked[:2]
    broker.client.delete(broker.keys.validating)
    assert by_script(BATCH) == ([], [], [])
