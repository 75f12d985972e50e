"""The delivering thread of a pool on one machine (transfer/localdelivery.py) reads
the event stream a few times a second while events keep coming, not once an
event, and still sees every completion among them; a backlog is read through
without waiting. Real Redis, real thread; only the delivery itself is recorded."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping

import pytest
import redis

from fetchwork.broker.store import Store
from fetchwork.config.loader import Config
from fetchwork.transfer import localdelivery
from fetchwork.transfer.localdelivery import LocalDelivery
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


class RecordingDelivery(LocalDelivery):
    """Delivers nothing: notes which completed jobs it was given, and when."""

    def __init__(self, config: Config):
        super().__init__(config)
        self.given: dict[str, float] = {}

    def _deliver(self, store: Store, jobs: Mapping[str, object]) -> None:
        now = time.monotonic()
        for job in jobs:
            self.given.setdefault(job, now)


@pytest.fixture
def running(redis_url: str, pool_name: str, tmp_path) -> Iterator[RecordingDelivery]:
    config = Config.load(environ={"FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
                                  "FETCHWORK_CONFIG": os.devnull,
                                  "FETCHWORK_STATE_DIR": str(tmp_path)})
    deliverer = RecordingDelivery(config)
    thread = threading.Thread(target=deliverer.run, daemon=True)
    thread.start()
    yield deliverer
    deliverer.stopping.set()
    thread.join(10)
    assert not thread.is_alive()


def _xreads(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_xread")
    return int(stats["calls"]) if stats else 0


def _started(client: redis.Redis, store: Store, deliverer: RecordingDelivery) -> None:
    """Wait until the thread reads the stream. It starts from the stream's end as it
    finds it, so a completion written before that is never its: one more is written
    at each look until one is delivered."""
    written = []

    def delivered() -> bool:
        if any(job in deliverer.given for job in written):
            return True
        written.append(f"1.{len(written)}")
        client.xadd(store.keys.events, {"job": written[-1], "state": "COMPLETED"})
        return False

    wait_until(delivered, interval_s=0.1, what="a first completion delivered")


def test_a_busy_stream_is_read_a_few_times_a_second(redis_client, pool_name, running):
    store = Store(redis_client, pool_name, 100_000)
    _started(redis_client, store, running)
    before = _xreads(redis_client)
    started = time.monotonic()
    sent = []
    for index in range(400):  # one event every 2.5 ms or so, for a second or more
        job = f"2.{index}"
        redis_client.xadd(store.keys.events, {"job": job, "state": "RUNNING"})
        redis_client.xadd(store.keys.events, {"job": job, "state": "COMPLETED"})
        sent.append(job)
        time.sleep(0.0025)
    spent = time.monotonic() - started
    wait_until(lambda: running.given.keys() >= set(sent), what="every completion delivered")
    reads = _xreads(redis_client) - before
    # At most one read a READ_PACE_S while the events came, and a few after them
    # (the gathered jobs' delivery, the end); a read an event would be hundreds.
    allowed = spent / localdelivery.READ_PACE_S + 8
    assert reads <= allowed, f"{reads} reads of the stream in {spent:.2f}s"


def test_a_backlog_is_read_through_at_once(redis_client, pool_name, running, monkeypatch):
    # A pace far longer than the test waits: a backlog read paced would take 15 s.
    monkeypatch.setattr(localdelivery, "READ_PACE_S", 5.0)
    store = Store(redis_client, pool_name, 100_000)
    _started(redis_client, store, running)
    total = 3 * localdelivery.READ_COUNT + 7
    # All in one round trip: the thread finds them as a backlog (its first read of
    # them may still wait out the pace of its last read before).
    backlog = [f"3.{index}" for index in range(total)]
    pipe = redis_client.pipeline(transaction=False)
    for job in backlog:
        pipe.xadd(store.keys.events, {"job": job, "state": "COMPLETED"})
    pipe.execute()
    wait_until(lambda: running.given.keys() >= set(backlog), timeout_s=30,
               what="the backlog's completions delivered")
    # Four reads, none paced before the next: all delivered within one pace.
    times = [running.given[job] for job in backlog]
    assert max(times) - min(times) < 4.0
