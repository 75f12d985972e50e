"""Stream entries that name a batch of jobs: a submission and a signed admission write
one entry for the jobs that made the same transition, and every reader of the stream
(Store.events, the user log writer's range reads) sees one event a job, as before."""

from __future__ import annotations

from pathlib import Path

import htcondor2
import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.store import codec
from fetchwork.broker.store.eventbatch import MAX_JOBS, expand, job_ids
from fetchwork.config.loader import Config

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker(redis_client, pool_name):
    return Broker(redis_client, pool_name, Config.load(environ={}))


def raw_entries(broker: Broker) -> list[dict[str, str]]:
    return [{codec.text(k): codec.text(v) for k, v in fields.items()}
            for _id, fields in broker.client.xrange(broker.keys.events)]


def test_runs_name_their_jobs_in_order() -> None:
    assert list(job_ids("12.0-3 12.7 13.2-2 9.5")) == [
        "12.0", "12.1", "12.2", "12.3", "12.7", "13.2", "9.5"]


def test_malformed_runs_are_skipped_and_an_entry_names_at_most_max_jobs() -> None:
    assert list(job_ids("x 1.a 1.2-1 -3 1.5-6-7 2.0")) == ["2.0"]
    assert sum(1 for _ in job_ids("1.0-999999999999")) == MAX_JOBS
    assert sum(1 for _ in job_ids(f"1.0-{MAX_JOBS} 2.0-5")) == MAX_JOBS


def test_an_entry_for_one_job_is_read_as_it_is() -> None:
    fields = {"type": "claim", "job": "4.1", "state": "RUNNING", "status": "2", "slot": "s"}
    assert expand("5-0", fields) == [("5-0", fields)]
    assert expand("5-1", {"type": "submit", "jobs": "3.0-1", "state": "IDLE",
                          "status": "1"}) == [
        ("5-1", {"type": "submit", "state": "IDLE", "status": "1", "job": "3.0"}),
        ("5-1", {"type": "submit", "state": "IDLE", "status": "1", "job": "3.1"})]
    # An entry naming no job is handed on as it is: readers move past it.
    assert expand("5-2", {"type": "submit", "jobs": "nonsense"}) == [
        ("5-2", {"type": "submit", "jobs": "nonsense"})]


def test_a_submission_writes_one_entry_per_state_read_as_one_event_a_job(broker) -> None:
    jobs = broker.submit([{"Cmd": "x"}, {"Cmd": "x", "Hold": True}, {"Cmd": "x"}])
    (single,) = broker.submit([{"Cmd": "x"}])
    cluster = jobs[0].split(".")[0]
    entries = raw_entries(broker)
    assert sorted(entries, key=str) == sorted([
        {"type": "submit", "jobs": f"{cluster}.0 {cluster}.2", "state": "IDLE", "status": "1"},
        {"type": "submit", "job": jobs[1], "state": "HELD", "status": "5"},
        {"type": "submit", "job": single, "state": "IDLE", "status": "1"}], key=str)
    events = broker.events("0-0", count=10)
    assert sorted((fields["job"], fields["state"]) for _id, fields in events) == sorted([
        (jobs[0], "IDLE"), (jobs[2], "IDLE"), (jobs[1], "HELD"), (single, "IDLE")])
    assert len({entry_id for entry_id, _fields in events}) == 3
    # Entry ids stay the stream's: reading on after an entry skips all its jobs.
    first = events[0][0]
    after = [job for entry_id, fields in events if entry_id != first for job in [fields["job"]]]
    assert [fields["job"] for _id, fields in broker.events(first)] == after


def test_the_user_log_gets_every_job_of_a_batched_entry(broker, tmp_path: Path) -> None:
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    ads = [{"Cmd": "x", "UserLog": str(logs[n % 2])} for n in range(5)]
    jobs = broker.submit(ads)
    cluster = int(jobs[0].split(".")[0])
    service = BrokerService(broker, leader_lease_s=30, replica="a", user_logs=True)
    assert service.run_once().leader
    service.run_once()
    for n, log in enumerate(logs):
        events = list(htcondor2.JobEventLog(str(log)).events(0))
        assert [(event.type, event.cluster, event.proc) for event in events] == [
            (htcondor2.JobEventType.SUBMIT, cluster, proc) for proc in range(n, 5, 2)]


def test_readers_move_past_an_entry_that_names_no_job(broker) -> None:
    broker.client.xadd(broker.keys.events, {"type": "submit", "jobs": "x-y", "state": "IDLE"})
    jobs = broker.submit([{"Cmd": "x"}] * 2)
    events = broker.events("0-0", count=10)
    assert [fields.get("job") for _id, fields in events] == [None, *jobs]
    assert [fields["job"] for _id, fields in broker.events(events[0][0])] == jobs
