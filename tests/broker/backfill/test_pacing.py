"""How often the leader's backfill pass runs: at once after a quiet spell's
first transition, at most every BACKFILL_MIN_INTERVAL under a stream of them
(each counted by the next pass), at least every POLICY_INTERVAL."""

from __future__ import annotations

import time

import pytest

from fetchwork.broker.backfill.leader import BackfillLeader, next_pass_at
from fetchwork.broker.client import Broker
from fetchwork.broker.leader.reader import LeaderDuties
from fetchwork.config.loader import Config
from fetchwork.config.protocol import ad_job_id
from tests.support.backfill import job, slot
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def test_without_events_the_next_pass_comes_after_the_interval():
    assert next_pass_at(100.0, 5.0, 0.1, pending=False) == 105.0


def test_an_event_brings_the_pass_to_the_minimum_interval_after_the_last():
    assert next_pass_at(100.0, 5.0, 0.1, pending=True) == pytest.approx(100.1)


def test_a_minimum_longer_than_the_interval_does_not_delay_the_periodic_pass():
    assert next_pass_at(100.0, 5.0, 10.0, pending=True) == 105.0


def test_with_no_minimum_an_event_makes_the_pass_due_at_once():
    assert next_pass_at(100.0, 5.0, 0.0, pending=True) == 100.0


class CountingLeader(BackfillLeader):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passes: list[float] = []

    def run_due(self, now_s):
        result = super().run_due(now_s)
        self.passes.append(time.monotonic())
        return result


MIN_INTERVAL_S = 0.5


def quiet(leader: CountingLeader) -> None:
    """Until no pass has run for longer than the minimum interval."""
    def quiet_now() -> bool:
        return bool(leader.passes) and time.monotonic() - leader.passes[-1] > MIN_INTERVAL_S * 1.2
    wait_until(quiet_now, 10, what="a quiet spell after the last pass")


@pytest.fixture
def served(redis_client, pool_name):
    config = Config.load(environ={}).with_values(BACKFILL_MIN_INTERVAL=MIN_INTERVAL_S)
    broker = Broker(redis_client, pool_name, config)
    broker.publish_slot(slot("big", 16, 16), 60)
    broker.submit([job("busy", 16, 900)])  # the head then waits behind it
    assert broker.claim(slot("big", 16, 16)) is not None
    broker.publish_slot(slot("big", 0, 16), 60)
    broker.publish_slot(slot("small", 1, 1), 60)
    (head,) = broker.submit([job("head", 16, 3600)])
    leader = CountingLeader(broker.store, 900, MIN_INTERVAL_S, interval_s=30.0,
                            settle_s=MIN_INTERVAL_S)
    with LeaderDuties(broker.store, [leader]) as served:
        served.set_leading(True)
        # The head is reserved for once it has been the head for the settle time.
        wait_until(lambda: leader.last_plan is not None and leader.last_plan.reservation
                   is not None, 10, what="the reservation of the head")
        yield broker, leader, head


def test_a_stream_of_starts_is_counted_by_passes_the_minimum_interval_apart(served):
    broker, leader, head = served
    lower = broker.submit([job(f"small{n}", 1, 60) for n in range(40)])
    quiet(leader)
    first = len(leader.passes)
    started = 0
    ends_at = time.monotonic() + 3 * MIN_INTERVAL_S
    while time.monotonic() < ends_at and started < len(lower):
        claimed = broker.claim(slot("small", 1, 1))
        assert claimed is not None
        started += 1
        broker.finish(ad_job_id(claimed), claimed["FetchworkClaim"], "exit")
    wait_until(lambda: broker.get(head).get("BypassCount", 0) == started, 10,
               what=f"BypassCount {started}")
    passes = leader.passes[first - 1:]
    gaps = [later - earlier for earlier, later in zip(passes, passes[1:], strict=False)]
    # Some 2 * started transitions, yet only a few passes, none sooner than the minimum.
    assert started >= 10 and len(passes) - 1 <= 6, (started, len(passes) - 1)
    assert min(gaps) >= MIN_INTERVAL_S * 0.9, gaps


def test_the_first_transition_after_a_quiet_spell_is_passed_at_once(served):
    broker, leader, head = served
    quiet(leader)
    before = len(leader.passes)
    submitted_at = time.monotonic()
    broker.submit([job("late", 1, 60)])
    wait_until(lambda: len(leader.passes) > before, 10, what="a pass after the submit")
    assert leader.passes[before] - submitted_at < MIN_INTERVAL_S * 0.8


def test_an_event_about_the_reserved_job_is_passed_at_once(served):
    broker, leader, head = served
    quiet(leader)
    before = len(leader.passes)
    broker.submit([job("other", 1, 60)])  # passed at once: the minimum then runs
    wait_until(lambda: len(leader.passes) > before, 10, what="a pass after the submit")
    plan = leader.last_plan
    assert plan is not None and plan.reservation is not None
    assert plan.reservation.job_id == head
    broker.remove([head])
    wait_until(lambda: len(leader.passes) > before + 1, 10, what="a pass after the removal")
    assert leader.passes[before + 1] - leader.passes[before] < MIN_INTERVAL_S * 0.8
    assert leader.last_plan is not None and leader.last_plan.reservation is None
