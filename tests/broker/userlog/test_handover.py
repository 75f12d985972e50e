"""The user log writer served by the leader's one reader, on a real Redis: it catches
up from its stored position to where the shared reads begin, and neither loses nor
repeats an event across a change of leader: handed over by hand, with replicas that
resign and restart while jobs run, and with a leader killed (SIGKILL)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import htcondor2
import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.userlog.writer import UserLogWriter
from fetchwork.config.loader import Config
from tests.broker.leader.test_service import command_env
from tests.support.poolprocs import Daemon
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

T = htcondor2.JobEventType
SLOT = {"Name": "slot1@node", "Memory": 1}
LIFE = [T.SUBMIT, T.EXECUTE, T.JOB_TERMINATED]


@pytest.fixture
def broker(redis_client, pool_name):
    return Broker(redis_client, pool_name, Config.load(environ={}))


def run_job(broker: Broker, log: Path) -> str:
    """Submit a job logging to `log`, claim it and let it exit: three log events."""
    (job,) = broker.submit([{"Cmd": "x", "UserLog": str(log)}])
    ad = broker.claim(SLOT)
    assert ad is not None and f"{ad['ClusterId']}.{ad['ProcId']}" == job
    assert broker.finish(job, ad["FetchworkClaim"], "exit", {"ExitCode": 0})
    return job


def lives(logs: list[Path]) -> dict[str, list[T]]:
    """Job id -> the events of its log, in order."""
    found: dict[str, list[T]] = defaultdict(list)
    for path in logs:
        if path.exists():
            for event in htcondor2.JobEventLog(str(path)).events(0):
                found[f"{event.cluster}.{event.proc}"].append(event.type)
    return dict(found)


def new_events(broker: Broker, after: str) -> list[tuple[str, dict[str, str]]]:
    return broker.events(after, count=100_000)


# -- the hand-over, step by step -------------------------------------------------------------

def test_a_new_leader_catches_up_then_writes_what_it_is_handed(broker, tmp_path):
    log = tmp_path / "job.log"
    first = run_job(broker, log)
    store = broker.store
    assert store.lead("a", 30_000)
    writer = UserLogWriter(store, "a")
    since = broker.last_event_id()
    writer.on_lead(since)
    assert writer.due_in_s(0.0) == 0.0, "events before the lead are the writer's to read"
    writer.run_due(0.0)
    assert writer.due_in_s(0.0) == float("inf")
    assert lives([log]) == {first: LIFE}
    second = run_job(broker, log)
    writer.on_events(new_events(broker, since))
    assert lives([log]) == {first: LIFE, second: LIFE}
    assert writer.position() == broker.last_event_id()


def test_events_the_old_leader_never_wrote_are_the_new_ones_catch_up(broker, tmp_path):
    log = tmp_path / "job.log"
    store = broker.store
    assert store.lead("a", 30_000)
    old = UserLogWriter(store, "a")
    old.on_lead(broker.last_event_id())
    old.run_due(0.0)
    first = run_job(broker, log)  # read by the old leader's reader, never handed over
    assert store.resign("a") and store.lead("b", 30_000)
    handed_from = broker.last_event_id()
    second = run_job(broker, log)
    new = UserLogWriter(store, "b")
    new.on_lead(handed_from)
    new.on_events(new_events(broker, handed_from))  # catches up first, then writes these
    assert lives([log]) == {first: LIFE, second: LIFE}


def test_a_batch_handed_while_another_replica_leads_is_read_again_later(broker, tmp_path):
    log = tmp_path / "job.log"
    store = broker.store
    assert store.lead("a", 30_000)
    writer = UserLogWriter(store, "a")
    since = broker.last_event_id()
    writer.on_lead(since)
    writer.run_due(0.0)
    assert store.resign("a") and store.lead("b", 30_000)  # before "a" heard of it
    job = run_job(broker, log)
    writer.on_events(new_events(broker, since))
    assert not writer.leads and not log.exists()
    assert 0 < writer.due_in_s(0.0) < float("inf"), "it looks again a little later"
    assert store.resign("b") and store.lead("a", 30_000)
    later = broker.last_event_id()
    writer.on_lose()
    writer.on_lead(later)
    writer.run_due(0.0)
    assert lives([log]) == {job: LIFE}


def test_a_batch_whose_position_was_not_stored_is_not_written_twice(broker, tmp_path,
                                                                    monkeypatch):
    log = tmp_path / "job.log"
    store = broker.store
    assert store.lead("a", 30_000)
    writer = UserLogWriter(store, "a")
    since = broker.last_event_id()
    writer.on_lead(since)
    writer.run_due(0.0)
    first = run_job(broker, log)
    writer.on_events(new_events(broker, since))  # a batch written: no longer a fresh lead
    since = broker.last_event_id()
    job = run_job(broker, log)
    real = store.scripts.call

    def redis_fails(name, *args, **kwargs):
        if name == "userlog_advance":
            raise ConnectionError("the position could not be stored")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(store.scripts, "call", redis_fails)
    with pytest.raises(ConnectionError):
        writer.on_events(new_events(broker, since))
    assert lives([log]) == {first: LIFE, job: LIFE}, "appended before the position failed"
    monkeypatch.setattr(store.scripts, "call", real)
    assert writer.due_in_s(0.0) == 0.0
    writer.run_due(0.0)
    assert lives([log]) == {first: LIFE, job: LIFE}
    assert writer.due_in_s(0.0) == float("inf")


# -- replicas that resign and restart while jobs run --------------------------------------------

class Workload:
    """Jobs run one after the other, each logging to one of three logs, until stopped."""

    def __init__(self, broker: Broker, folder: Path):
        self.broker = broker
        self.logs = [folder / f"log{n}" for n in range(3)]
        self.jobs: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.jobs.append(run_job(self.broker, self.logs[len(self.jobs) % 3]))

    def more(self, count: int) -> None:
        """Wait for `count` more jobs."""
        target = len(self.jobs) + count
        wait_until(lambda: len(self.jobs) >= target, 60, fail_if=self.died,
                   what=f"{count} more jobs")

    def died(self) -> str | None:
        return None if self.thread.is_alive() else "the workload stopped"

    def finish(self) -> dict[str, list[T]]:
        """Stop, wait until every job's life is logged, and return the logs."""
        self.stop.set()
        self.thread.join(30)
        return wait_until(lambda: self._complete(lives(self.logs)), 60,
                          what="every job's events in its log")

    def _complete(self, found: dict[str, list[T]]) -> dict[str, list[T]] | None:
        done = all(len(found.get(job, [])) >= len(LIFE) for job in self.jobs)
        return found if done else None


class Replica:
    """A BrokerService writing user logs, run on a thread until stopped."""

    def __init__(self, broker: Broker, name: str):
        self.service = BrokerService(broker, reaper_interval_s=0.2, leader_lease_s=1,
                                     replica=name, user_logs=True)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.service.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def end(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for replica in made:
        replica.end()


def test_no_event_is_lost_or_repeated_as_replicas_resign_and_restart(broker, tmp_path,
                                                                      replicas):
    def leader() -> str | None:
        value = broker.client.get(broker.keys.leader)
        return value.decode() if value else None

    work = Workload(broker, tmp_path)
    replicas.append(Replica(broker, "a"))
    wait_until(lambda: leader() == "a", 30, what="a leading")
    replicas.append(Replica(broker, "b"))
    work.thread.start()
    work.more(15)
    replicas[0].end()  # resigns: "b" takes over while the jobs go on
    wait_until(lambda: leader() == "b", 30, what="b leading")
    work.more(15)
    replicas.append(Replica(broker, "a"))  # "a" again, restarted
    replicas[1].end()
    wait_until(lambda: leader() == "a", 30, what="a leading again")
    work.more(15)
    found = work.finish()
    assert len(work.jobs) >= 45
    assert {job: found[job] for job in work.jobs} == {job: LIFE for job in work.jobs}
    assert set(found) == set(work.jobs)


# -- a leader killed ------------------------------------------------------------------------------

def test_no_event_is_lost_or_repeated_when_the_leader_is_killed(broker, tmp_path, redis_url,
                                                                 pool_name):
    daemons = {}
    for name in ("one", "two"):
        env = command_env(redis_url, pool_name, tmp_path, BROKER_REAPER_INTERVAL="0.2",
                          BROKER_LEADER_LEASE="1", BROKER_REPLICA_NAME=name)
        daemons[name] = Daemon(Path(env["FETCHWORK_CONFIG"]), tmp_path / f"{name}.log",
                               "broker", env=env)
        daemons[name].start()
    try:
        def leader() -> str | None:
            value = broker.client.get(broker.keys.leader)
            return value.decode() if value else None

        first = wait_until(leader, 60, fail_if=lambda: daemons["one"].died()
                           or daemons["two"].died(), what="a leader")
        standby = "two" if first == "one" else "one"
        work = Workload(broker, tmp_path)
        work.thread.start()
        work.more(20)
        daemons[first].kill()
        wait_until(lambda: leader() == standby, 30, fail_if=daemons[standby].died,
                   what="the standby leading")
        work.more(20)
        found = work.finish()
        assert {job: found[job] for job in work.jobs} == {job: LIFE for job in work.jobs}
        assert set(found) == set(work.jobs)
    finally:
        for daemon in daemons.values():
            daemon.stop()
