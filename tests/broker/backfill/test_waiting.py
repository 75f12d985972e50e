"""The backfill pass's cheap question (backfill/waiting.py): whether any idle job
waits behind a busy pool, as a pure function; and, served, that a queue that
flows costs the leader one read of its idle head a pass and no reservation,
while a job that stops flowing is reserved for."""

from __future__ import annotations

import time

import pytest

from fetchwork.broker.backfill.leader import BackfillLeader
from fetchwork.broker.backfill.waiting import Look, left_behind, look, passed_over
from fetchwork.broker.client import Broker
from fetchwork.broker.leader.reader import LeaderDuties
from fetchwork.config.loader import Config
from fetchwork.config.protocol import ad_job_id
from tests.support.backfill import job, slot
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def test_a_new_head_does_not_wait_yet():
    current, waits = look(Look(), ["1.0", "2.0"], set(), set(), now=10.0, settle_s=0.1)
    assert not waits and current == Look(("1.0", "2.0"), 10.0)


def test_a_head_that_stays_the_head_for_the_settle_time_waits():
    first, _ = look(Look(), ["1.0"], set(), set(), now=10.0, settle_s=0.1)
    second, waits = look(first, ["1.0", "3.0"], set(), {"3.0"}, now=10.05, settle_s=0.1)
    assert not waits and second.head_since == 10.0
    _third, waits = look(second, ["1.0", "3.0"], set(), set(), now=10.15, settle_s=0.1)
    assert waits


def test_a_queue_that_flows_waits_for_nothing():
    first, _ = look(Look(), [f"{n}.0" for n in range(1, 9)], set(), set(), 10.0, 0.1)
    started = {"1.0", "2.0", "3.0"}
    second, waits = look(first, [f"{n}.0" for n in range(4, 12)], started, started,
                         10.2, 0.1)
    assert not waits and second.head == "4.0" and second.head_since == 10.2


def test_a_job_started_behind_one_no_transition_named_is_a_pass_over():
    assert passed_over(["1.0", "2.0", "3.0"], started={"2.0"}, named={"2.0"})
    assert not passed_over(["1.0", "2.0", "3.0"], started={"1.0", "2.0"},
                           named={"1.0", "2.0"})
    # Held or removed ahead of it: named, so not passed over.
    assert not passed_over(["1.0", "2.0"], started={"2.0"}, named={"1.0", "2.0"})


def test_a_pass_over_makes_a_job_wait_at_once():
    first, _ = look(Look(), ["1.0", "2.0", "3.0"], set(), set(), 10.0, 5.0)
    _second, waits = look(first, ["1.0", "3.0"], {"2.0"}, {"2.0"}, 10.1, 5.0)
    assert waits


def test_jobs_gone_from_behind_one_still_there_are_the_ones_to_read():
    assert left_behind(["1.0", "2.0", "3.0", "4.0"], ["3.0", "4.0", "5.0"]) == []
    assert left_behind(["1.0", "2.0", "3.0", "4.0"], ["1.0", "3.0", "5.0"]) == ["2.0", "4.0"]
    assert left_behind([], ["1.0"]) == [] and left_behind(["1.0"], []) == []


def test_an_empty_queue_waits_for_nothing():
    current, waits = look(Look(("1.0",), 1.0), [], {"1.0"}, {"1.0"}, 10.0, 0.0)
    assert not waits and current.head is None


def test_with_no_settle_time_every_head_waits():
    assert look(Look(), ["1.0"], set(), set(), 10.0, 0.0)[1]


def test_the_leader_settles_for_a_second_or_its_minimum_interval():
    assert BackfillLeader(None, 900, 0.1).settle_s == 1.0  # type: ignore[arg-type]
    assert BackfillLeader(None, 900, 3.0).settle_s == 3.0  # type: ignore[arg-type]


# -- served -------------------------------------------------------------------------------

SETTLE_S = 0.5


class Counting(BackfillLeader):
    """Notes when a pass read the slots (the expensive part of a pass)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.full_passes: list[float] = []

    def _slot_ads(self):
        self.full_passes.append(time.monotonic())
        return super()._slot_ads()

    def _waits(self):
        self.looks = [*getattr(self, "looks", []), time.monotonic()]
        return super()._waits()

    def passes_seen(self) -> list[float]:
        return list(getattr(self, "looks", []))


def _busy_big_machine(redis_client, pool_name) -> Broker:
    """Machine `big` (16 CPUs) runs a 16-CPU job; machine `small` has one free CPU."""
    config = Config.load(environ={}).with_values(BACKFILL_MIN_INTERVAL=0.1)
    broker = Broker(redis_client, pool_name, config)
    broker.publish_slot(slot("big", 16, 16), 60)
    broker.submit([job("busy", 16, 900)])
    assert broker.claim(slot("big", 16, 16)) is not None
    broker.publish_slot(slot("big", 0, 16), 60)
    broker.publish_slot(slot("small", 1, 1), 60)
    return broker


@pytest.fixture
def served(redis_client, pool_name):
    """Machine `big` (16 CPUs) runs a 16-CPU job; machine `small` has one free CPU."""
    broker = _busy_big_machine(redis_client, pool_name)
    leader = Counting(broker.store, 900, 0.1, interval_s=30.0, settle_s=SETTLE_S)
    with LeaderDuties(broker.store, [leader]) as duties:
        duties.set_leading(True)
        wait_until(lambda: leader.last_plan is not None, 10, what="the first pass")
        yield broker, leader


def test_a_queue_that_flows_costs_no_full_pass(served):
    broker, leader = served
    broker.submit([job(f"j{n}", 1, 60) for n in range(200)])
    for _ in range(200):  # each claim takes the head, as a busy pool's slots do
        claimed = broker.claim(slot("small", 1, 1))
        assert claimed is not None
        broker.finish(ad_job_id(claimed), claimed["FetchworkClaim"], "exit")
    wait_until(lambda: not broker.client.zcard(broker.keys.idle), 10, what="an empty queue")
    # A claim held up for longer than the settle time (a loaded machine) may let
    # one head be seen twice: a pass or two, not one per job or per batch.
    assert len(leader.full_passes) <= 2, leader.full_passes
    wait_until(lambda: broker.client.get(broker.keys.backfill) is None, 10,
               what="no reservation stored")


def test_a_job_no_claim_takes_is_reserved_for_once_it_settled(served):
    broker, leader = served
    submitted_at = time.monotonic()
    (head,) = broker.submit([job("head", 16, 3600)])
    # The pass stores the reservation, then records its plan: wait for both (the
    # leader's thread may be between the two when the key appears).
    plan = wait_until(lambda: broker.client.get(broker.keys.backfill) is not None
                      and (last := leader.last_plan) is not None
                      and last.reservation is not None and last, 30,
                      what="a reservation for the job no slot has room for")
    assert plan.reservation.job_id == head
    assert leader.full_passes[0] - submitted_at >= SETTLE_S * 0.9


@pytest.fixture
def unsettled(redis_client, pool_name, monkeypatch):
    """As `served`, with a settle time no test waits for (only a pass-over makes a job
    wait), and the events the leader's reader read counted."""
    broker = _busy_big_machine(redis_client, pool_name)
    reads: list[int] = []
    real = broker.store.events

    def counted(last_id="$", block_ms=0, count=100):
        found = real(last_id, block_ms=block_ms, count=count)
        reads.append(len(found))
        return found

    monkeypatch.setattr(broker.store, "events", counted)
    leader = Counting(broker.store, 900, 0.1, interval_s=30.0, settle_s=60.0)
    with LeaderDuties(broker.store, [leader], block_s=0.05) as duties:
        duties.set_leading(True)
        wait_until(lambda: leader.last_plan is not None, 10, what="the first pass")
        yield broker, leader, reads


def test_jobs_flowing_past_a_head_no_reservation_holds_are_read_from_no_event(unsettled):
    broker, leader, reads = unsettled
    assert leader.reads_events  # an empty queue: a new job's pass comes at once
    broker.submit([job(f"j{n}", 1, 60) for n in range(100)])
    wait_until(lambda: not leader.reads_events, 10, what="the head seen")
    read = sum(reads)
    for _ in range(100):
        claimed = broker.claim(slot("small", 1, 1))
        assert claimed is not None
        broker.finish(ad_job_id(claimed), claimed["FetchworkClaim"], "exit")
    wait_until(lambda: leader.reads_events, 10, what="the empty queue seen")
    # 200 transitions: none read (a batch read as the head was first seen may
    # hold a few).
    assert sum(reads) - read <= 20, reads
    assert leader.full_passes == []


def test_a_pass_over_seen_from_no_event_brings_the_reservation_at_once(unsettled):
    broker, leader, _reads = unsettled
    (head,) = broker.submit([job("head", 16, 3600)])
    broker.submit([job(f"j{n}", 1, 60) for n in range(5)])
    wait_until(lambda: not leader.reads_events and len(leader.passes_seen()) >= 2, 10,
               what="the head seen twice, reading no event")
    claimed = broker.claim(slot("small", 1, 1))  # passes the head over
    assert claimed is not None and ad_job_id(claimed) != head
    plan = wait_until(lambda: (last := leader.last_plan) is not None
                      and last.reservation is not None and last, 10,
                      what="the reservation a pass-over brings")
    assert plan.reservation.job_id == head
    assert leader.reads_events  # a reservation stands: its bypasses are counted
