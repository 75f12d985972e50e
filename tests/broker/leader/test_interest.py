"""Duties that read events only while the pool uses their feature, on a real Redis:
a plain pool (no dependencies, no user logs) is never read by the leader; a
dependency or a user log brings its duty in within a probe, handed over as on
taking the lead, and the duty then acts as before."""

from __future__ import annotations

import threading

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.interest import UserLogQuestion, WhenInUse
from fetchwork.broker.leader.reader import LeaderDuties
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.userlog.writer import UserLogWriter
from fetchwork.config.loader import Config
from tests.broker.dependencies.test_dependencies import run_job, state
from tests.broker.leader.test_reader import Recorder
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker(redis_client, pool_name):
    return Broker(redis_client, pool_name, Config.load(environ={}))


@pytest.fixture
def reads(broker, monkeypatch):
    calls: list[int] = []
    real = broker.store.events

    def counted(last_id="$", block_ms=0, count=100):
        found = real(last_id, block_ms=block_ms, count=count)
        if threading.current_thread().name == "broker-events":
            calls.append(len(found))
        return found

    monkeypatch.setattr(broker.store, "events", counted)
    return calls


def test_a_duty_not_in_use_reads_nothing_and_the_reader_reads_nothing(broker, reads):
    in_use = threading.Event()
    duty = Recorder("gated")
    gated = WhenInUse(duty, in_use.is_set, probe_s=0.05)
    with LeaderDuties(broker.store, [gated]) as served:
        served.set_leading(True)
        broker.submit([{"Cmd": "x"}] * 20)
        threading.Event().wait(0.5)
        assert reads == [] and duty.ids == [] and duty.leads == []
        in_use.set()
        wait_until(lambda: duty.leads, 10, what="the duty handed over once in use")
        since = duty.leads[0]
        assert since == broker.last_event_id()
        broker.submit([{"Cmd": "x"}] * 3)
        wait_until(lambda: len(duty.ids) == 3, 10, what="the events after the hand-over")
        in_use.clear()
        wait_until(lambda: not gated.reads_events, 10, what="the duty to stop reading")
        count = len(reads)
        threading.Event().wait(0.2)
        broker.submit([{"Cmd": "x"}] * 3)
        threading.Event().wait(0.5)
        assert len(duty.ids) == 3 and len(reads) <= count + 1


def test_a_plain_pool_leader_reads_no_event(broker, reads):
    service = BrokerService(broker, reaper_interval_s=0.2, leader_lease_s=3.0)
    names = {duty.name: duty for duty in service.duties()}
    assert all(isinstance(names[name], WhenInUse) for name in ("dependencies", "userlog")
               if name in names)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: service.is_leader, 10, what="the lead")
        broker.submit([{"Cmd": "x"}] * 50)
        threading.Event().wait(1.0)
    finally:
        stop.set()
        thread.join(10)
    # Only the backfill pass (on by default, not gated) reads events here.
    assert sum(reads) <= 50


def test_a_job_waiting_on_another_brings_the_resolver_in(broker):
    service = BrokerService(broker, reaper_interval_s=0.2, leader_lease_s=3.0)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: service.is_leader, 10, what="the lead")
        [parent] = broker.submit([{"Cmd": "x"}])
        [child] = broker.submit([{"Cmd": "x", "Depends": parent}])
        run_job(broker, parent)
        wait_until(lambda: state(broker, child) == "IDLE", 10,
                   what="the waiting job released once its dependency finished")
    finally:
        stop.set()
        thread.join(10)


def test_the_user_log_position_follows_the_newest_event_at_most_every_skip(broker):
    assert broker.store.lead("tests", 30_000)  # the leader alone moves the position
    writer = UserLogWriter(broker.store, "tests")
    question = UserLogQuestion(broker.store, writer, skip_s=60.0)
    broker.submit([{"Cmd": "x"}] * 3)
    assert not question.in_use()
    question.idle()
    first = broker.last_event_id()
    assert writer.position() == first
    broker.submit([{"Cmd": "x"}] * 3)
    assert not question.in_use()
    question.idle()
    assert writer.position() == first, "moved again within the skip time"
    question.skip_s = 0.0
    assert not question.in_use()
    question.idle()
    assert writer.position() == broker.last_event_id() != first
    broker.client.set(broker.keys.userlog_used, 1)
    assert question.in_use()
