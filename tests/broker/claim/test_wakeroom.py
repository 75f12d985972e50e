"""The waiting claims of one process: one look per new job, and no job left behind."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from fetchwork.broker.claim import claimer as claimer_module
from fetchwork.broker.claim.wakeroom import WakeRoom
from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from tests.support.waiting import wait_until

FAR = 1e12  # a deadline that never comes (monotonic seconds)


# -- the room's decisions, without Redis ------------------------------------------------

def _second_claim(room: WakeRoom) -> tuple[threading.Thread, list[int | None]]:
    """A second claim woken by job 5.0's IDLE event, on its own thread: the thread and
    the list its answer will be put in."""
    answers: list[int | None] = []
    other = threading.Thread(
        target=lambda: answers.append(room.woken([("1-0", "5.0")], True, FAR)))
    other.start()
    return other, answers


def test_a_lone_job_is_looked_for_once_and_the_other_claim_waits_again():
    room = WakeRoom()
    first = room.woken([("1-0", "5.0")], complete=True, deadline=FAR)
    assert first is not None
    other, answers = _second_claim(room)
    # The second claim waits for the first look (it is parked on the room's condition),
    # and has not answered.
    wait_until(lambda: room._cond._waiters, 10,  # type: ignore[attr-defined]
               what="the second claim waiting")
    assert answers == []
    room.looked(first, "5.0")
    other.join(timeout=10)
    assert answers == [None]


@pytest.mark.parametrize("claimed", [None, "4.0"], ids=["nothing", "another job"])
def test_a_look_that_did_not_take_the_named_job_lets_the_next_claim_look(claimed):
    room = WakeRoom()
    first = room.woken([("1-0", "5.0")], complete=True, deadline=FAR)
    assert first is not None
    other, answers = _second_claim(room)
    room.looked(first, claimed)
    other.join(timeout=10)
    assert answers and answers[0] is not None


def test_two_new_jobs_let_two_claims_look_at_once():
    room = WakeRoom()
    named = [("1-0", "5.0"), ("1-0", "5.1")]
    assert room.woken(named, True, FAR) is not None
    assert room.woken(named, True, FAR) is not None  # no wait: two jobs, one look under way


def test_a_requeued_job_is_looked_for_again():
    room = WakeRoom()
    look = room.woken([("1-0", "5.0")], True, FAR)
    assert look is not None
    room.looked(look, "5.0")
    assert room.woken([("1-0", "5.0")], True, FAR) is None
    assert room.woken([("2-0", "5.0")], True, FAR) is not None  # IDLE again, a new event


def test_a_job_requeued_during_the_look_stays_open():
    room = WakeRoom()
    look = room.woken([("1-0", "5.0")], True, FAR)
    assert look is not None
    # Another claim reads the job's next IDLE event before the look that took it ends.
    second = room.woken([("2-0", "5.0")], True, FAR)
    assert second is not None
    room.looked(look, "5.0")
    assert room.woken([("2-0", "5.0")], True, FAR) is not None


def test_a_full_read_always_looks():
    room = WakeRoom()
    look = room.woken([("1-0", "5.0")], True, FAR)
    assert look is not None
    room.looked(look, "5.0")
    assert room.woken([("1-0", "5.0")], complete=False, deadline=FAR) is not None


def test_a_long_look_does_not_hold_the_others_back():
    room = WakeRoom(look_wait_s=0.1)
    assert room.woken([("1-0", "5.0")], True, FAR) is not None  # never ends
    started = time.monotonic()
    assert room.woken([("1-0", "5.0")], True, FAR) is not None
    assert time.monotonic() - started >= 0.09


def test_a_claim_at_its_deadline_looks_rather_than_wait():
    room = WakeRoom()
    assert room.woken([("1-0", "5.0")], True, FAR) is not None
    started = time.monotonic()
    assert room.woken([("1-0", "5.0")], True, time.monotonic() + 0.05) is not None
    assert time.monotonic() - started < 5


# -- claims of one client on a real queue ------------------------------------------------

class Counted:
    """Counts the claimer's quiet steps (each a claim_quiet.lua call), per slot name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()
        real = claimer_module.Claimer._quiet

        def quiet(claimer, slot, name):
            with self.lock:
                self.calls[name] = self.calls.get(name, 0) + 1
            return real(claimer, slot, name)

        monkeypatch.setattr(claimer_module.Claimer, "_quiet", quiet)


def start_claim(broker: Broker, slot: dict, wait_s: float) -> tuple[threading.Thread, dict]:
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["ad"] = broker.claim(slot, wait_s=wait_s)
        except redis.RedisError as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, name=slot["Name"], daemon=True)
    thread.start()
    return thread, result


def job_of(ad) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


@pytest.fixture
def waiting(redis_url, pool_name):
    """One client (a startd's connection) and a way to see how many of its claims
    block in XREAD."""
    name = f"room-{pool_name}"
    client = redis.Redis.from_url(redis_url, client_name=name)
    broker = Broker(client, pool_name, Config.load(environ={}))

    def blocked(count: int) -> bool:
        watcher = redis.Redis.from_url(redis_url)
        try:
            return sum(1 for entry in watcher.client_list()
                       if entry.get("name") == name and "b" in entry.get("flags", "")) == count
        finally:
            watcher.close()

    yield broker, blocked
    client.close()


def test_one_job_for_two_waiting_slots_is_looked_for_once(waiting, redis_client, pool_name,
                                                         monkeypatch):
    broker, blocked = waiting
    counted = Counted(monkeypatch)
    submitter = Broker(redis_client, pool_name, Config.load(environ={}))
    slots = [{"Name": f"slot{n}@room", "Memory": 1024} for n in (1, 2)]
    claims = [start_claim(broker, slot, wait_s=60) for slot in slots]
    wait_until(lambda: blocked(2), timeout_s=30, what="both claims blocked in XREAD")
    before = dict(counted.calls)
    (job,) = submitter.submit([{"Cmd": "x"}])
    wait_until(lambda: any(not thread.is_alive() for thread, _result in claims),
               timeout_s=30, what="a claim took the job")
    winner = next(n for n, (thread, _r) in enumerate(claims) if not thread.is_alive())
    loser = 1 - winner
    assert job_of(claims[winner][1]["ad"]) == job
    wait_until(lambda: blocked(1), timeout_s=30, what="the other claim waiting again")
    assert counted.calls.get(slots[loser]["Name"], 0) == before.get(slots[loser]["Name"], 0)
    # The claim that waited again takes the next job.
    (second,) = submitter.submit([{"Cmd": "x"}])
    claims[loser][0].join(timeout=30)
    assert job_of(claims[loser][1]["ad"]) == second


def test_a_job_only_the_second_slot_runs_reaches_it(waiting, redis_client, pool_name):
    broker, blocked = waiting
    submitter = Broker(redis_client, pool_name, Config.load(environ={}))
    small = start_claim(broker, {"Name": "slot1@room", "Memory": 512}, wait_s=60)
    wait_until(lambda: blocked(1), timeout_s=30, what="the small slot blocked in XREAD")
    large = start_claim(broker, {"Name": "slot2@room", "Memory": 4096}, wait_s=60)
    wait_until(lambda: blocked(2), timeout_s=30, what="both claims blocked in XREAD")
    started = time.monotonic()
    (job,) = submitter.submit([{"Cmd": "x", "Requirements": {"$expr": "TARGET.Memory > 1000"}}])
    large[0].join(timeout=30)
    assert job_of(large[1]["ad"]) == job
    assert time.monotonic() - started < 10  # at its event, not at a deadline
    assert small[0].is_alive()
    (other,) = submitter.submit([{"Cmd": "x"}])
    small[0].join(timeout=30)
    assert job_of(small[1]["ad"]) == other


def test_two_jobs_for_two_waiting_slots_both_start(waiting, redis_client, pool_name):
    broker, blocked = waiting
    submitter = Broker(redis_client, pool_name, Config.load(environ={}))
    claims = [start_claim(broker, {"Name": f"slot{n}@room", "Memory": 1024}, wait_s=60)
              for n in (1, 2)]
    wait_until(lambda: blocked(2), timeout_s=30, what="both claims blocked in XREAD")
    jobs = submitter.submit([{"Cmd": "x"}, {"Cmd": "x"}])
    for thread, _result in claims:
        thread.join(timeout=30)
    assert sorted(job_of(result["ad"]) for _thread, result in claims) == sorted(jobs)


def test_a_claim_that_fails_while_woken_leaves_the_job_to_the_other(waiting, redis_client,
                                                                   pool_name, monkeypatch):
    # The first slot's claim is woken first and fails in its look (its connection
    # breaks); the second, woken by the same event, then looks and takes the job.
    broker, blocked = waiting
    submitter = Broker(redis_client, pool_name, Config.load(environ={}))
    real_find, real_woken = claimer_module.Claimer._find, WakeRoom.woken
    failed = threading.Event()

    def find(claimer, slot, name):
        if name == "slot1@room" and claimer.room._looking:
            failed.set()
            raise redis.ConnectionError("the connection broke during the look")
        return real_find(claimer, slot, name)

    def woken(room, named, complete, deadline):
        if threading.current_thread().name == "slot2@room":
            failed.wait(30)  # the first slot is woken first
        return real_woken(room, named, complete, deadline)

    monkeypatch.setattr(claimer_module.Claimer, "_find", find)
    monkeypatch.setattr(WakeRoom, "woken", woken)
    first = start_claim(broker, {"Name": "slot1@room", "Memory": 1024}, wait_s=60)
    second = start_claim(broker, {"Name": "slot2@room", "Memory": 1024}, wait_s=60)
    wait_until(lambda: blocked(2), timeout_s=30, what="both claims blocked in XREAD")
    (job,) = submitter.submit([{"Cmd": "x"}])
    first[0].join(timeout=30)
    second[0].join(timeout=30)
    assert failed.is_set()
    assert isinstance(first[1]["error"], redis.ConnectionError)
    assert job_of(second[1]["ad"]) == job
