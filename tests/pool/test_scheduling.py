"""The scheduling policy in a whole pool (`fetchwork up`: broker service, startd,
starters, jobs): the worked example of ten jobs, and a job stopped past its walltime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.pools import fw, pool_up, q_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


def states(env: dict[str, str]) -> list[str]:
    return sorted(ad["FetchworkState"] for ad in q_json(env))


@pytest.fixture
def policy_pool(job_tmp: Path):
    """A 1-slot pool under the example site's idle limit, with quick policy passes."""
    with pool_up(job_tmp, 1, MAX_IDLE_JOBS_PER_USER="8", POLICY_INTERVAL="0.5") as pool:
        yield pool.env, pool.up, pool.folder("work")


def test_ten_jobs_one_running_eight_idle_one_blocked(policy_pool):
    env, up, work = policy_pool
    release = work / "release"
    (work / "job.sub").write_text(
        "executable = /bin/sh\n"
        f"arguments = \"-c 'while [ ! -e {release} ]; do sleep 0.1; done'\"\n"
        "queue 10\n")
    fw(env, "submit", "job.sub", cwd=work)
    expected = ["BLOCKED"] + ["IDLE"] * 8 + ["RUNNING"]
    wait_until(lambda: states(env) == expected, timeout_s=60, fail_if=up.died,
               what="1 running, 8 idle and the last job still blocked")
    blocked = [ad for ad in q_json(env) if ad["FetchworkState"] == "BLOCKED"]
    assert blocked[0]["BlockedReason"].endswith("has 8 idle jobs (MAX_IDLE_JOBS_PER_USER = 8)")
    assert blocked[0]["ProcId"] == 9, "the earliest blocked job moved up first"
    showq = fw(env, "q", "-showq").stdout
    assert "Total Jobs: 10   Active Jobs: 1   Idle Jobs: 8   Blocked Jobs: 1" in showq
    release.write_text("")
    wait_until(lambda: q_json(env) == [], timeout_s=150, fail_if=up.died,
               what="every job done")


def test_a_job_past_its_walltime_is_stopped(policy_pool):
    env, up, work = policy_pool
    (work / "long.sub").write_text(
        "executable = /bin/sleep\narguments = 600\nallowed_job_duration = 2\nqueue\n")
    fw(env, "submit", "long.sub", cwd=work)
    wait_until(lambda: q_json(env) == [], timeout_s=90, fail_if=up.died,
               what="the job leaving the queue")
    (done,) = json.loads(fw(env, "history", "--json").stdout)
    assert done["FetchworkState"] == "FAILED"
    assert done["RemoveReason"] == "the job ran past its walltime (AllowedJobDuration) of 2 s"

