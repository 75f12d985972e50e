"""Signed admission's round trips on a real Redis: a pass of a leader whose admission
is only signing reads the head of the validating set with its jobs' ads and staged
digests in its first round trip (read_waiting.lua), so a waiting job is admitted with
the pass's read and the admission as the only round trips, and what the admission
did before holds (jobs gone in between, more than a batch, a server that lost its
scripts). The leader's client is a real one whose connections note what each send
to the server carried."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.filters.leader import BATCH, FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.filters.signing import queue_staged, read_staged, staged_of
from fetchwork.broker.leader.publish import RulesPublisher, pool_rules
from fetchwork.broker.store import Store, batchads, calls, codec, scripts
from fetchwork.broker.trust.signer import Signer, ensure_key_pair
from fetchwork.config import signedjob
from fetchwork.config.ads import format_ad, parse_ad
from fetchwork.config.loader import Config
from tests.support.sigbatches import SIG_REF, handed_ad, settle

pytestmark = pytest.mark.timeout(60)

_SCRIPT_NAMES = {scripts.sha(name): name
                 for name in scripts.TRANSITIONS + scripts.STANDALONE}


# What a connection sends when it is made, and a script's load.
SETTING_UP = frozenset(("HELLO", "CLIENT", "SCRIPT"))


def command_names(packed: bytes) -> list[str]:
    """The commands in one send of RESP requests (several for a pipeline), by name; a
    script called by SHA by its script's name."""
    names, pos = [], 0
    while pos < len(packed):
        end = packed.index(b"\r\n", pos)
        count, pos = int(packed[pos + 1:end]), end + 2
        words = []
        for _ in range(count):
            end = packed.index(b"\r\n", pos)
            size = int(packed[pos + 1:end])
            words.append(packed[end + 2:end + 2 + size])
            pos = end + 2 + size + 2
        name = words[0].decode().upper()
        if name == "EVALSHA":
            name = _SCRIPT_NAMES.get(words[1].decode(), name)
        names.append(name)
    return names


class Trips:
    """What a client's round trips carried: per send to the server, its commands'
    names. `before[name]` runs (once) just before the send that carries script `name`."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.before: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()

    def note(self, command: Any) -> None:
        packed = command if isinstance(command, bytes | str) else b"".join(
            bytes(part) for part in command)
        names = command_names(packed.encode() if isinstance(packed, str) else packed)
        with self._lock:
            self.sent.append(names)
            steps = [self.before.pop(name) for name in names if name in self.before]
        for step in steps:
            step()

    def take(self) -> list[list[str]]:
        with self._lock:
            sent, self.sent = self.sent, []
        return sent


def noting_client(url: str, trips: Trips) -> redis.Redis:
    """A client of the server at `url` whose connections note each send in `trips`."""
    pool = redis.ConnectionPool.from_url(url)
    base: Any = pool.connection_class

    class Noting(base):  # type: ignore[misc, valid-type]
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            trips.note(command)
            super().send_packed_command(command, check_health)

    pool.connection_class = Noting
    return redis.Redis(connection_pool=pool)


@dataclass
class Pool:
    broker: Broker  # the submitting side, on a client of its own
    leader: FilterLeader  # signs, on the noting client
    trips: Trips
    public: Any


@pytest.fixture
def pool(tmp_path: Path, redis_client: redis.Redis, redis_url: str, pool_name: str):
    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    signer = Signer((tmp_path / "k.pem").read_bytes(), "k.pem", pool_name)
    config = Config.load(environ={})
    broker = Broker(redis_client, pool_name, config)
    trips = Trips()
    client = noting_client(redis_url, trips)
    store = Broker(client, pool_name, config).store
    leader = FilterLeader(store, load_settings(config), broker.default_lease_s, signer=signer)
    RulesPublisher(broker.store, pool_rules(config, leader.summary()), leader.summary(),
                   "tests").publish()
    # A first job admitted: the leader's scripts are loaded and its connection made.
    broker.submit([{"Cmd": "/bin/true"}], owner="alice")
    settle(leader)
    trips.take()
    yield Pool(broker, leader, trips, signedjob.read_public_key(
        (tmp_path / "p.pem").read_bytes(), "p"))
    leader.close()
    client.close()


def state(broker: Broker, job: str) -> str:
    return str(broker.get(job)["FetchworkState"])


def signed(pool: Pool, job: str) -> bool:
    ad = parse_ad(format_ad(handed_ad(pool.broker, job)))
    return signedjob.check(pool.public, ad, pool.broker.pool) is None


def test_a_waiting_job_is_admitted_in_the_pass_s_read_and_the_admission(pool: Pool) -> None:
    broker = pool.broker
    (job,) = broker.submit([{"Cmd": "/bin/true", "Arguments": "x"}], owner="alice")
    settle(pool.leader)
    sent = pool.trips.take()
    assert len(sent) == 2, sent
    read, admission = sent
    assert read[0] == "read_waiting" and "read_ads" not in read
    assert "admit_signed" in admission and "read_ads" not in admission
    assert state(broker, job) == "IDLE" and signed(pool, job)
    assert broker.client.zcard(broker.keys.validating) == 0
    assert not broker.client.exists(broker.keys.staged(job.split(".")[0]))


def test_an_empty_waiting_set_costs_the_pass_one_round_trip(pool: Pool) -> None:
    settle(pool.leader)
    sent = pool.trips.take()
    assert len(sent) == 1 and "read_waiting" in sent[0], sent


def test_jobs_that_stop_waiting_between_the_read_and_the_admission(pool: Pool) -> None:
    broker = pool.broker
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 4, owner="alice")

    def meanwhile() -> None:  # what the pass read had all four waiting
        broker.remove([jobs[0]])
        broker.client.hset(broker.keys.job(jobs[1]), "FetchworkState",
                           msgpack.packb("RUNNING"))

    pool.trips.before["admit_signed"] = meanwhile
    settle(pool.leader)
    assert "admit_signed" not in pool.trips.before, "the admission ran after the change"
    assert [state(broker, job) for job in jobs] == ["REMOVED", "RUNNING", "IDLE", "IDLE"]
    assert broker.client.hget(broker.keys.job(jobs[1]), SIG_REF) is None
    assert signed(pool, jobs[2]) and signed(pool, jobs[3])
    assert broker.client.zcard(broker.keys.validating) == 0
    assert len(pool.trips.take()) == 2


def test_more_than_a_batch_is_read_ahead_and_admitted_in_one_pass(pool: Pool) -> None:
    broker = pool.broker
    jobs = broker.submit([{"Cmd": "/bin/true", "Arguments": str(n)} for n in range(BATCH + 1)],
                         owner="alice")
    settle(pool.leader)
    # The reading thread's new connection and its first load of read_ads.lua aside:
    # the pass's read (the first batch's ads with it), the ids after the first batch,
    # their ads (read on the other thread), and an admission per batch.
    sent = [trip for trip in pool.trips.take() if not set(trip) <= SETTING_UP]
    assert len(sent) == 5, sent
    assert "read_waiting" in sent[0]
    assert sum(trip.count("read_ads") for trip in sent) == 1
    assert sum(trip.count("admit_signed") for trip in sent) == 2
    assert {state(broker, job) for job in jobs} == {"IDLE"}
    assert signed(pool, jobs[0]) and signed(pool, jobs[-1])


def test_a_server_that_lost_its_scripts_before_the_read(pool: Pool) -> None:
    broker = pool.broker
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    broker.client.script_flush()  # as a restarted server would have
    settle(pool.leader)
    assert {state(broker, job) for job in jobs} == {"IDLE"}
    assert all(signed(pool, job) for job in jobs)
    # The read answered NOSCRIPT, and was run again once its scripts were loaded.
    reads = [trip for trip in pool.trips.take() if "read_waiting" in trip]
    assert len(reads) == 2, reads


def test_a_server_that_lost_its_scripts_before_the_admission(pool: Pool) -> None:
    broker = pool.broker
    jobs = broker.submit([{"Cmd": "/bin/true"}] * 2, owner="alice")
    pool.trips.before["admit_signed"] = broker.client.script_flush
    settle(pool.leader)
    assert "admit_signed" not in pool.trips.before
    assert {state(broker, job) for job in jobs} == {"IDLE"}
    assert all(signed(pool, job) for job in jobs)
    assert broker.client.zcard(broker.keys.validating) == 0


def test_a_pass_that_does_not_sign_reads_the_waiting_ids_alone(
        redis_url: str, pool_name: str) -> None:
    trips = Trips()
    client = noting_client(redis_url, trips)
    config = Config.load(environ={})
    broker = Broker(client, pool_name, config)
    leader = FilterLeader(broker.store, load_settings(config), broker.default_lease_s)
    try:
        settle(leader)
        sent = trips.take()
        assert sent and sent[-1][0] == "ZRANGE" and "read_waiting" not in sent[-1], sent
    finally:
        leader.close()
        client.close()


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
