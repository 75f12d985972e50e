"""A waiting claim reads a submission's event entry as one entry, not one event a job.

A slot's fetch that finds no work waits on the event stream. A submission of
many jobs writes one entry naming them all; expanded, it would be a dict a job,
made at once in every waiting slot's fetch, and a startd's Python heap keeps
the room such a peak took (its resident memory rose by some 5 MB at each new
largest submission of 10,000 jobs).
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config

pytestmark = pytest.mark.timeout(120)

JOBS = 10_000
JOB = {"Cmd": "/bin/true", "RequestMemory": 10}


@pytest.fixture
def broker(redis_client: Any, pool_name: str) -> Broker:
    return Broker(redis_client, pool_name, Config.load(environ={}))


def test_a_waiting_claim_wakes_on_a_large_submission_without_a_dict_a_job(
        broker: Broker) -> None:
    before = broker.store.last_event_id()
    broker.submit([JOB] * JOBS)
    newest = broker.store.last_event_id()
    entries = broker.store.event_entries(before, count=JOBS)
    assert 0 < len(entries) < JOBS // 100  # the submission's jobs are named in a few entries
    assert len(broker.store.events(before, count=JOBS)) == JOBS  # one event a job, as before

    tracemalloc.start()
    try:
        woken = broker._claimer._wait_for_idle(before, time.monotonic() + 30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert woken is not None
    woken_at, look = woken
    assert woken_at == newest  # woken by the idle jobs, read on to the newest entry
    assert look is not None  # a batch's entry: the claim looks, whatever the room knows
    # Expanded, the 10,000 events took some 4 MB; the entries take a few KB.
    assert peak < 256 * 1024, f"{peak} bytes at the peak of the wait"
