"""The quiet claim and the exit: one Lua call each in a pool without activation, and with
no backfill reservation that holds the claimed job back."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fetchwork.broker.backfill.plan import Reservation, Resources, to_record
from fetchwork.broker.claim import index
from fetchwork.broker.client import Broker
from fetchwork.broker.store import codec
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.config.protocol import JobStatus

pytestmark = pytest.mark.timeout(60)

NEEDS_MEMORY = {"$expr": "TARGET.Memory >= MY.RequestMemory"}
SMALL = {"Cmd": "/bin/true", "RequestMemory": 10, "Requirements": NEEDS_MEMORY}
BIG = {**SMALL, "RequestMemory": 10**6}
SLOT = parse_ad('Name = "slot1@quiet"\nMemory = 1000\nSTART = true\n')


@pytest.fixture
def broker(redis_client: Any, pool_name: str) -> Broker:
    config = Config.load(environ={}).with_values(JOB_DEFAULT_LEASE_DURATION=600)
    return Broker(redis_client, pool_name, config)


@pytest.fixture
def round_trips(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What the broker sends to Redis from now on (one send per command or pipeline)."""
    sent = [0]
    connection_class = broker.store.client.connection_pool.connection_class
    send = connection_class.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        send(self, command, check_health)

    monkeypatch.setattr(connection_class, "send_packed_command", counted)
    return sent


def jid(ad: Any) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


def test_a_claim_and_an_exit_are_one_round_trip_each(broker: Broker,
                                                      round_trips: list[int]) -> None:
    broker.submit([BIG] * 50)
    jobs = broker.submit([SMALL] * 3)
    # The first claim of this slot ad judges the autoclusters; the first calls load
    # the scripts.
    first = broker.claim(SLOT)
    assert first is not None and jid(first) == jobs[0]
    assert broker.finish(jobs[0], first["FetchworkClaim"], "exit")
    round_trips[0] = 0
    ad = broker.claim(SLOT)
    assert ad is not None and jid(ad) == jobs[1]
    assert round_trips[0] == 1
    assert broker.finish(jid(ad), ad["FetchworkClaim"], "exit")
    assert round_trips[0] == 2
    assert broker.get(jid(ad))["JobStatus"] == JobStatus.COMPLETED


def test_autoclusters_that_appear_later_are_judged_in_priority_order(broker: Broker) -> None:
    (low,) = broker.submit([SMALL])
    assert jid(broker.claim(SLOT)) == low
    broker.submit([{**BIG, "JobPrio": 9}])
    (high,) = broker.submit([{**SMALL, "RequestMemory": 20, "JobPrio": 5}])
    (later,) = broker.submit([SMALL])
    assert [jid(broker.claim(SLOT)) for _ in range(2)] == [high, later]
    assert broker.claim(SLOT) is None


def test_an_exit_policy_still_decides_after_the_one_call(broker: Broker,
                                                         round_trips: list[int]) -> None:
    (held,) = broker.submit([{**SMALL, "OnExitHold": {"$expr": "ExitCode =!= 0"}}])
    (plain,) = broker.submit([{**SMALL, "OnExitRemove": True}])
    ads = [broker.claim(SLOT), broker.claim(SLOT)]
    assert [jid(ad) for ad in ads] == [held, plain]
    (warm,) = broker.submit([SMALL])
    assert broker.finish(warm, broker.claim(SLOT)["FetchworkClaim"], "exit")
    round_trips[0] = 0
    assert broker.finish(plain, ads[1]["FetchworkClaim"], "exit", {"ExitCode": 3})
    assert round_trips[0] == 1, "OnExitRemove = true is the default: no policy to judge"
    assert broker.finish(held, ads[0]["FetchworkClaim"], "exit", {"ExitCode": 3})
    assert broker.get(held)["JobStatus"] == JobStatus.HELD
    assert broker.get(plain)["JobStatus"] == JobStatus.COMPLETED


def reserve(broker: Broker, job_id: str) -> None:
    """Store a backfill reservation of `job_id` as the leader does: another machine,
    from an hour on."""
    order = broker.store.client.zscore(broker.keys.idle, job_id)
    now = time.time()
    one = Resources(1, 1, 1)
    reservation = Reservation(job_id, order, "elsewhere", now + 3600, one, one, one, now)
    broker.store.client.set(broker.keys.backfill, codec.pack(to_record(reservation)))


def test_a_reservation_of_the_head_job_leaves_its_claim_one_round_trip(
        broker: Broker, round_trips: list[int]) -> None:
    jobs = broker.submit([SMALL] * 3)
    assert jid(broker.claim(SLOT)) == jobs[0]  # judges the autoclusters, loads the scripts
    reserve(broker, jobs[1])
    round_trips[0] = 0
    assert jid(broker.claim(SLOT)) == jobs[1]
    assert round_trips[0] == 1


def test_a_reservation_whose_job_is_no_longer_idle_holds_nothing_back(
        broker: Broker, round_trips: list[int]) -> None:
    jobs = broker.submit([SMALL] * 3)
    assert jid(broker.claim(SLOT)) == jobs[0]
    reserve(broker, jobs[1])
    broker.remove([jobs[1]])
    round_trips[0] = 0
    assert jid(broker.claim(SLOT)) == jobs[2]
    assert round_trips[0] == 1


def test_a_job_after_the_reserved_one_is_left_to_the_full_claim(
        broker: Broker, round_trips: list[int]) -> None:
    (warm,) = broker.submit([SMALL])
    assert jid(broker.claim(SLOT)) == warm
    (big,) = broker.submit([BIG])  # this slot cannot take it: another machine will
    (small,) = broker.submit([SMALL])
    reserve(broker, big)
    round_trips[0] = 0
    # The full claim's backfill check decides: the reservation is on another machine.
    assert jid(broker.claim(SLOT)) == small
    assert round_trips[0] > 1


def test_with_backfill_off_no_job_after_the_reserved_one_is_claimed(
        redis_client: Any, pool_name: str) -> None:
    config = Config.load(environ={}).with_values(BACKFILL=False)
    strict = Broker(redis_client, pool_name, config)
    (big,) = strict.submit([BIG])
    (small,) = strict.submit([SMALL])
    reserve(strict, big)
    assert strict.claim(SLOT) is None
    assert strict.get(small)["JobStatus"] == JobStatus.IDLE


def test_an_unreadable_reservation_is_left_to_the_full_claim(
        broker: Broker, round_trips: list[int]) -> None:
    jobs = broker.submit([SMALL] * 2)
    assert jid(broker.claim(SLOT)) == jobs[0]
    broker.store.client.set(broker.keys.backfill, b"not msgpack")
    round_trips[0] = 0
    assert jid(broker.claim(SLOT)) == jobs[1]
    assert round_trips[0] > 1


def test_a_finish_with_a_lost_claim_changes_nothing(broker: Broker) -> None:
    (job,) = broker.submit([SMALL])
    assert broker.claim(SLOT) is not None
    assert not broker.finish(job, "not-the-token", "exit")
    assert broker.get(job)["JobStatus"] == JobStatus.RUNNING


def test_the_quiet_step_uses_the_verdicts_the_full_claim_judged(
        broker: Broker, round_trips: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    judged: list[Any] = []
    verdict = index._verdict

    def counting(rep: Any, slot: Any, reads: Any) -> Any:
        judged.append(rep)
        return verdict(rep, slot, reads)

    monkeypatch.setattr(index, "_verdict", counting)
    jobs = broker.submit([SMALL] * 2)
    broker.store.client.set(broker.keys.backfill, b"not msgpack")
    assert jid(broker.claim(SLOT)) == jobs[0]  # the full claim judges the autocluster
    assert len(judged) == 1
    broker.store.client.delete(broker.keys.backfill)
    round_trips[0] = 0
    assert jid(broker.claim(SLOT)) == jobs[1]
    assert round_trips[0] == 1 and len(judged) == 1, "one cache of verdicts for both steps"


def test_a_policy_exit_is_judged_after_one_refused_call(broker: Broker,
                                                        round_trips: list[int]) -> None:
    (held,) = broker.submit([{**SMALL, "OnExitHold": True}])
    token = broker.claim(SLOT)["FetchworkClaim"]
    round_trips[0] = 0
    assert broker.finish(held, token, "exit", {"ExitCode": 0})
    # finish.lua refuses, the ad is read once, policy_exit.lua holds the job.
    assert round_trips[0] == 3
    assert broker.get(held)["JobStatus"] == JobStatus.HELD
