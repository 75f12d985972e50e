"""Dependencies: the pure graph decisions, then the broker's registering and resolving
on a real Redis (jobs claimed and finished through the client API, no processes)."""

from __future__ import annotations

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.dependencies.graph import (
    DepState,
    Verdict,
    check_submission,
    decide,
    find_cycle,
    parse_depends,
)
from fetchwork.broker.dependencies.resolver import DependencyResolver
from fetchwork.config.loader import Config
from fetchwork.errors import DependencyError

SLOT = {"Name": "slot1@deps", "Memory": 1}
OK = DepState("COMPLETED", 0)

# -- pure ---------------------------------------------------------------------


def test_depends_values_parse_to_full_job_ids():
    assert parse_depends("12.0, 12.3 12.0") == ["12.0", "12.3"]
    assert parse_depends(["7.1", "8.0"]) == ["7.1", "8.0"]
    with pytest.raises(DependencyError, match="cluster"):
        parse_depends("12")
    with pytest.raises(DependencyError, match="not a job id"):
        parse_depends("prep")


def test_a_job_is_ready_only_when_every_dependency_completed_with_exit_code_0():
    assert decide(["1.0", "1.1"], {"1.0": OK, "1.1": OK}).verdict is Verdict.READY
    waiting = decide(["1.0", "1.1"], {"1.0": OK, "1.1": DepState("RUNNING")})
    assert waiting.verdict is Verdict.WAIT and waiting.waiting_on == ("1.1",)
    assert "1.1" in waiting.reason and "1.0" not in waiting.reason


@pytest.mark.parametrize(("dep", "words"), [
    (DepState("COMPLETED", 3), "completed with ExitCode 3"),
    (DepState("COMPLETED", None), "without ExitCode 0"),
    (DepState("REMOVED", None, "removed by user"), "was removed: removed by user"),
    (DepState("FAILED"), "failed"),
    (None, "does not exist"),
])
def test_a_dependency_that_cannot_complete_fails_the_job_naming_it(dep, words):
    decision = decide(["1.0", "2.0"], {"1.0": OK, "2.0": dep})
    assert decision.verdict is Verdict.FAIL
    assert decision.reason.startswith("dependency 2.0 ") and words in decision.reason


def test_cycles_are_found_with_their_path():
    assert find_cycle({"5.0": ["5.1"], "5.1": ["5.2"], "5.2": []}) is None
    assert find_cycle({"5.0": ["5.1"], "5.1": ["5.2"], "5.2": ["5.0"]}) == \
        ["5.0", "5.1", "5.2", "5.0"]
    assert find_cycle({"5.0": ["5.1"], "5.1": ["5.1"]}) == ["5.1", "5.1"]


def test_a_submission_with_a_cycle_or_a_missing_job_is_refused_naming_the_ids():
    with pytest.raises(DependencyError, match=r"5\.0 -> 5\.1 -> 5\.0"):
        check_submission({"5.0": ["5.1"], "5.1": ["5.0"]}, 5, {"5.0", "5.1"}, {})
    with pytest.raises(DependencyError, match=r"job 5\.0 depends on job 5\.7, which does not"):
        check_submission({"5.0": ["5.7"]}, 5, {"5.0"}, {})
    with pytest.raises(DependencyError, match=r"job 5\.0 depends on job 4\.0"):
        check_submission({"5.0": ["4.0"]}, 5, {"5.0"}, {"4.0": None})
    with pytest.raises(DependencyError, match="itself"):
        check_submission({"5.0": ["5.0"]}, 5, {"5.0"}, {})
    check_submission({"5.1": ["5.0", "4.0"]}, 5, {"5.0", "5.1"}, {"4.0": DepState("IDLE")})


# -- the broker ------------------------------------------------------------------

@pytest.fixture
def broker(redis_client, pool_name):
    return Broker(redis_client, pool_name, Config.load(environ={}))


def state(broker, job):
    return broker.get(job)["FetchworkState"]


def run_job(broker, job, exit_code=0, how="exit"):
    ad = broker.claim(SLOT)
    assert ad is not None and f"{ad['ClusterId']}.{ad['ProcId']}" == job
    assert broker.finish(job, ad["FetchworkClaim"], how, {"ExitCode": exit_code})


def resolve(broker, since):
    return DependencyResolver(broker.store).on_events(broker.events(since, count=10000))


def test_a_dependent_waits_blocked_then_becomes_idle(broker):
    since = broker.last_event_id()
    cluster = broker.next_cluster()
    first, second = broker.submit([{"Cmd": "a"}, {"Cmd": "b", "Depends": [f"{cluster}.0"]}],
                                  cluster_id=cluster)
    ad = broker.get(second)
    assert ad["FetchworkState"] == "BLOCKED" and ad["Depends"] == first
    assert first in ad["BlockedReason"]
    resolve(broker, since)
    assert state(broker, second) == "BLOCKED", "nothing changes before the dependency ends"
    since = broker.last_event_id()
    run_job(broker, first)
    assert resolve(broker, since) == 1
    ad = broker.get(second)
    assert ad["FetchworkState"] == "IDLE" and "BlockedReason" not in ad
    assert not broker.client.exists(broker.keys.dep_waiting)
    assert not broker.client.exists(broker.keys.dependents(first))


def test_a_failed_dependency_fails_its_dependents_transitively(broker):
    cluster = broker.next_cluster()
    a, b, c = broker.submit([{"Cmd": "a"}, {"Cmd": "b", "Depends": f"{cluster}.0"},
                             {"Cmd": "c", "Depends": f"{cluster}.1"}], cluster_id=cluster)
    since = broker.last_event_id()
    run_job(broker, a, exit_code=2)
    resolve(broker, since)
    done = broker.get(b)
    assert done["FetchworkState"] == "FAILED"
    assert done["RemoveReason"] == f"dependency {a} completed with ExitCode 2"
    since = broker.last_event_id()
    resolve(broker, since="0-0")
    assert state(broker, c) == "FAILED"
    assert broker.get(c)["RemoveReason"].startswith(f"dependency {b} failed")


def test_a_removed_dependency_fails_the_dependent(broker):
    (a,) = broker.submit([{"Cmd": "a"}])
    since = broker.last_event_id()
    (b,) = broker.submit([{"Cmd": "b", "Depends": a}])
    broker.remove([a])
    resolve(broker, since)
    assert broker.get(b)["RemoveReason"] == f"dependency {a} was removed: removed by user"
    assert not broker.client.exists(broker.keys.dep_waiting), "a finished job waits no more"


def test_a_dependency_already_completed_is_satisfied_at_once(broker):
    (a,) = broker.submit([{"Cmd": "a"}])
    run_job(broker, a)
    since = broker.last_event_id()
    (b,) = broker.submit([{"Cmd": "b", "Depends": a}])
    assert state(broker, b) == "BLOCKED"
    resolve(broker, since)
    assert state(broker, b) == "IDLE"


def test_cycles_and_missing_jobs_are_refused_at_submit(broker):
    cluster = broker.next_cluster()
    with pytest.raises(DependencyError, match=rf"{cluster}\.0 -> {cluster}\.1 -> {cluster}\.0"):
        broker.submit([{"Cmd": "a", "Depends": f"{cluster}.1"},
                       {"Cmd": "b", "Depends": f"{cluster}.0"}], cluster_id=cluster)
    with pytest.raises(DependencyError, match=r"depends on job 999\.0, which does not exist"):
        broker.submit([{"Cmd": "a", "Depends": "999.0"}])
    assert broker.queued_ids() == []


def test_policy_passes_and_releases_leave_waiting_jobs_blocked(broker):
    from fetchwork.broker.scheduling.leaderpass import release_blocked

    (a,) = broker.submit([{"Cmd": "a"}])
    (b,) = broker.submit([{"Cmd": "b", "Depends": a}])
    assert release_blocked(broker.store) == 0
    assert state(broker, b) == "BLOCKED"
    broker.hold([b])
    broker.release([b])
    assert state(broker, b) == "BLOCKED", "a release does not end the wait"
    held_since = broker.last_event_id()
    broker.hold([b])
    run_job(broker, a)
    resolve(broker, held_since)
    assert state(broker, b) == "HELD"
    broker.release([b])
    assert state(broker, b) == "IDLE"


def test_a_sweep_decides_what_the_events_missed(broker):
    (a,) = broker.submit([{"Cmd": "a"}])
    (b,) = broker.submit([{"Cmd": "b", "Depends": a}])
    run_job(broker, a)
    assert DependencyResolver(broker.store).sweep() == 1
    assert state(broker, b) == "IDLE"


# -- requeue ---------------------------------------------------------------------

def test_requeue_marks_a_running_job_and_it_returns_to_the_head_of_its_group(broker):
    first, second = broker.submit([{"Cmd": "a", "Rerunnable": False}, {"Cmd": "b"}])
    ad = broker.claim(SLOT)
    token = ad["FetchworkClaim"]
    assert broker.requeue([first, second]) == [first]
    assert broker.renew(first, token) == "requeued"
    assert broker.finish(first, token, "evict")
    ad = broker.get(first)
    assert ad["FetchworkState"] == "IDLE" and "FetchworkRequeue" not in ad
    assert broker.claim(SLOT)["ProcId"] == 0, "the requeued job is first in its group"


# -- run until cancelled at the broker ----------------------------------------------

def test_the_walltime_pass_leaves_a_job_that_keeps_its_slot_to_its_starter(broker):
    kept, plain = broker.submit([{"Cmd": "a", "RunUntilCanceled": True},
                                 {"Cmd": "b", "RunUntilCanceled": True}])
    tokens = {}
    for _ in range(2):
        ad = broker.claim(SLOT)
        tokens[f"{ad['ClusterId']}.{ad['ProcId']}"] = ad["FetchworkClaim"]
    assert broker.renew(kept, tokens[kept], {"JobState": "Idle"}) == "ok"
    assert broker.renew(plain, tokens[plain], {"JobState": "Running"}) == "ok"
    marked = broker.store.run("overrun", [kept, plain], [kept, "late", plain, "late"])
    assert broker.store.ids(marked) == [plain]


def test_analyze_names_the_dependencies_a_job_waits_for(broker):
    from fetchwork.broker.scheduling.settings import scheduling_settings
    from fetchwork.submit.schedview import analyze

    (a,) = broker.submit([{"Cmd": "a"}])
    (b,) = broker.submit([{"Cmd": "b", "Depends": a}])
    text = analyze(broker, scheduling_settings(Config.load(environ={})), b)
    assert text == f"Job {b} is blocked: waiting for dependency {a} to complete with ExitCode 0."
