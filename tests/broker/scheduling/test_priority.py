"""The weighted priority: each factor, JobPrio groups, fair share's decayed usage,
and properties of the partition over random queues."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pytest import approx

from fetchwork.broker.scheduling.eligibility import scheduling_pass
from fetchwork.broker.scheduling.fairshare import FairShare, decayed_seconds
from fetchwork.broker.scheduling.priority import (
    PRIORITY_COLUMNS,
    describe,
    job_priority,
    priority_row,
    qos_target_term,
)
from fetchwork.broker.scheduling.snapshot import Usage
from fetchwork.broker.store.states import State
from tests.support.scheduling import NOW, job, settings

DAY = 86400.0


def order_of(jobs, knobs, usage=()):
    return scheduling_pass(jobs, knobs, NOW, usage).order


def test_with_no_weights_the_order_is_jobprio_groups_then_fcfs():
    jobs = [job(1), job(2, prio=3), job(3, cpus=64, idle_for_s=DAY), job(4, prio=3)]
    assert order_of(jobs, settings()) == ["2.0", "4.0", "1.0", "3.0"]
    assert all(not p.parts and p.total == 0 for p in scheduling_pass(jobs, settings(), NOW)
               .priorities.values())


def test_queue_time_counts_minutes_in_the_idle_part():
    jobs = [job(1, idle_for_s=60), job(2, idle_for_s=600)]
    knobs = settings("PRIORITY_QUEUETIME_WEIGHT = 2")
    assert order_of(jobs, knobs) == ["2.0", "1.0"]
    priority = job_priority(jobs[1], knobs, NOW)
    assert priority.parts == {"queuetime": (10.0, 20.0)} and priority.total == 20.0


def test_blocked_jobs_accrue_no_queue_time():
    blocked = job(1, state=State.BLOCKED)
    assert job_priority(blocked, settings("PRIORITY_QUEUETIME_WEIGHT = 1"), NOW).total == 0


def test_expansion_factor_favours_short_jobs_that_waited():
    short, long = job(2, walltime_s=600, idle_for_s=600), job(1, walltime_s=6000,
                                                               idle_for_s=600)
    knobs = settings("PRIORITY_XFACTOR_WEIGHT = 1")
    assert job_priority(short, knobs, NOW).parts["xfactor"] == (2.0, 2.0)
    assert job_priority(long, knobs, NOW).parts["xfactor"][0] == 1.1
    assert order_of([long, short], knobs) == ["2.0", "1.0"]


def test_resources_weigh_cpus_memory_and_disk_separately():
    one = job(1, cpus=4, memory_mb=2048, disk_kb=10 * 1024)
    knobs = settings("PRIORITY_RESOURCE_WEIGHT = 10\nPRIORITY_RESOURCE_CPU_WEIGHT = 1\n"
                     "PRIORITY_RESOURCE_MEMORY_WEIGHT = 0.001\n"
                     "PRIORITY_RESOURCE_DISK_WEIGHT = 0.1")
    value, contribution = job_priority(one, knobs, NOW).parts["resource"]
    assert round(value, 6) == round(4 + 2.048 + 1.0, 6)
    assert round(contribution, 6) == round(10 * value, 6)


def test_bypassed_jobs_move_up():
    jobs = [job(1), job(2, bypass_count=3)]
    assert order_of(jobs, settings("PRIORITY_BYPASS_WEIGHT = 1")) == ["2.0", "1.0"]


def test_qos_priority_and_its_target_grow_exponentially():
    knobs = settings("PRIORITY_QOS_WEIGHT = 1\nQOS_NAMES = express\n"
                     "QOS_express_PRIORITY = 100\nQOS_express_TARGET_QUEUETIME = 1000")
    fresh = job(1, qos="Express")
    due = job(2, qos="express", idle_for_s=1000)
    plain = job(3, qos="unknown")
    assert job_priority(fresh, knobs, NOW).total == 100
    assert job_priority(due, knobs, NOW).total == 100 + 1023
    assert job_priority(plain, knobs, NOW).total == 0
    assert qos_target_term(500, 1000) == 31
    assert qos_target_term(10**9, 1000) == 2.0 ** 20 - 1
    assert qos_target_term(10, 0) == 0


@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(1, 1e5))
def test_the_target_term_never_shrinks_with_waiting(first, second, target):
    low, high = sorted((first, second))
    assert qos_target_term(low, target) <= qos_target_term(high, target)


def test_fair_share_favours_the_user_below_target():
    knobs = settings("PRIORITY_FAIRSHARE_WEIGHT = 1\nFAIRSHARE_TARGET_alice = 50\n"
                     "FAIRSHARE_TARGET_bob = 50")
    usage = [Usage("alice", None, 1, NOW - 3600, NOW)]
    jobs = [job(1, owner="alice"), job(2, owner="bob")]
    assert order_of(jobs, knobs, usage) == ["2.0", "1.0"]
    result = scheduling_pass(jobs, knobs, NOW, usage)
    assert result.priorities["1.0"].parts["fairshare"] == (-50.0, -50.0)
    assert result.priorities["2.0"].parts["fairshare"] == (50.0, 50.0)


def test_fair_share_counts_running_jobs_and_projects():
    knobs = settings("PRIORITY_FAIRSHARE_WEIGHT = 1\nFAIRSHARE_TARGET_phys = 20")
    running = job(0, owner="carol", project="phys", state=State.RUNNING, remaining_s=1800)
    queued = job(1, owner="dave", project="phys")
    result = scheduling_pass([running, queued], knobs, NOW)
    assert result.priorities["1.0"].parts["fairshare"] == (-80.0, -80.0)


def test_usage_decays_with_the_age_of_its_interval():
    assert decayed_seconds(NOW - 100, NOW, NOW, 7 * DAY, 7) == 100
    assert decayed_seconds(NOW - 7 * DAY, NOW - 6 * DAY, NOW, 7 * DAY, 7) == approx(DAY / 7)
    assert decayed_seconds(NOW - 9 * DAY, NOW - 8 * DAY, NOW, 7 * DAY, 7) == 0
    share = FairShare([Usage("a", None, 2, NOW - 10, NOW)], settings(), NOW)
    assert share.used_percent("user", "A") == 100


@given(st.floats(0, 20 * DAY), st.floats(0, 20 * DAY), st.integers(1, 30))
def test_decayed_usage_is_within_its_bounds(first, second, depth):
    start, end = sorted((NOW - first, NOW - second))
    inside = max(0.0, min(end, NOW) - max(start, NOW - 7 * DAY))
    value = decayed_seconds(start, end, NOW, 7 * DAY, depth)
    assert inside / depth - 1e-6 <= value <= inside + 1e-6


def test_jobprio_groups_come_before_any_weight():
    jobs = [job(1, idle_for_s=10 * DAY), job(2, prio=1)]
    assert order_of(jobs, settings("PRIORITY_QUEUETIME_WEIGHT = 1000")) == ["2.0", "1.0"]


def test_describe_shows_each_contribution():
    knobs = settings("PRIORITY_QUEUETIME_WEIGHT = 2\nPRIORITY_BYPASS_WEIGHT = 5")
    text = describe(job_priority(job(1, idle_for_s=600, bypass_count=1), knobs, NOW))
    assert text == "group 0 (JobPrio); 25 = queuetime 10 -> +20, bypass 1 -> +5"
    assert "no priority weights" in describe(job_priority(job(1), settings(), NOW))


def test_priority_rows_have_a_cell_per_factor():
    knobs = settings("PRIORITY_QUEUETIME_WEIGHT = 2")
    one = job(1, idle_for_s=600, owner="alice", prio=1)
    row = priority_row(one, job_priority(one, knobs, NOW))
    assert len(row) == len(PRIORITY_COLUMNS)
    assert dict(zip(PRIORITY_COLUMNS, row, strict=True)) == {
        "ID": "1.0", "OWNER": "alice", "GROUP": "1", "PRIORITY": "20", "QUEUETIME": "20",
        "XFACTOR": "-", "RESOURCE": "-", "BYPASS": "-", "QOS": "-", "FAIRSHARE": "-"}


# -- properties of the partition over random queues ----------------------------------

JOBS = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from([None, "p", "q"]),
                          st.integers(1, 8), st.sampled_from([600, 3600, 7200]),
                          st.sampled_from([State.IDLE, State.BLOCKED, State.RUNNING]),
                          st.integers(0, 2)),
                max_size=40)
LIMITS = st.tuples(st.integers(0, 5), st.integers(0, 6), st.integers(0, 9),
                   st.sampled_from([0, 20000, 40000]))


@hsettings(max_examples=150, deadline=None)
@given(JOBS, LIMITS)
def test_no_limit_is_ever_exceeded_by_the_idle_part(rows, limits):
    per_user, per_project, per_user_total, soft = limits
    knobs = settings(f"MAX_IDLE_JOBS_PER_USER = {per_user}\n"
                     f"MAX_IDLE_JOBS_PER_PROJECT = {per_project}\n"
                     f"MAX_JOBS_PER_USER = {per_user_total}\nMAXPS_SOFT = {soft}\n"
                     f"MAXPS_HARD = {2 * soft}")
    jobs = [job(n, owner=owner, project=project, cpus=cpus, walltime_s=wall, state=state,
                prio=prio, remaining_s=wall / 2)
            for n, (owner, project, cpus, wall, state, prio) in enumerate(rows)]
    result = scheduling_pass(jobs, knobs, NOW)
    admitted = [one for one in jobs if one.job_id in result.placements
                and (result.placements[one.job_id].state is State.IDLE
                     or result.placements[one.job_id].soft)]
    by_user = Counter(one.owner for one in admitted)
    by_project = Counter(one.project for one in admitted if one.project)
    running = Counter(one.owner for one in jobs if one.state is State.RUNNING)
    running_ps = Counter()
    for one in jobs:
        if one.state is State.RUNNING:
            running_ps[one.owner] += one.running_ps(NOW)
    for user, count in by_user.items():
        assert not per_user or count <= per_user
        assert not per_user_total or count + running[user] <= per_user_total
    assert all(not per_project or count <= per_project for count in by_project.values())
    for one in admitted:
        if soft and result.placements[one.job_id].state is State.IDLE:
            assert running_ps[one.owner] + one.ps <= soft
    for placement in result.placements.values():
        assert (placement.state is State.BLOCKED) == (placement.reason is not None)


@hsettings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=30), st.integers(1, 6))
def test_the_idle_part_of_a_user_is_the_head_of_their_queue(prios, limit):
    jobs = [job(n, prio=prio) for n, prio in enumerate(prios)]
    result = scheduling_pass(jobs, settings(f"MAX_IDLE_JOBS_PER_USER = {limit}"), NOW)
    assert result.idle_ids() == result.order[:limit]
