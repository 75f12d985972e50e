"""The leader's user log writer on a real Redis: the events of each job's
transitions land in its UserLog, in order, read back with htcondor2.JobEventLog;
a restarted or standby leader goes on without losing or repeating events; a
file it cannot write is logged and skipped."""

from __future__ import annotations

import logging
from pathlib import Path

import htcondor2
import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.config.loader import Config

pytestmark = pytest.mark.timeout(60)

T = htcondor2.JobEventType
SLOT = {"Name": "slot1@node", "Memory": 1}


@pytest.fixture
def broker(redis_client, pool_name):
    return Broker(redis_client, pool_name, Config.load(environ={}))


def leader(broker: Broker, replica: str = "a") -> BrokerService:
    service = BrokerService(broker, leader_lease_s=30, replica=replica, user_logs=True)
    assert service.run_once().leader
    return service


def read(path: Path) -> list[tuple[T, int, int]]:
    return [(event.type, event.cluster, event.proc)
            for event in htcondor2.JobEventLog(str(path)).events(0)]


def claim(broker: Broker) -> tuple[str, str]:
    ad = broker.claim(SLOT)
    assert ad is not None
    return f"{ad['ClusterId']}.{ad['ProcId']}", ad["FetchworkClaim"]


def test_a_jobs_life_in_its_log(broker, tmp_path):
    log = tmp_path / "job.log"
    (first, second) = broker.submit([{"Cmd": "x", "UserLog": str(log)},
                                     {"Cmd": "x", "UserLog": str(log)}])
    cluster = int(first.split(".")[0])
    service = leader(broker)
    job, token = claim(broker)
    assert job == first
    assert broker.renew(job, token, {"ImageSize": 5000}) == "ok"
    assert broker.renew(job, token, {"ImageSize": 4000}) == "ok"  # no growth: no event
    assert broker.finish(job, token, "exit", {"ExitCode": 3, "ExitBySignal": False,
                                              "RemoteUserCpu": 2.0, "ImageSize": 5000})
    broker.hold([second], "wait for the input")
    broker.release([second])
    job, token = claim(broker)
    assert broker.finish(job, token, "evict")
    broker.remove([second], "not needed")
    service.run_once()
    events = read(log)
    assert events == [(T.SUBMIT, cluster, 0), (T.SUBMIT, cluster, 1), (T.EXECUTE, cluster, 0),
                      (T.IMAGE_SIZE, cluster, 0), (T.JOB_TERMINATED, cluster, 0),
                      (T.JOB_HELD, cluster, 1), (T.JOB_RELEASED, cluster, 1),
                      (T.EXECUTE, cluster, 1), (T.JOB_EVICTED, cluster, 1),
                      (T.JOB_ABORTED, cluster, 1)]
    by_type = {event.type: event for event in htcondor2.JobEventLog(str(log)).events(0)}
    assert by_type[T.EXECUTE]["ExecuteHost"] == "slot1@node"
    assert by_type[T.IMAGE_SIZE]["Size"] == 5000
    assert by_type[T.JOB_TERMINATED]["ReturnValue"] == 3
    assert by_type[T.JOB_TERMINATED]["RunRemoteUsage"] == "Usr 0 00:00:02, Sys 0 00:00:00"
    assert by_type[T.JOB_HELD]["HoldReason"] == "wait for the input"
    assert by_type[T.JOB_HELD]["HoldReasonCode"] == 1
    assert by_type[T.JOB_ABORTED]["Reason"] == "not needed"


def test_a_job_held_while_running_and_one_submitted_on_hold(broker, tmp_path):
    log = tmp_path / "held.log"
    (job,) = broker.submit([{"Cmd": "x", "UserLog": str(log)}])
    (on_hold,) = broker.submit([{"Cmd": "x", "UserLog": str(log), "Hold": True}])
    service = leader(broker)
    job, token = claim(broker)
    broker.hold([job], "policy says so")
    assert broker.finish(job, token, "hold")
    service.run_once()
    events = list(htcondor2.JobEventLog(str(log)).events(0))
    assert [event.type for event in events] == [T.SUBMIT, T.SUBMIT, T.JOB_HELD, T.EXECUTE,
                                               T.JOB_HELD]
    assert events[2].proc == 0 and events[2].cluster == int(on_hold.split(".")[0])
    assert events[2]["HoldReasonCode"] == 15
    assert events[4]["HoldReason"] == "policy says so"


def test_jobs_without_a_log_and_followers_write_nothing(broker, tmp_path):
    log = tmp_path / "job.log"
    broker.submit([{"Cmd": "x"}])
    follower_log = tmp_path / "follower.log"
    leader(broker, "a")
    follower = BrokerService(broker, leader_lease_s=30, replica="b", user_logs=True)
    broker.submit([{"Cmd": "x", "UserLog": str(follower_log)}])
    assert not follower.run_once().leader
    assert follower.userlog is not None
    assert follower.userlog.write_pass() == 0 and not follower.userlog.leads
    assert not follower_log.exists() and not log.exists()


def test_a_new_leader_goes_on_where_the_last_one_stopped(broker, tmp_path):
    log = tmp_path / "job.log"
    broker.submit([{"Cmd": "x", "UserLog": str(log)}])
    first = leader(broker, "a")
    first.resign()
    job, token = claim(broker)
    assert broker.finish(job, token, "exit", {"ExitCode": 0})
    second = leader(broker, "b")
    second.run_once()
    assert [event for event, _c, _p in read(log)] == [T.SUBMIT, T.EXECUTE, T.JOB_TERMINATED]


def test_a_batch_a_dead_leader_wrote_is_not_written_twice(broker, tmp_path):
    log = tmp_path / "job.log"
    broker.submit([{"Cmd": "x", "UserLog": str(log)}])
    first = leader(broker, "a")
    before = broker.client.get(broker.keys.userlog)
    job, _token = claim(broker)
    first.run_once()
    # The leader died after appending and before moving its position.
    broker.client.set(broker.keys.userlog, before)
    first.resign()
    second = leader(broker, "b")
    second.run_once()
    assert [event for event, _c, _p in read(log)] == [T.SUBMIT, T.EXECUTE]


def test_a_file_that_cannot_be_written_is_logged_and_skipped(broker, tmp_path, caplog):
    bad = tmp_path / "missing" / "job.log"
    good = tmp_path / "job.log"
    broker.submit([{"Cmd": "x", "UserLog": str(bad)}, {"Cmd": "x", "UserLog": str(good)}])
    with caplog.at_level(logging.WARNING, logger="fetchwork.broker.userlog.writer"):
        service = leader(broker)
    assert str(bad) in caplog.text
    assert [event for event, _c, _p in read(good)] == [T.SUBMIT]
    broker.submit([{"Cmd": "x", "UserLog": str(good)}])
    service.run_once()
    assert [event for event, _c, _p in read(good)] == [T.SUBMIT, T.SUBMIT]


def test_a_relative_user_log_is_under_the_jobs_iwd(broker, tmp_path):
    broker.submit([{"Cmd": "x", "UserLog": "rel.log", "Iwd": str(tmp_path)}])
    leader(broker)
    assert [event for event, _c, _p in read(tmp_path / "rel.log")] == [T.SUBMIT]


def test_transfer_events_in_the_stream_become_file_transfer_events(broker, tmp_path):
    log = tmp_path / "job.log"
    (job,) = broker.submit([{"Cmd": "x", "UserLog": str(log)}])
    service = leader(broker)
    job, token = claim(broker)
    steps = [("input_queued", {"host": "slot1@node"}),
             ("input_started", {"host": "slot1@node", "seconds": "2"}),
             ("input_finished", {"bytes": "4096", "seconds": "0.5", "success": "true"}),
             ("output_queued", {}),
             ("output_started", {"seconds": "0"}),
             ("output_finished", {"bytes": "10", "success": "true"})]
    for kind, fields in steps:
        broker.store.client.xadd(broker.keys.events,
                                 {"type": "transfer", "job": job, "kind": kind, **fields})
    assert broker.finish(job, token, "exit", {"ExitCode": 0, "ExitBySignal": False})
    service.run_once()
    events = list(htcondor2.JobEventLog(str(log)).events(0))
    assert [event.type for event in events] == [T.SUBMIT, T.EXECUTE, *[T.FILE_TRANSFER] * 6,
                                                T.JOB_TERMINATED]
    transfers = [event for event in events if event.type == T.FILE_TRANSFER]
    assert [event["Type"] for event in transfers] == [1, 2, 3, 4, 5, 6]
    assert transfers[0]["Host"] == "slot1@node"
    assert transfers[1]["QueueingDelay"] == 2
    assert transfers[4]["QueueingDelay"] == 0
