"""The idle/blocked partition and the start check: the worked examples of the
policy text with their own numbers, per-project limits, MAXPS soft and hard."""

from __future__ import annotations

from fetchwork.broker.scheduling.eligibility import changes, scheduling_pass
from fetchwork.broker.scheduling.limits import (
    claim_attrs,
    overrun,
    past_walltime,
    start_refusal,
    walltime_refusal,
    walltime_remove_reason,
)
from fetchwork.broker.store.states import State
from tests.support.scheduling import NOW, apply, hpc2n, job, settings, states

IDLE, BLOCKED, RUNNING = State.IDLE, State.BLOCKED, State.RUNNING


# -- worked example 1: ten jobs of one user ---------------------------------------

def test_ten_jobs_of_one_user_are_eight_idle_and_two_blocked():
    jobs = [job(n) for n in range(10)]
    result = scheduling_pass(jobs, hpc2n(), NOW)
    assert result.idle_ids() == [f"{n}.0" for n in range(8)]
    assert result.blocked_ids() == ["8.0", "9.0"]
    assert result.placements["8.0"].reason == (
        "user user1 has 8 idle jobs (MAX_IDLE_JOBS_PER_USER = 8)")


def test_when_one_starts_one_blocked_job_becomes_idle():
    jobs = [job(n) for n in range(10)]
    apply(jobs, scheduling_pass(jobs, hpc2n(), NOW))
    jobs[3].state, jobs[3].started_at = RUNNING, NOW
    result = scheduling_pass(jobs, hpc2n(), NOW + 1)
    assert [change.job_id for change in changes(jobs, result)] == ["8.0"]
    apply(jobs, result)
    assert list(states(jobs).values()).count("IDLE") == 8
    assert states(jobs)["9.0"] == "BLOCKED"


def test_the_highest_priority_blocked_job_is_promoted_first():
    jobs = [job(n) for n in range(8)] + [job(8), job(9, prio=5), job(10, prio=5)]
    jobs[0].state, jobs[0].started_at = RUNNING, NOW
    result = scheduling_pass(jobs, settings("MAX_IDLE_JOBS_PER_USER = 8"), NOW)
    # JobPrio 5 first (earliest of the two first), then FCFS among equals.
    assert result.idle_ids()[:3] == ["9.0", "10.0", "1.0"]
    assert result.blocked_ids() == ["7.0", "8.0"]


def test_with_no_limits_every_queued_job_is_idle():
    jobs = [job(n) for n in range(50)] + [job(60, state=RUNNING)]
    result = scheduling_pass(jobs, settings(), NOW)
    assert len(result.idle_ids()) == 50 and not result.blocked_ids()
    assert all(placement.reason is None for placement in result.placements.values())


def test_jobs_per_user_counts_running_and_idle():
    jobs = [job(n, state=RUNNING) for n in range(3)] + [job(n) for n in range(3, 9)]
    result = scheduling_pass(jobs, settings("MAX_JOBS_PER_USER = 5"), NOW)
    assert result.idle_ids() == ["3.0", "4.0"]
    assert result.placements["5.0"].reason == (
        "user user1 has 5 running and idle jobs (MAX_JOBS_PER_USER = 5)")


def test_users_are_limited_separately():
    jobs = [job(n, owner="alice") for n in range(4)] + [job(n, owner="bob") for n in range(4, 8)]
    result = scheduling_pass(jobs, settings("MAX_IDLE_JOBS_PER_USER = 2"), NOW)
    assert result.idle_ids() == ["0.0", "1.0", "4.0", "5.0"]


# -- per-project limits ---------------------------------------------------------

def test_idle_jobs_per_project_count_every_user_of_the_project():
    jobs = ([job(n, owner="alice", project="phys") for n in range(3)]
            + [job(n, owner="bob", project="phys") for n in range(3, 6)]
            + [job(n, owner="carol") for n in range(6, 9)])
    result = scheduling_pass(jobs, settings("MAX_IDLE_JOBS_PER_PROJECT = 4"), NOW)
    assert result.idle_ids() == ["0.0", "1.0", "2.0", "3.0", "6.0", "7.0", "8.0"]
    assert result.placements["4.0"].reason == (
        "project phys has 4 idle jobs (MAX_IDLE_JOBS_PER_PROJECT = 4)")


def test_a_project_budget_replaces_the_user_budget():
    knobs = "MAXPS_SOFT = 72000\nMAXPS_SOFT_snac = 100000"
    running = job(0, owner="alice", project="snac", state=RUNNING, cpus=2,
                  walltime_s=40000, remaining_s=30000)           # PS 60000
    small = job(1, owner="bob", project="snac", cpus=1, walltime_s=30000)   # 90000 in all
    large = job(2, owner="bob", project="snac", cpus=5, walltime_s=10000)   # 110000
    result = scheduling_pass([running, small, large], settings(knobs), NOW)
    assert result.placements["1.0"].state is IDLE
    placement = result.placements["2.0"]
    assert placement.state is BLOCKED and placement.soft
    assert placement.reason == (
        "PS 60000 of the running jobs of project snac + 50000 of this job (5 CPUs x 10000 s)"
        " = 110000 > MAXPS_SOFT_snac = 100000; it may start only on a slot no other job"
        " can use (MAXPS_HARD_snac = 300000)")


def test_a_project_without_its_own_budget_charges_its_users():
    knobs = "MAXPS_SOFT = 72000\nMAXPS_SOFT_snac = 100000"
    running = job(0, owner="alice", project="other", state=RUNNING, cpus=2,
                  walltime_s=40000, remaining_s=30000)
    mine = job(1, owner="alice", project="other", cpus=1, walltime_s=20000)
    theirs = job(2, owner="bob", project="other", cpus=1, walltime_s=20000)
    result = scheduling_pass([running, mine, theirs], settings(knobs), NOW)
    assert result.placements["1.0"].soft
    assert result.placements["2.0"].state is IDLE


# -- worked example 2: MAXPS -------------------------------------------------------

def _maxps_example():
    running = job(899744, state=RUNNING, cpus=2, walltime_s=12 * 3600, remaining_s=34948)
    wide = job(900991, cpus=8, walltime_s=3600)
    narrow = job(900992, cpus=1, walltime_s=1000)
    return running, wide, narrow


def test_the_running_job_has_the_texts_ps():
    running, _wide, _narrow = _maxps_example()
    assert running.remaining_s(NOW) == 34948
    assert running.running_ps(NOW) == 69896


def test_the_eight_cpu_job_is_blocked_with_the_numbers():
    jobs = list(_maxps_example())
    placement = scheduling_pass(jobs, hpc2n(), NOW).placements["900991.0"]
    assert placement.state is BLOCKED and placement.soft
    assert placement.reason == (
        "PS 69896 of the running jobs of user user1 + 28800 of this job (8 CPUs x 3600 s)"
        " = 98696 > MAXPS_SOFT = 72000; it may start only on a slot no other job can use"
        " (MAXPS_HARD = 1080000)")


def test_the_one_cpu_job_of_the_same_user_starts():
    running, wide, narrow = _maxps_example()
    result = scheduling_pass([running, wide, narrow], hpc2n(), NOW)
    assert result.placements["900992.0"].state is IDLE
    assert start_refusal(narrow, [running], hpc2n(), NOW, others_eligible=True) is None


def test_between_soft_and_hard_only_where_nothing_else_can_start():
    running, wide, narrow = _maxps_example()
    apply([running, wide, narrow], scheduling_pass([running, wide, narrow], hpc2n(), NOW))
    assert "98696 > MAXPS_SOFT = 72000" in start_refusal(wide, [running], hpc2n(), NOW,
                                                         others_eligible=True)
    assert start_refusal(wide, [running], hpc2n(), NOW, others_eligible=False) is None


def test_above_hard_never_starts():
    running, wide, _narrow = _maxps_example()
    knobs = settings("MAXPS_SOFT = 72000\nMAXPS_HARD = 90000")
    placement = scheduling_pass([running, wide], knobs, NOW).placements["900991.0"]
    assert placement.state is BLOCKED and not placement.soft
    assert placement.reason.endswith("= 98696 > MAXPS_HARD = 90000")
    apply([running, wide], scheduling_pass([running, wide], knobs, NOW))
    assert start_refusal(wide, [running], knobs, NOW, others_eligible=False) is not None


def test_the_blocked_job_starts_once_the_running_one_is_gone():
    running, wide, narrow = _maxps_example()
    jobs = [running, wide, narrow]
    apply(jobs, scheduling_pass(jobs, hpc2n(), NOW))
    jobs.remove(running)
    assert scheduling_pass(jobs, hpc2n(), NOW).placements["900991.0"].state is IDLE


def test_a_racing_start_is_refused_at_claim():
    # Two idle jobs each fit alone; once one runs, the other no longer does.
    first = job(1, cpus=1, walltime_s=40000)
    second = job(2, cpus=1, walltime_s=40000)
    result = scheduling_pass([first, second], hpc2n(), NOW)
    assert result.idle_ids() == ["1.0", "2.0"]
    first.state, first.started_at = RUNNING, NOW
    assert "80000 > MAXPS_SOFT = 72000" in start_refusal(second, [first], hpc2n(), NOW,
                                                         others_eligible=True)


def test_remaining_walltime_shrinks_the_budget_over_time():
    running, wide, _narrow = _maxps_example()
    later = NOW + 34948 - 43200 // 12  # remaining 3600 s: PS 7200 + 28800 <= 72000
    assert scheduling_pass([running, wide], hpc2n(), later).placements["900991.0"].state is IDLE


def test_a_blocked_job_is_not_claimed():
    jobs = [job(n) for n in range(10)]
    apply(jobs, scheduling_pass(jobs, hpc2n(), NOW))
    refusal = start_refusal(jobs[9], [], hpc2n(), NOW, others_eligible=False)
    assert refusal == "the job is blocked: user user1 has 8 idle jobs (MAX_IDLE_JOBS_PER_USER = 8)"


# -- walltime --------------------------------------------------------------------

def test_max_walltime_refusal_names_the_knob():
    assert walltime_refusal(432000, hpc2n()) is None
    assert walltime_refusal(432001, hpc2n()) == (
        "the job asks for 432001 s of wall-clock time (AllowedJobDuration), "
        "more than MAX_WALLTIME = 432000 s")
    assert walltime_refusal(10**9, settings()) is None


def test_a_queued_job_over_a_lowered_cap_is_blocked():
    result = scheduling_pass([job(1, walltime_s=500000)], settings("MAX_WALLTIME = 5d"), NOW)
    assert "MAX_WALLTIME = 432000" in result.placements["1.0"].reason


def test_a_job_past_its_walltime_is_due_to_stop():
    running = job(1, state=RUNNING, walltime_s=100, remaining_s=0)
    assert not past_walltime(running, NOW)
    assert past_walltime(running, NOW + 1)
    assert walltime_remove_reason(running) == (
        "the job ran past its walltime (AllowedJobDuration) of 100 s")


def test_overrun_jobs_need_their_own_walltime_unless_limits_are_set():
    own = job(1, state=RUNNING, walltime_s=100, remaining_s=0)
    default = job(2, state=RUNNING, walltime_s=3600, remaining_s=0, walltime_given=False)
    fresh = job(3, state=RUNNING, walltime_s=100, remaining_s=50)
    jobs = [own, default, fresh, job(4)]
    assert [one.job_id for one in overrun(jobs, settings(), NOW + 1)] == ["1.0"]
    assert [one.job_id for one in overrun(jobs, hpc2n(), NOW + 1)] == ["1.0", "2.0"]
    assert "(DEFAULT_JOB_WALLTIME) of 3600 s" in walltime_remove_reason(default)


def test_the_claims_recheck_reads_the_budget_and_its_limit():
    running, wide, narrow = _maxps_example()
    assert claim_attrs(narrow, hpc2n(), soft=False) == {
        "FetchworkBudget": "user:user1", "FetchworkCpus": 1, "FetchworkWalltime": 1000,
        "FetchworkPsLimit": 72000}
    assert claim_attrs(wide, hpc2n(), soft=True)["FetchworkPsLimit"] == 1080000
    project = job(1, project="SNAC", owner="bob")
    assert claim_attrs(project, settings("MAXPS_SOFT_snac = 10"), soft=False)[
        "FetchworkBudget"] == "project:snac"
    assert claim_attrs(narrow, settings(), soft=False)["FetchworkPsLimit"] == 0
