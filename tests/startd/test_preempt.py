"""RANK preemption of fetched work on a real startd.

Job A (Prio 1) runs; then a lower-ranked job C is fetched and rejected, and a
higher-ranked job B is fetched and accepted: the evict-claim hook runs for A's
claim, A is vacated (its exit hook gets `evict`), and B runs on a new claim.
"""

from __future__ import annotations

import pytest

from fetchwork.config import ads
from tests.support.startd import Pool
from tests.support.startd_runs import MODES, finished_run

# RANK by the job's Prio; a fetch at once on an idle claim, else every second.
CONFIG = ('RANK = TARGET.Prio\n'
          'FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Idle", 0, 1)\n')


def job_a_then_c_and_b(pool: Pool) -> None:
    pool.wait_log("job 1.0 started")
    pool.add_job("Q", cmd="/bin/true", text="Prio = 0\n")
    pool.add_job("Q", cmd="/bin/true", text="Prio = 5\n")
    pool.wait_calls("exit", 2, timeout_s=40)
    pool.wait_calls("evict", 2, timeout_s=20)


@pytest.fixture(scope="module", params=MODES)
def run(request):
    with finished_run("preempt", request.param, CONFIG, job_a_then_c_and_b,
                      before=lambda pool: pool.add_job("Q", cmd="/bin/sleep", args="60",
                                                       text="Prio = 1\n")) as pool:
        yield pool


def replies(pool: Pool) -> dict[int, tuple[str, ads.classad2.ClassAd]]:
    found = {}
    for call in pool.calls("reply"):
        job_ad = ads.split_pair(call.stdin)[0]
        found[job_ad["ClusterId"]] = (call.args[-1], job_ad)
    return found


def test_lower_rank_is_rejected_higher_rank_accepted(run):
    got = {cluster: verdict for cluster, (verdict, _ad) in replies(run).items()}
    assert got == {1: "accept", 2: "reject", 3: "accept"}


def test_preempting_job_gets_a_new_claim(run):
    got = replies(run)
    assert got[1][1]["ClaimId"] != got[3][1]["ClaimId"]


def test_evict_claim_hook_runs_for_the_preempted_claim_first(run):
    evicts = run.calls("evict")
    first = ads.split_pair(evicts[0].stdin)[0]
    assert first["ClusterId"] == 1
    b_started = [c for c in run.calls("exit") if ads.parse_ad(c.stdin)["ClusterId"] == 3][0]
    assert evicts[0].at_s < b_started.at_s


def test_preempted_job_is_vacated_and_its_exit_hook_gets_evict(run):
    by_cluster = {ads.parse_ad(c.stdin)["ClusterId"]: c for c in run.calls("exit")}
    assert by_cluster[1].args[-1] == "evict"
    assert by_cluster[3].args[-1] == "exit"


def test_preempting_claim_takes_the_slot(run):
    log = run.log_text()
    assert "Claimed/Busy -> Preempting/Vacating (preempted by job 3.0" in log
    assert "Preempting/Vacating -> Claimed/Idle (preempting job 3.0 takes the slot)" in log


def test_startd_exits_zero(run):
    assert run.status == 0
