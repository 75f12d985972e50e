"""Resource sorting (MATCH_SORT_WINDOW) with real claims: a slot waiting for work
registers itself, and a claim by a lesser slot gives the job way to it."""

from __future__ import annotations

import threading
import time

import pytest

from fetchwork.broker.claim.sorting import SlotSorting, better_slots, rank
from fetchwork.broker.client import Broker
from fetchwork.config.ads import from_dict
from fetchwork.config.loader import Config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

SMALL = {"Name": "slot1@small", "Cpus": 4, "Memory": 1000, "Mips": 9000}
BIG = {"Name": "slot1@big", "Cpus": 4, "Memory": 8000, "Mips": 1000}
FAST = {"Name": "slot1@fast", "Cpus": 4, "Memory": 8000, "Mips": 5000}


def test_slots_sort_by_memory_then_mips():
    assert sorted([SMALL, BIG, FAST], key=rank, reverse=True) == [FAST, BIG, SMALL]
    registered = {"slot1@big": (2000.0, BIG), "slot1@fast": (500.0, FAST),
                  "slot1@small": (2000.0, SMALL)}
    assert better_slots("slot1@small", rank(SMALL), registered, 1000.0) == [BIG]
    assert better_slots("slot1@big", rank(BIG), registered, 100.0) == [FAST]


def broker_with(redis_client, pool_name, window_ms: int) -> Broker:
    return Broker(redis_client, pool_name,
                  Config.load(environ={}).with_values(MATCH_SORT_WINDOW=window_ms))


def test_a_better_slot_waiting_for_work_gets_the_job(redis_client, pool_name):
    broker = broker_with(redis_client, pool_name, 5000)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(broker.claim(BIG, wait_s=20)))
    waiter.start()
    wait_until(lambda: redis_client.hexists(broker.keys.sortslots, "slot1@big"), 10,
               what="the big slot registered")
    (job,) = broker.submit([{"Cmd": "/bin/true"}])
    assert broker.claim(SMALL) is None, "the small slot gave way"
    waiter.join(timeout=20)
    assert got and got[0] is not None and got[0]["RemoteHost"] == "slot1@big"
    assert broker.get(job)["RemoteHost"] == "slot1@big"
    assert not redis_client.hexists(broker.keys.sortslots, "slot1@big"), "gone once served"


def test_after_the_window_the_lesser_slot_takes_the_job(redis_client, pool_name):
    broker = broker_with(redis_client, pool_name, 400)
    # A better slot registered, but no claim of its is running.
    SlotSorting(broker.store, 400).register(from_dict(BIG), "slot1@big",
                                            time.monotonic() + 30)
    broker.submit([{"Cmd": "/bin/true"}])
    started = time.monotonic()
    ad = broker.claim(SMALL)
    assert ad is not None and ad["RemoteHost"] == "slot1@small"
    assert time.monotonic() - started >= 0.4


def test_a_job_the_better_slot_would_not_take_is_not_held(redis_client, pool_name):
    broker = broker_with(redis_client, pool_name, 5000)
    SlotSorting(broker.store, 5000).register(from_dict(BIG), "slot1@big",
                                             time.monotonic() + 30)
    broker.submit([{"Cmd": "/bin/true", "Requirements": {"$expr": 'TARGET.Name != "slot1@big"'}}])
    started = time.monotonic()
    assert broker.claim(SMALL) is not None
    assert time.monotonic() - started < 4


def test_with_the_window_0_no_slot_registers(redis_client, pool_name):
    broker = broker_with(redis_client, pool_name, 0)
    assert broker.claim(BIG, wait_s=0.3) is None
    assert not redis_client.exists(broker.keys.sortslots)
