"""The job policy and run accounting on a real Redis: exits judged by on_exit_*,
max_retries, the leader's periodic pass, RemoteWallClockTime and JobState."""

from __future__ import annotations

import time

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.store import codec
from fetchwork.config.ads import EXPR_KEY, parse_ad
from fetchwork.config.loader import Config
from fetchwork.submit.jobpolicymap import policy_attrs
from fetchwork.submit.tables import run_time_s

pytestmark = pytest.mark.timeout(60)

SLOT = parse_ad('Name = "slot1@host"\nMemory = 2048\nSTART = true\n')


@pytest.fixture
def broker(redis_client, pool_name):
    config = Config.load(environ={}).with_values(JOB_DEFAULT_LEASE_DURATION=600)
    return Broker(redis_client, pool_name, config)


def expr(text: str) -> dict[str, str]:
    return {EXPR_KEY: text}


def run(broker: Broker, job: str, code: int, how: str = "exit", **attrs) -> str:
    """Claim `job` (it must be the one idle job) and end its run; the job's state after."""
    ad = broker.claim(SLOT)
    assert ad is not None and f"{ad['ClusterId']}.{ad['ProcId']}" == job
    final = {"ExitCode": code, "ExitBySignal": False, "JobState": "Running", **attrs}
    assert broker.finish(job, ad["FetchworkClaim"], how, final)
    return state(broker, job)


def state(broker: Broker, job: str) -> str:
    ad = broker.get(job)
    assert ad is not None
    return str(ad["FetchworkState"])


def events_of(broker: Broker, job: str) -> list[dict[str, str]]:
    return [event for _id, event in broker.events("0-0", count=10000) if event["job"] == job]


def backdate_start(broker: Broker, job: str, seconds: int) -> None:
    """Make the current run look `seconds` older (instead of waiting for it)."""
    started = broker.get(job)["JobCurrentStartDate"]
    broker.client.hset(broker.keys.job(job), "JobCurrentStartDate", codec.pack(started - seconds))


# -- at exit -------------------------------------------------------------------------

def test_on_exit_hold_holds_with_reason_and_codes(broker):
    [job] = broker.submit([{"Cmd": "/bin/false", "OnExitHold": expr("ExitCode == 3"),
                            "OnExitHoldReason": expr('strcat("bad exit ", ExitCode)'),
                            "OnExitHoldSubCode": 42}])
    assert run(broker, job, 3) == "HELD"
    ad = broker.get(job)
    assert (ad["JobStatus"], ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (5, 3, 42)
    assert ad["HoldReason"] == "bad exit 3"
    assert ad["NumJobCompletions"] == 1 and ad["ExitCode"] == 3
    assert events_of(broker, job)[-1]["type"] == "finish"
    assert events_of(broker, job)[-1]["state"] == "HELD"


def test_on_exit_hold_false_completes(broker):
    [job] = broker.submit([{"Cmd": "/bin/true", "OnExitHold": expr("ExitCode == 3")}])
    assert run(broker, job, 0) == "COMPLETED"
    assert broker.get(job)["NumJobCompletions"] == 1


def test_on_exit_remove_false_runs_the_job_again(broker):
    [job] = broker.submit([{"Cmd": "/bin/true",
                            "OnExitRemove": expr("NumJobCompletions >= 2")}])
    assert run(broker, job, 0) == "IDLE"
    event = events_of(broker, job)[-1]
    assert (event["type"], event["state"]) == ("finish", "IDLE")
    assert "OnExitRemove" in event["reason"]
    assert run(broker, job, 0) == "COMPLETED"
    ad = broker.get(job)
    assert (ad["NumJobCompletions"], ad["JobRunCount"], ad["JobStatus"]) == (2, 2, 4)


def test_a_literal_false_on_exit_remove_reruns(broker):
    [job] = broker.submit([{"Cmd": "/bin/true", "OnExitRemove": False}])
    assert [run(broker, job, 0) for _ in range(3)] == ["IDLE"] * 3


def test_max_retries_two_runs_a_failing_job_three_times(broker):
    attrs = dict(policy_attrs({"max_retries": "2"}, lambda text, _c: expr(text),
                              lambda text, _c, _least: int(text)))
    [job] = broker.submit([{"Cmd": "/bin/false", **attrs}])
    assert [run(broker, job, 1) for _ in range(3)] == ["IDLE", "IDLE", "COMPLETED"]
    ad = broker.get(job)
    assert (ad["NumJobCompletions"], ad["JobRunCount"], ad["ExitCode"]) == (3, 3, 1)


def test_a_pending_removal_wins_over_on_exit_hold(broker):
    [job] = broker.submit([{"Cmd": "/bin/true", "OnExitHold": True}])
    ad = broker.claim(SLOT)
    broker.remove([job], reason="no longer wanted")
    assert broker.finish(job, ad["FetchworkClaim"], "exit", {"ExitCode": 0})
    ad = broker.get(job)
    assert (ad["FetchworkState"], ad["RemoveReason"]) == ("REMOVED", "no longer wanted")


def test_a_stale_claim_is_refused_by_the_policy_path_too(broker):
    [job] = broker.submit([{"Cmd": "/bin/true", "OnExitHold": True}])
    broker.claim(SLOT)
    assert not broker.finish(job, "not-the-token", "exit", {"ExitCode": 0})
    assert state(broker, job) == "RUNNING"


# -- run accounting ----------------------------------------------------------------------

def test_wall_clock_accumulates_over_runs_and_run_time_never_goes_back(broker):
    [job] = broker.submit([{"Cmd": "/bin/sleep", "RequestCpus": 2}])
    first = broker.claim(SLOT)
    backdate_start(broker, job, 100)
    running = broker.get(job)
    shown_running = run_time_s(running, time.time())
    assert 100 <= shown_running < 160
    broker.hold([job], reason="pause")
    # Still on its slot while the hold stops it: the current run still counts.
    assert run_time_s(broker.get(job), time.time()) >= int(shown_running)
    assert broker.finish(job, first["FetchworkClaim"], "hold", {"JobState": "Running"})
    held = broker.get(job)
    assert held["FetchworkState"] == "HELD" and "JobState" not in held
    assert held["RemoteWallClockTime"] == held["LastRemoteWallClockTime"] >= 100
    assert held["CumulativeSlotTime"] == 2 * held["RemoteWallClockTime"]
    shown_held = run_time_s(held, time.time())
    assert shown_held >= int(shown_running)
    first_start = held["JobStartDate"]
    broker.release([job])
    second = broker.claim(SLOT)
    backdate_start(broker, job, 50)
    again = broker.get(job)
    assert again["JobStartDate"] == first_start
    assert again["JobLastStartDate"] == held["JobCurrentStartDate"]
    assert (again["JobRunCount"], again["NumJobStarts"]) == (2, 2)
    shown_again = run_time_s(again, time.time())
    assert shown_again >= shown_held + 50
    assert broker.finish(job, second["FetchworkClaim"], "exit", {"ExitCode": 0})
    done = broker.get(job)
    assert done["RemoteWallClockTime"] == held["RemoteWallClockTime"] + \
        done["LastRemoteWallClockTime"]
    assert done["CommittedTime"] == done["LastRemoteWallClockTime"]
    assert run_time_s(done, time.time()) >= int(shown_again)


def test_finished_jobs_do_not_say_running(broker):
    [job] = broker.submit([{"Cmd": "/bin/true"}])
    ad = broker.claim(SLOT)
    assert broker.renew(job, ad["FetchworkClaim"], {"JobState": "Running"}) == "ok"
    assert broker.get(job)["JobState"] == "Running"
    assert broker.finish(job, ad["FetchworkClaim"], "exit", {"ExitCode": 0,
                                                            "JobState": "Running"})
    [done] = broker.history()
    assert "JobState" not in done and done["JobStatus"] == 4


def test_the_execute_side_cannot_rewrite_the_accounting(broker):
    [job] = broker.submit([{"Cmd": "/bin/true"}])
    ad = broker.claim(SLOT)
    assert broker.finish(job, ad["FetchworkClaim"], "exit",
                         {"ExitCode": 0, "RemoteWallClockTime": 1e9, "JobStartDate": 5})
    done = broker.get(job)
    assert done["RemoteWallClockTime"] < 1000 and done["JobStartDate"] > 5


# -- the periodic pass ---------------------------------------------------------------------

@pytest.fixture
def leader(broker):
    service = BrokerService(broker, reaper_interval_s=100, leader_lease_s=30, replica="a",
                            periodic_interval_s=60)
    assert service.try_lead()
    return service


def test_only_jobs_with_periodic_expressions_are_indexed(broker):
    jobs = broker.submit([{"Cmd": "/bin/true"}, {"Cmd": "/bin/true", "PeriodicRemove": False},
                          {"Cmd": "/bin/true", "PeriodicHold": expr("x > 1")}])
    assert broker.store.ids(broker.client.zrange(broker.keys.periodic, 0, -1)) == [jobs[2]]


def test_periodic_hold_release_and_remove(broker, leader):
    hold, release, remove, plain = broker.submit([
        {"Cmd": "/bin/true", "PeriodicHold": expr("JobStatus == 1"),
         "PeriodicHoldReason": "waiting too long", "PeriodicHoldSubCode": 7,
         "JobPrio": -5},
        {"Cmd": "/bin/true", "PeriodicRelease": expr("HoldReasonCode == 1"), "JobPrio": -5},
        {"Cmd": "/bin/true", "PeriodicRemove": expr("CurrentTime - QDate >= 0"), "JobPrio": -5},
        {"Cmd": "/bin/true", "JobPrio": -5}])
    broker.hold([release], reason="user hold")
    result = leader.run_once(now_s=1000.0).periodic
    assert result is not None
    assert sorted(result.acted) == sorted([(hold, "hold"), (release, "release"),
                                           (remove, "remove")])
    held = broker.get(hold)
    assert (held["FetchworkState"], held["HoldReasonCode"], held["HoldReasonSubCode"],
            held["HoldReason"]) == ("HELD", 3, 7, "waiting too long")
    released = broker.get(release)
    assert released["FetchworkState"] == "IDLE" and "PeriodicRelease" in released["ReleaseReason"]
    assert released["LastHoldReason"] == "user hold" and "HoldReasonCode" not in released
    removed = broker.get(remove)
    assert removed["FetchworkState"] == "REMOVED" and "PeriodicRemove" in removed["RemoveReason"]
    assert state(broker, plain) == "IDLE"
    kinds = {event["job"]: event["type"] for event in
             (e for _i, e in broker.events("0-0", count=1000)) if event["type"] != "submit"}
    assert kinds == {hold: "hold", release: "release", remove: "remove"}
    # Not due again before the interval; the removed job has left the index.
    assert leader.run_once(now_s=1030.0).periodic is None
    again = leader.run_once(now_s=1061.0).periodic
    assert again is not None and again.acted == [] and again.looked_at == 2
    assert remove not in broker.store.ids(broker.client.zrange(broker.keys.periodic, 0, -1))


def test_periodic_hold_of_a_running_job_stops_it(broker, leader):
    [job] = broker.submit([{"Cmd": "/bin/sleep", "PeriodicHold": expr("JobStatus == 2"),
                            "PeriodicHoldSubCode": 2}])
    ad = broker.claim(SLOT)
    result = leader.run_once(now_s=1000.0).periodic
    assert result is not None and result.acted == [(job, "hold")]
    assert broker.get(job)["JobStatus"] == 5
    assert broker.renew(job, ad["FetchworkClaim"]) == "held"
    assert broker.finish(job, ad["FetchworkClaim"], "hold", {"ExitBySignal": True})
    held = broker.get(job)
    assert (held["FetchworkState"], held["HoldReasonCode"], held["HoldReasonSubCode"]) == \
        ("HELD", 3, 2)
    assert "PeriodicHold" in held["HoldReason"]


def test_no_periodic_pass_without_an_interval(broker):
    service = BrokerService(broker, reaper_interval_s=100, leader_lease_s=30, replica="a")
    [job] = broker.submit([{"Cmd": "/bin/true", "PeriodicRemove": True}])
    assert service.run_once(now_s=1000.0).periodic is None
    assert state(broker, job) == "IDLE"
