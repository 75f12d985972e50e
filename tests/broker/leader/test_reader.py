"""The leader's one reader of the event stream on a real Redis: every duty that reads
events gets every batch, in order, once, from the point where the lead was taken;
nothing is read while this replica does not lead; a slow or failing duty holds no
other back; stopping ends and closes them all."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.leader import duty as duty_module
from fetchwork.broker.leader.reader import LeaderDuties
from fetchwork.broker.leader.service import BrokerService
from fetchwork.config.loader import Config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


class Recorder:
    """A duty that records what it is handed; no pass of its own unless `hold` is set,
    then every batch brings a pass that waits for `hold`."""

    def __init__(self, name: str, reads_events: bool = True, hold: threading.Event | None = None,
                 fail_batches: int = 0):
        self.name = name
        self.reads_events = reads_events
        self.hold = hold
        self.fail_batches = fail_batches
        self.leads: list[str] = []
        self.lost = 0
        self.ids: list[str] = []
        self.closed = 0
        self.due = False

    def on_lead(self, since: str) -> None:
        self.leads.append(since)

    def on_lose(self) -> None:
        self.lost += 1

    def on_events(self, events) -> None:
        if self.fail_batches:
            self.fail_batches -= 1
            raise RuntimeError("a batch this duty cannot take")
        self.ids += [entry for entry, _ in events]
        self.due = self.hold is not None

    def due_in_s(self, now_s: float) -> float:
        return 0.0 if self.due else float("inf")

    def run_due(self, now_s: float) -> None:
        assert self.hold is not None
        self.hold.wait(30)
        self.due = False

    def close(self) -> None:
        self.closed += 1




@pytest.fixture
def broker(redis_client, pool_name):
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    broker.submit([{"Cmd": "x"}] * 3)  # events from before any lead
    return broker


@pytest.fixture
def reads(broker, monkeypatch):
    """The XREADs of the store from the leader's threads: (thread, entries returned)."""
    calls: list[tuple[str, int]] = []
    real = broker.store.events

    def counted(last_id="$", block_ms=0, count=100):
        found = real(last_id, block_ms=block_ms, count=count)
        thread = threading.current_thread().name
        if thread.startswith("broker-"):
            calls.append((thread, len(found)))
        return found

    monkeypatch.setattr(broker.store, "events", counted)
    return calls


def stream_ids(broker: Broker, after: str) -> list[str]:
    return [entry for entry, _ in broker.events(after, count=100_000)]


def test_every_reading_duty_gets_every_event_after_the_lead_once(broker, reads):
    duties = [Recorder(f"r{n}") for n in range(5)] + [Recorder("timer", reads_events=False)]
    with LeaderDuties(broker.store, duties) as served:
        threading.Event().wait(0.3)
        assert reads == [], "a replica that does not lead reads nothing"
        assert all(duty.leads == [] for duty in duties)
        since = broker.last_event_id()
        served.set_leading(True)
        wait_until(lambda: all(duty.leads for duty in duties), 10, what="every duty told")
        assert all(duty.leads == [since] for duty in duties)
        for _ in range(4):
            broker.submit([{"Cmd": "x"}] * 50)
        expected = stream_ids(broker, since)
        assert len(expected) == 200
        wait_until(lambda: all(duty.ids == expected for duty in duties[:5]), 10,
                   what="every event at every duty that reads events")
    assert duties[-1].ids == []
    assert {thread for thread, _found in reads} == {"broker-events"}
    batches = [found for _thread, found in reads if found]
    assert sum(batches) == 200, "each event read once, whatever the number of duties"
    assert len(batches) <= 4


def test_events_gather_for_the_duties_that_let_them(broker, reads):
    paced = Recorder("paced")
    paced.events_batch_s = 0.4  # type: ignore[attr-defined]
    with LeaderDuties(broker.store, [paced]) as served:
        since = broker.last_event_id()
        served.set_leading(True)
        wait_until(lambda: paced.leads, 10, what="the duty told")
        ends_at = time.monotonic() + 1.2
        while time.monotonic() < ends_at:  # a transition every 10 ms
            broker.submit([{"Cmd": "x"}])
            time.sleep(0.01)
        expected = stream_ids(broker, since)
        wait_until(lambda: paced.ids == expected, 10, what="every event handed over")
    batches = [found for _thread, found in reads if found]
    # Some hundred transitions in 1.2 s, read in batches 0.4 s apart.
    assert len(expected) >= 20 and len(batches) <= 6, (len(expected), batches)


def test_a_duty_that_wants_each_batch_at_once_is_not_held_back(broker, reads):
    paced, eager = Recorder("paced"), Recorder("eager")
    paced.events_batch_s = 30.0  # type: ignore[attr-defined]
    with LeaderDuties(broker.store, [paced, eager]) as served:
        served.set_leading(True)
        wait_until(lambda: paced.leads and eager.leads, 10, what="the duties told")
        for _ in range(3):
            count = len(eager.ids) + 1
            broker.submit([{"Cmd": "x"}])
            # Well within the paced duty's 30 s (a loaded machine may take seconds).
            wait_until(lambda n=count: len(eager.ids) >= n, 10, what="the event at once")


def test_nothing_is_handed_over_while_the_lead_is_lost(broker, reads):
    duty = Recorder("one")
    with LeaderDuties(broker.store, [duty]) as served:
        served.set_leading(True)
        wait_until(lambda: duty.leads, 10)
        broker.submit([{"Cmd": "x"}])
        wait_until(lambda: len(duty.ids) == 1, 10)
        served.set_leading(False)
        wait_until(lambda: duty.lost == 1, 10, what="the duty told of the lost lead")
        broker.submit([{"Cmd": "x"}] * 5)
        threading.Event().wait(0.3)
        assert len(duty.ids) == 1
        since = broker.last_event_id()
        served.set_leading(True)
        wait_until(lambda: len(duty.leads) == 2, 10, what="the lead taken again")
        assert duty.leads[1] == since, "the events of the lead lost stay unseen"
        broker.submit([{"Cmd": "x"}] * 2)
        wait_until(lambda: len(duty.ids) == 3, 10)
        assert duty.ids[1:] == stream_ids(broker, since)


def test_a_slow_duty_holds_no_other_back(broker):
    hold = threading.Event()
    slow, quick = Recorder("slow", hold=hold), Recorder("quick")
    with LeaderDuties(broker.store, [slow, quick]) as served:
        served.set_leading(True)
        wait_until(lambda: quick.leads, 10)
        since = broker.last_event_id()
        broker.submit([{"Cmd": "x"}])
        wait_until(lambda: slow.ids, 10, what="the slow duty in its pass")
        for _ in range(3):
            broker.submit([{"Cmd": "x"}])
        wait_until(lambda: len(quick.ids) == 4, 10, what="the quick duty's events")
        assert len(slow.ids) == 1
        hold.set()
        wait_until(lambda: slow.ids == stream_ids(broker, since), 10,
                   what="the slow duty catching up after its pass")


def test_a_failing_duty_is_logged_and_goes_on(broker, monkeypatch, caplog):
    monkeypatch.setattr(duty_module, "RETRY_S", 0.05)
    failing, other = Recorder("failing", fail_batches=1), Recorder("other")
    with LeaderDuties(broker.store, [failing, other]) as served:
        served.set_leading(True)
        wait_until(lambda: failing.leads, 10)
        broker.submit([{"Cmd": "x"}])
        wait_until(lambda: "leader duty failing failed" in caplog.text, 10)
        broker.submit([{"Cmd": "x"}])
        wait_until(lambda: len(failing.ids) == 1 and len(other.ids) == 2, 10)


def test_stopping_ends_every_thread_and_closes_every_duty(broker):
    duties = [Recorder("one"), Recorder("two", reads_events=False)]
    served = LeaderDuties(broker.store, duties)
    served.start()
    served.set_leading(True)
    wait_until(lambda: all(duty.leads for duty in duties), 10)
    names = {thread.name for thread in threading.enumerate()}
    assert {"broker-events", "broker-one", "broker-two"} <= names
    started = time.monotonic()
    served.stop()
    assert time.monotonic() - started < 3
    assert not {"broker-events", "broker-one", "broker-two"} & {
        thread.name for thread in threading.enumerate()}
    assert [duty.closed for duty in duties] == [1, 1]


# -- in the broker service ---------------------------------------------------------------

def counting_reads(broker: Broker, monkeypatch) -> list[str]:
    """The threads that XREAD through `broker`'s store, one entry per call."""
    threads: list[str] = []
    real = broker.store.events

    def counted(last_id="$", block_ms=0, count=100):
        threads.append(threading.current_thread().name)
        return real(last_id, block_ms=block_ms, count=count)

    monkeypatch.setattr(broker.store, "events", counted)
    return threads


def test_a_service_reads_the_stream_once_for_all_its_duties_and_a_standby_not_at_all(
        redis_client, redis_url, pool_name, monkeypatch):
    config = Config.load(environ={}).with_values(MAX_IDLE_JOBS_PER_USER=100,
                                                 BROKER_LEADER_LEASE=3)
    leading = Broker(redis_client, pool_name, config)
    with redis.Redis.from_url(redis_url) as other_client:
        standing_by = Broker(other_client, pool_name, config)
        leader_reads = counting_reads(leading, monkeypatch)
        standby_reads = counting_reads(standing_by, monkeypatch)
        services = [BrokerService.from_config(leading, config.with_values(
                        BROKER_REPLICA_NAME="leader", BROKER_WRITE_USER_LOGS=True)),
                    BrokerService.from_config(standing_by, config.with_values(
                        BROKER_REPLICA_NAME="standby", BROKER_WRITE_USER_LOGS=True))]
        # Filters, dependencies, user logs, the policy, backfill, the periodic policy,
        # people's requests.
        assert len(services[0].duties()) == 7
        stop = threading.Event()
        threads = [threading.Thread(target=service.run, args=(stop,), daemon=True)
                   for service in services]
        threads[0].start()
        wait_until(lambda: services[0].is_leader, 30, what="the first replica leading")
        threads[1].start()
        try:
            for _ in range(5):
                leading.submit([{"Cmd": "x"}] * 20, owner="alice")
            wait_until(lambda: leading.query(constraint='FetchworkState == "IDLE"'), 30,
                       what="the leader's policy pass")
            threading.Event().wait(1.0)
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
    assert not services[1].is_leader
    assert standby_reads == []
    assert set(leader_reads) == {"broker-events"}
