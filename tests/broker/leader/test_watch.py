"""Duties woken by a change of a key on a real Redis: while the leader watches the key
the duty reads no event, a change brings its pass at once, and a leader that cannot
watch (no RESP3 push messages) hands the duty every event as before; a pool that only
signs its jobs admits them with no event read while its queue flows."""

from __future__ import annotations

import threading

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.reader import LeaderDuties
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.leader.watch import Watched
from fetchwork.config.loader import Config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


class KeyDuty:
    """A duty that would read events, or be woken by a change of `key`; counts both."""

    name = "keyed"
    reads_events = True

    def __init__(self, key: str):
        self.watch_keys = (key,)
        self.events: list[str] = []
        self.passes = 0
        self.due = True
        # The threads that ran each pass, a gate that holds a pass until opened, and
        # whether a pass fails.
        self.threads: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False
        self.more = 0

    def on_lead(self, since: str) -> None:
        self.due = True

    def on_lose(self) -> None:
        pass

    def on_events(self, events) -> None:
        self.events += [entry for entry, _ in events]
        self.due = True

    def due_in_s(self, now_s: float) -> float:
        return 0.0 if self.due else float("inf")

    def run_due(self, now_s: float) -> None:
        self.threads.append(threading.current_thread().name)
        self.gate.wait(30)
        if self.fail:
            raise RuntimeError("the pass broke")
        self.passes += 1
        self.due = self.more > 0  # work left for another pass at once
        self.more = max(0, self.more - 1)

    def close(self) -> None:
        pass


@pytest.fixture
def reads(monkeypatch):
    """The events the leader's reader thread read, by the store they came through."""
    calls: list[int] = []

    def counting(store):
        real = store.events

        def counted(last_id="$", block_ms=0, count=100):
            found = real(last_id, block_ms=block_ms, count=count)
            if threading.current_thread().name == "broker-events":
                calls.append(len(found))
            return found

        monkeypatch.setattr(store, "events", counted)

    return calls, counting


def test_a_watched_duty_reads_no_event_and_passes_on_each_change(redis_client, pool_name,
                                                                  reads):
    calls, counting = reads
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    counting(broker.store)
    key = broker.keys.validating
    duty = KeyDuty(key)
    with LeaderDuties(broker.store, [duty], block_s=0.05) as served:
        [wrapped] = served.duties
        assert isinstance(wrapped, Watched)
        served.set_leading(True)
        assert served.watch is not None
        wait_until(lambda: served.watch.working and duty.passes >= 1 and not wrapped.changed
                   and not duty.due, 10, what="the watch in place and the passes it brought")
        threading.Event().wait(0.2)  # an XREAD begun before the watch worked has ended
        passes, read = duty.passes, len(calls)
        redis_client.xadd(broker.keys.events, {"type": "claim", "job": "1.0"})
        redis_client.zadd(broker.keys.idle, {"1.0": 1})
        threading.Event().wait(0.3)
        assert duty.passes == passes, "a change of another key brought a pass"
        redis_client.zadd(key, {"2.0": 1})
        wait_until(lambda: duty.passes > passes, 5, what="the pass a change brings")
        assert sum(calls[read:]) == 0


def _watched(served: LeaderDuties, duty: KeyDuty) -> Watched:
    """The leader's watch in place, its first passes run and the duty idle again."""
    [wrapped] = served.duties
    assert isinstance(wrapped, Watched)
    served.set_leading(True)
    assert served.watch is not None
    wait_until(lambda: served.watch.working and duty.passes >= 1 and not wrapped.changed
               and not duty.due and served._inboxes[0].settled(), 10,
               what="the watch in place, its passes run, the duty idle")
    return wrapped


def test_a_change_while_the_duty_is_idle_is_passed_on_the_watch_thread(redis_client,
                                                                     pool_name):
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    duty = KeyDuty(broker.keys.validating)
    with LeaderDuties(broker.store, [duty], block_s=0.05) as served:
        _watched(served, duty)
        for number in range(3):
            passes = duty.passes
            redis_client.zadd(broker.keys.validating, {f"{number}.0": 1})
            wait_until(lambda before=passes: duty.passes > before, 5,
                       what="the pass a change brings")
            wait_until(served._inboxes[0].settled, 5, what="the duty idle again")
        assert duty.threads[-3:] == ["broker-watch"] * 3, duty.threads


def test_a_pass_on_the_watch_thread_that_leaves_work_has_the_duty_go_on(redis_client,
                                                                      pool_name):
    """A pass that leaves its duty due at once (a batch left to sign) is followed by
    the next ones on the duty's thread, with no further change of the key."""
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    duty = KeyDuty(broker.keys.validating)
    with LeaderDuties(broker.store, [duty], block_s=0.05) as served:
        _watched(served, duty)
        passes, ran = duty.passes, len(duty.threads)
        duty.more = 2
        redis_client.zadd(broker.keys.validating, {"1.0": 1})
        wait_until(lambda: duty.passes >= passes + 3, 5, what="the passes the work needs")
        assert duty.threads[ran] == "broker-watch", duty.threads
        assert "broker-keyed" in duty.threads[ran + 1:], duty.threads


def test_a_change_during_the_duty_threads_pass_brings_one_more_there(redis_client,
                                                                      pool_name):
    """The watch never waits for the duty's thread: a change that comes while that
    thread passes makes it pass again after, and the watch goes on reading."""
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    duty = KeyDuty(broker.keys.validating)
    with LeaderDuties(broker.store, [duty], block_s=0.05) as served:
        wrapped = _watched(served, duty)
        duty.gate.clear()
        served._inboxes[0].put([("1-0", {})])  # the duty's thread passes on an event
        wait_until(lambda: len(duty.threads) >= 2 and duty.threads[-1] == "broker-keyed",
                   5, what="the duty's thread held in its pass")
        held = len(duty.threads)
        seen: list[str] = []
        watch = served.watch
        assert watch is not None
        real_on_change = watch.on_change

        def on_change(key: str) -> None:
            real_on_change(key)
            seen.append(key)

        watch.on_change = on_change
        redis_client.zadd(broker.keys.validating, {"1.0": 1})
        wait_until(lambda: len(seen) == 1, 5, what="the change seen by the watch")
        redis_client.zadd(broker.keys.validating, {"2.0": 1})
        wait_until(lambda: len(seen) == 2, 5, what="the watch reading on meanwhile")
        assert wrapped.changed
        assert len(duty.threads) == held, "a pass began while the duty's thread was in one"
        passes = duty.passes
        duty.gate.set()
        wait_until(lambda: duty.passes >= passes + 2 and not wrapped.changed, 5,
                   what="the held pass and the one the changes brought")
        assert duty.threads[held] == "broker-keyed", duty.threads


def test_a_pass_that_fails_on_the_watch_thread_is_tried_again_by_the_duty(
        redis_client, pool_name, monkeypatch, caplog):
    from fetchwork.broker.leader import watch as watch_module

    monkeypatch.setattr(watch_module, "RETRY_S", 1.0)
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    duty = KeyDuty(broker.keys.validating)
    with LeaderDuties(broker.store, [duty], block_s=0.05) as served:
        wrapped = _watched(served, duty)
        duty.fail = True
        failed_at = len(duty.threads)
        redis_client.zadd(broker.keys.validating, {"1.0": 1})
        wait_until(lambda: len(duty.threads) > failed_at, 5, what="the pass that fails")
        assert duty.threads[failed_at] == "broker-watch"
        wait_until(lambda: "the pass broke" in caplog.text, 5, what="the failure logged")
        # Another change while the retry waits is not passed on the watch's thread.
        redis_client.zadd(broker.keys.validating, {"2.0": 1})
        threading.Event().wait(0.1)
        assert duty.threads[failed_at + 1:] == [], duty.threads
        passes = duty.passes
        duty.fail = False
        wait_until(lambda: duty.passes > passes and not wrapped.changed, 5,
                   what="the pass tried again")
        assert duty.threads[failed_at + 1] == "broker-keyed", duty.threads
        # The retry done, a change is passed on the watch's thread again.
        wait_until(served._inboxes[0].settled, 5, what="the duty idle again")
        passes = duty.passes
        redis_client.zadd(broker.keys.validating, {"3.0": 1})
        wait_until(lambda: duty.passes > passes, 5, what="the pass a change brings")
        assert duty.threads[-1] == "broker-watch", duty.threads


def test_a_leader_that_cannot_watch_hands_the_duty_every_event(redis_url, pool_name, reads):
    calls, counting = reads
    client = redis.Redis.from_url(redis_url, protocol=2)  # no push messages
    try:
        broker = Broker(client, pool_name, Config.load(environ={}))
        counting(broker.store)
        _served_by_events(broker)
    finally:
        client.close()


def _served_by_events(broker: Broker) -> None:
    """A leader whose watch does not work hands its duty the events of new jobs."""
    duty = KeyDuty(broker.keys.validating)
    with LeaderDuties(broker.store, [duty]) as served:
        served.set_leading(True)
        wait_until(lambda: duty.passes >= 1, 10, what="the first pass")
        broker.submit([{"Cmd": "x"}] * 3)
        wait_until(lambda: len(duty.events) >= 3, 10, what="the events of the jobs")
        assert served.watch is not None and not served.watch.working


def test_a_watch_that_breaks_hands_the_events_over_and_comes_back(redis_client, pool_name):
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    duty = KeyDuty(broker.keys.validating)
    with LeaderDuties(broker.store, [duty]) as served:
        served.set_leading(True)
        watch = served.watch
        assert watch is not None
        wait_until(lambda: watch.working, 10, what="the watch in place")
        # Cut the watch's connection as a lost network would.
        redis_client.client_kill_filter(_id=str(watch.client_id))
        wait_until(lambda: not watch.working, 10, what="the watch lost")

        def submitted_and_read() -> bool:
            # The reader hands the duty the events after the newest one when it turns
            # (the pass the turn brings covers what came before): a job submitted just
            # before that is not among them, so each look submits one more.
            broker.submit([{"Cmd": "x"}])
            return bool(duty.events)

        wait_until(submitted_and_read, 10, interval_s=0.2,
                   what="the events read while it is lost")
        wait_until(lambda: watch.working, 10, what="the watch in place again")
        passes = duty.passes
        redis_client.zadd(broker.keys.validating, {"9.0": 1})
        wait_until(lambda: duty.passes > passes, 5, what="the pass a change brings")


def test_a_pool_that_signs_admits_its_jobs_with_no_event_read(signing_service, reads,
                                                             redis_client):
    broker, service = signing_service
    service.backfill = None  # the filters' reads alone
    calls, counting = reads
    counting(broker.store)
    names = {duty.name: duty for duty in service.duties()}
    assert getattr(names["filters"], "watch_keys", None) == (broker.keys.validating,)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: service.is_leader, 10, what="the lead")
        wait_until(lambda: _tracking(redis_client), 10, what="the leader's key watch")
        # A read of the events begun before the watch worked ends with the first job's.
        [first] = broker.submit([{"Cmd": "x"}])
        wait_until(lambda: states(broker, [first]) == ["IDLE"], 10, what="a first job admitted")
        jobs = broker.submit([{"Cmd": "x"}] * 600)
        wait_until(lambda: all(state == "IDLE" for state in states(broker, jobs)), 20,
                   what="every job admitted")
        [one] = broker.submit([{"Cmd": "x"}])
        wait_until(lambda: states(broker, [one]) == ["IDLE"], 5, what="a lone job admitted")
    finally:
        stop.set()
        thread.join(10)
    # An XREAD begun as the lead was taken, before the watch worked, may read a little.
    assert sum(calls) <= 10, calls


def _tracking(client: redis.Redis) -> bool:
    """Whether a connection of the server has key tracking on (`t` in CLIENT LIST)."""
    return any("t" in str(entry.get("flags", "")) for entry in client.client_list())


def states(broker: Broker, jobs: list[str]) -> list[str]:
    return [str(data.get("FetchworkState")) for _job, data in broker.store.hashes(jobs)]


@pytest.fixture
def signing_service(tmp_path, redis_client, pool_name):
    from fetchwork.broker.trust.signer import ensure_key_pair

    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    config = Config.load(environ={"_FETCHWORK_JOB_SIGNING_KEY": str(tmp_path / "k.pem"),
                                  "_FETCHWORK_JOB_SIGNING_PUBLIC_KEY": str(tmp_path / "p.pem"),
                                  "_FETCHWORK_BROKER_LEADER_LEASE": "3"})
    broker = Broker(redis_client, pool_name, config)
    service = BrokerService.from_config(broker, config)
    assert service.filters is not None and service.filters.signer is not None
    return broker, service


def test_a_leader_refused_the_watch_hands_the_duty_every_event(redis_client, redis_url,
                                                                pool_name):
    user = f"nowatch-{pool_name}"
    redis_client.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["*"],
                             commands=["+@all", "-client"])
    client = redis.Redis.from_url(redis_url, username=user, password="pw")
    try:
        _served_by_events(Broker(client, pool_name, Config.load(environ={})))
    finally:
        client.close()
        redis_client.acl_deluser(user)
