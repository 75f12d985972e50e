"""Dependencies, requeue and run until cancelled in a whole pool (`fetchwork up`:
broker service, startd, starters, real jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.pools import fw, history_json, pool_up, q_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

# A job that records when it started and ended (to the nanosecond), then exits $2;
# `hold` (shell) runs after the start is recorded.
STAMPED = ("executable = /bin/sh\n"
           "arguments = \"-c 'date +%s.%N > start_$1; {hold}sleep 1; date +%s.%N > end_$1; "
           "exit $2' sh {name} {code}\"\n")
# The first job waits for this file, so the test sees the queue before any job ends.
GATE = "while [ ! -e gate ]; do sleep 0.1; done; "


@pytest.fixture
def two_slots(job_tmp: Path):
    with pool_up(job_tmp, 2) as pool:
        yield pool.env, pool.up, pool.folder("work")


@pytest.fixture
def one_slot(job_tmp: Path):
    with pool_up(job_tmp, 1) as pool:
        yield pool.env, pool.up, pool.folder("work")


def stamp(work: Path, kind: str, name: str) -> float:
    return float((work / f"{kind}_{name}").read_text())


def by_id(ads: list[dict]) -> dict[str, dict]:
    return {f"{ad['ClusterId']}.{ad['ProcId']}": ad for ad in ads}


def test_dependencies_order_the_jobs_and_a_failure_fails_its_dependents(two_slots):
    env, up, work = two_slots
    (work / "dag.sub").write_text(
        "+JobName = \"prep\"\n" + STAMPED.format(name="prep", code=0, hold=GATE) + "queue\n"
        "+JobName = \"left\"\ndepends_on = prep\n"
        + STAMPED.format(name="left", code=0, hold="") + "queue\n"
        "+JobName = \"right\"\ndepends_on = $(Cluster).0\n"
        + STAMPED.format(name="right", code=3, hold="") + "queue\n"
        "+JobName = \"last\"\ndepends_on = left, right\n"
        + STAMPED.format(name="last", code=0, hold="") + "queue\n")
    submitted = fw(env, "submit", "dag.sub", cwd=work).stdout
    cluster = submitted.split("cluster ")[1].split(".")[0]
    waiting = by_id(q_json(env))[f"{cluster}.3"]
    assert waiting["FetchworkState"] == "BLOCKED"
    assert waiting["Depends"] == f"{cluster}.1,{cluster}.2"
    assert f"{cluster}.1" in waiting["BlockedReason"]
    (work / "gate").touch()
    wait_until(lambda: q_json(env) == [], timeout_s=120, fail_if=up.died,
               what="every job of the submission finished")
    done = by_id(history_json(env))
    assert done[f"{cluster}.0"]["FetchworkState"] == "COMPLETED"
    assert done[f"{cluster}.1"]["FetchworkState"] == "COMPLETED"
    assert done[f"{cluster}.2"]["ExitCode"] == 3
    prep_end = stamp(work, "end", "prep")
    for name in ("left", "right"):
        started = stamp(work, "start", name)
        assert started >= prep_end, f"{name} started before its dependency ended"
        assert started - prep_end < 5, f"{name} started {started - prep_end:.1f}s late"
    last = done[f"{cluster}.3"]
    assert last["FetchworkState"] == "FAILED"
    assert last["RemoveReason"] == f"dependency {cluster}.2 completed with ExitCode 3"
    assert not (work / "start_last").exists()


def test_a_dependency_cycle_is_refused_at_submit(two_slots):
    env, _up, work = two_slots
    (work / "cycle.sub").write_text(
        "executable = /bin/true\n"
        "depends_on = $(Cluster).1\nqueue\n"
        "depends_on = $(Cluster).0\nqueue\n")
    refused = fw(env, "submit", "cycle.sub", cwd=work, check=False)
    assert refused.returncode != 0
    assert "depend on each other in a cycle" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert q_json(env) == []


def test_requeue_sends_a_running_job_back_to_the_head_and_it_runs_again(one_slot):
    env, up, work = one_slot
    release = work / "release"
    for name in ("first", "second"):
        (work / f"{name}.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c 'echo run >> runs_{name}; "
            f"while [ ! -e {release} ]; do sleep 0.1; done'\"\n"
            "+Rerunnable = false\nqueue\n")
    fw(env, "submit", "first.sub", cwd=work)
    wait_until(lambda: (work / "runs_first").exists(), timeout_s=60, fail_if=up.died,
               what="the first job running")
    fw(env, "submit", "second.sub", cwd=work)
    first, second = sorted(by_id(q_json(env)))
    idle = fw(env, "requeue", second)
    assert f"Job {second} is idle, not running; unchanged." in idle.stdout
    requeued = fw(env, "requeue", first)
    assert f"Job {first} requeued" in requeued.stdout
    wait_until(lambda: (work / "runs_first").read_text().count("run") == 2, timeout_s=60,
               fail_if=up.died, what="the requeued job running again")
    assert not (work / "runs_second").exists(), "the requeued job ran first, from the head"
    jobs = by_id(q_json(env))
    assert jobs[first]["FetchworkState"] == "RUNNING" and jobs[first]["NumJobMatches"] == 2
    release.write_text("")
    wait_until(lambda: q_json(env) == [], timeout_s=90, fail_if=up.died, what="both jobs done")
    assert {ad["FetchworkState"] for ad in history_json(env)} == {"COMPLETED"}


def slot_activity(env: dict[str, str]) -> str:
    """State/Activity of the pool's one slot."""
    slots = json.loads(fw(env, "status", "--json").stdout)
    return f"{slots[0].get('State')}/{slots[0].get('Activity')}" if slots else ""


def test_run_until_canceled_keeps_the_slot_until_its_walltime_then_completes(one_slot):
    env, up, work = one_slot
    (work / "keep.sub").write_text(
        "executable = /bin/sh\narguments = \"-c 'date +%s.%N > ended'\"\n"
        "run_until_canceled = true\nallowed_job_duration = 20\nqueue\n")
    (work / "next.sub").write_text("executable = /bin/sh\n"
                                   "arguments = \"-c 'date +%s.%N > next_started'\"\nqueue\n")
    fw(env, "submit", "keep.sub", cwd=work)
    wait_until(lambda: (work / "ended").exists(), timeout_s=60, fail_if=up.died,
               what="the command of the run-until-cancelled job ended")
    fw(env, "submit", "next.sub", cwd=work)
    wait_until(lambda: slot_activity(env) == "Claimed/Idle", timeout_s=30, fail_if=up.died,
               what="the slot shown Claimed/Idle while the job keeps it")
    states = sorted(ad["FetchworkState"] for ad in q_json(env))
    assert states == ["IDLE", "RUNNING"], "the job keeps its slot after its command ended"
    wait_until(lambda: (work / "next_started").exists(), timeout_s=60, fail_if=up.died,
               what="the next job running once the walltime is used up")
    kept = next(ad for ad in history_json(env) if ad.get("RunUntilCanceled"))
    assert kept["FetchworkState"] == "COMPLETED" and kept["ExitCode"] == 0
    held_s = float((work / "next_started").read_text()) - kept["JobStartDate"]
    assert held_s >= 19, f"the slot was released after {held_s:.1f}s, before the walltime"


def test_run_until_canceled_without_walltime_keeps_the_slot_until_removed(one_slot):
    env, up, work = one_slot
    (work / "keep.sub").write_text(
        "executable = /bin/sh\narguments = \"-c 'date > ended'\"\n"
        "run_until_canceled = true\nqueue\n")
    fw(env, "submit", "keep.sub", cwd=work)
    wait_until(lambda: (work / "ended").exists() and slot_activity(env) == "Claimed/Idle",
               timeout_s=60, fail_if=up.died, what="the slot kept idle after the command")
    (job,) = by_id(q_json(env))
    assert by_id(q_json(env))[job]["FetchworkState"] == "RUNNING"
    fw(env, "rm", job)
    wait_until(lambda: q_json(env) == [], timeout_s=60, fail_if=up.died,
               what="the removed job leaving its slot")
    (done,) = history_json(env)
    assert done["FetchworkState"] == "REMOVED"


def test_a_run_until_canceled_job_removed_while_its_command_runs_frees_the_slot(one_slot):
    env, up, work = one_slot
    (work / "keep.sub").write_text(
        "executable = /bin/sh\narguments = \"-c 'date > started; exec sleep 600'\"\n"
        "run_until_canceled = true\nqueue\n")
    (work / "next.sub").write_text("executable = /bin/sh\n"
                                   "arguments = \"-c 'date > next_started'\"\nqueue\n")
    fw(env, "submit", "keep.sub", cwd=work)
    wait_until(lambda: (work / "started").exists(), timeout_s=60, fail_if=up.died,
               what="the command running")
    (job,) = by_id(q_json(env))
    fw(env, "submit", "next.sub", cwd=work)
    fw(env, "rm", job)
    wait_until(lambda: (work / "next_started").exists(), timeout_s=60, fail_if=up.died,
               what="the next job on the slot the removed job left")
    removed = by_id(history_json(env))[job]
    assert removed["FetchworkState"] == "REMOVED"
