"""Each of the leader's duties as the service drives it, without Redis: which ones
read events, and when each is next due (a store whose server is never reached)."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest
import redis

from fetchwork.broker.backfill.leader import BackfillLeader
from fetchwork.broker.backfill.plan import Plan
from fetchwork.broker.dependencies.resolver import DependencyResolver
from fetchwork.broker.filters.leader import POLL_S, FilterLeader
from fetchwork.broker.filters.runner import FilterSpec
from fetchwork.broker.filters.settings import FilterSettings
from fetchwork.broker.jobpolicy.periodic import PeriodicPolicy
from fetchwork.broker.scheduling.leaderpass import SchedulingRunner
from fetchwork.broker.scheduling.settings import scheduling_settings
from fetchwork.broker.store import Store
from fetchwork.config.loader import Config

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def store():
    client = redis.Redis(unix_socket_path="/nonexistent/redis.sock")
    yield Store(client, "p", 1000)
    client.close()


def event(entry: str, job: str = "1.0", state: str = "IDLE", kind: str = "submit"):
    return (entry, {"job": job, "state": state, "type": kind})


# -- filters ---------------------------------------------------------------------------------

def filter_settings(**chains) -> FilterSettings:
    return FilterSettings(default_hold_s=900, activation_interval_s=1,
                          activation_timeout_s=15, reservation_timeout_s=30, **chains)


def test_filters_read_events_only_with_a_filter_configured(store):
    spec = FilterSpec(name="GATE", kind="activation", value="/bin/true", args=(), timeout_s=1)
    plain = FilterLeader(store, filter_settings(), 60)
    gated = FilterLeader(store, filter_settings(activation={"GATE": spec},
                                                activation_chain=("GATE",)), 60)
    try:
        assert not plain.reads_events
        assert gated.reads_events
    finally:
        plain.close()
        gated.close()


def test_filters_pass_every_poll_and_after_events(store, monkeypatch):
    leader = FilterLeader(store, filter_settings(), 60)
    monkeypatch.setattr(leader, "run_pass", lambda: [])
    try:
        assert leader.due_in_s(100.0) == 0.0, "a pass on taking the lead"
        leader.run_due(100.0)
        assert leader.due_in_s(100.1) == pytest.approx(POLL_S - 0.1)
        assert leader.due_in_s(100.0 + POLL_S) == 0.0
        leader.on_events([event("5-0")])
        assert leader.due_in_s(100.1) == 0.0
        leader.run_due(100.1)
        leader.on_lead("9-0")
        assert leader.due_in_s(100.2) == 0.0
    finally:
        leader.close()


# -- dependencies ------------------------------------------------------------------------------

def test_dependencies_sweep_on_the_lead_then_every_interval(store, monkeypatch):
    resolver = DependencyResolver(store, sweep_interval_s=60)
    monkeypatch.setattr(resolver, "sweep", lambda: 0)
    assert resolver.due_in_s(100.0) == 0.0
    resolver.run_due(100.0)
    assert resolver.due_in_s(130.0) == 30.0
    resolver.run_due(130.0)  # not due: no sweep, the interval still counts from 100
    assert resolver.due_in_s(160.0) == 0.0
    resolver.run_due(160.0)
    resolver.on_lead("9-0")
    assert resolver.due_in_s(161.0) == 0.0


def test_dependencies_without_an_interval_sweep_only_on_the_lead(store, monkeypatch):
    resolver = DependencyResolver(store, sweep_interval_s=None)
    monkeypatch.setattr(resolver, "sweep", lambda: 0)
    resolver.run_due(100.0)
    assert resolver.due_in_s(10_000.0) == math.inf


def test_a_zero_sweep_interval_sweeps_at_most_once_a_second(store, monkeypatch):
    resolver = DependencyResolver(store, sweep_interval_s=0)
    monkeypatch.setattr(resolver, "sweep", lambda: 0)
    resolver.run_due(100.0)
    assert resolver.due_in_s(100.5) == pytest.approx(0.5)


# -- the scheduling policy ------------------------------------------------------------------------

@pytest.fixture
def runner(store):
    config = Config.load(environ={}).with_values(MAX_IDLE_JOBS_PER_USER=1, POLICY_INTERVAL=5)
    runner = SchedulingRunner.for_settings(store, scheduling_settings(config))
    assert runner is not None
    return runner


def passed(runner: SchedulingRunner, newest: str, at_s: float) -> None:
    """As if a pass began at `at_s` when `newest` was the newest event."""
    runner._changed, runner._last_event, runner._last_pass_s = False, newest, at_s


def test_policy_passes_every_interval_without_events(runner):
    assert runner.due_in_s(100.0) == 0.0
    passed(runner, "7-0", 100.0)
    assert runner.due_in_s(102.0) == 3.0
    assert runner.due_in_s(105.0) == 0.0


def test_policy_passes_after_an_event_newer_than_its_last_pass(runner):
    passed(runner, "7-3", 100.0)
    runner.on_events([event("7-2"), event("7-3")])
    assert runner.due_in_s(100.1) > 0, "the pass already saw these"
    runner.on_events([event("7-4")])
    assert runner.due_in_s(100.1) == 0.0
    passed(runner, "7-4", 101.0)
    runner.on_events([event("10-0")])
    assert runner.due_in_s(101.1) == 0.0, "ids compare as numbers, not text"


def test_policy_passes_on_taking_the_lead(runner):
    passed(runner, "7-0", 100.0)
    runner.on_lead("9-0")
    assert runner.due_in_s(100.1) == 0.0


# -- backfill ---------------------------------------------------------------------------------

@pytest.fixture
def backfill(store, monkeypatch):
    """A backfill leader that just took the lead and passed (its pass reads nothing)."""
    leader = BackfillLeader(store, 900, min_interval_s=0.5, interval_s=5.0)
    monkeypatch.setattr(leader, "_pass", lambda now=None, ask=False: Plan(None))
    leader.on_lead("5-0")
    assert leader.due_in_s(time.monotonic()) == 0.0, "a pass on taking the lead"
    leader.run_due(time.monotonic())
    return leader


def test_backfill_passes_every_interval_without_events(backfill):
    assert 4.0 < backfill.due_in_s(time.monotonic() + 0.5) <= 4.5


def test_backfill_passes_the_minimum_interval_after_the_last_on_an_event(backfill):
    backfill.on_events([event("6-0", job="3.0")])
    assert 0 < backfill.due_in_s(time.monotonic()) <= 0.5
    assert backfill.due_in_s(time.monotonic() + 0.5) == 0.0


def test_backfill_passes_at_once_on_an_event_about_the_reserved_job(backfill):
    backfill._reservation = SimpleNamespace(job_id="2.0")
    backfill.on_events([event("6-0", job="3.0", state="RUNNING", kind="claim")])
    assert backfill.due_in_s(time.monotonic()) > 0
    backfill.on_events([event("6-1", job="2.0", state="RUNNING", kind="claim")])
    assert backfill.due_in_s(time.monotonic()) == 0.0


def test_backfill_counts_no_start_of_a_former_lead(backfill):
    backfill._reservation = SimpleNamespace(job_id="2.0")
    backfill.on_events([event("6-0", job="3.0", state="RUNNING", kind="claim")])
    assert backfill._started == ["3.0"]
    backfill.on_lose()
    backfill.on_lead("9-0")
    assert backfill._started == [] and backfill._last_event == "9-0"


# -- the periodic job policy --------------------------------------------------------------------

def test_periodic_reads_no_events_and_passes_every_interval(store):
    policy = PeriodicPolicy(store, 60)
    assert not policy.reads_events
    assert policy.due_in_s(100.0) == 0.0
    policy._last_pass_s = 100.0
    assert policy.due_in_s(130.0) == 30.0
    assert policy.due_in_s(170.0) == 0.0
