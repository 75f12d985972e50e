"""Crash anywhere, lose nothing: the chaos run's checks, and its short form.

The checks (tests/support/chaoscheck.py) are tested on made-up records first, so
each rule is seen to fail. Then a pool of two startds, a broker pair and
Redis (AOF, `appendfsync always`) runs jobs while a random process is
SIGKILLed every few seconds and started again (tests/support/chaos.py); every job
must complete exactly once, with no overlapping runs while a lease held and
no run after a finished one. `bench/chaos.py` is the long form.
"""

from __future__ import annotations

import sys

import pytest

from tests.support.chaos import ChaosPlan, ChaosPool
from tests.support.chaoscheck import Kill, QueueView, Run, check, parse_runs
from tests.support.startd import pool_root

JOBS = ["1.0", "1.1"]


def queue(completed=None, reaped=None, status=None) -> QueueView:
    return QueueView(status if status is not None else dict.fromkeys(JOBS, 4),
                     completed if completed is not None else {job: [50.0] for job in JOBS},
                     reaped or {})


def test_the_job_log_is_read_and_torn_lines_skipped():
    runs = parse_runs("start 1.0 tok 10 20 1.5\nend 1.0 tok 10 20 2.5\nstart 1.1 t2 11 20\n"
                      "start 1.1 t3 12 21 3.0\n")
    assert runs == [Run("1.0", "tok", 10, 20, 1.5, 2.5), Run("1.1", "t3", 12, 21, 3.0, None)]


def test_clean_records_pass():
    runs = [Run("1.0", "a", 10, 20, 1.0, 2.0), Run("1.1", "b", 11, 20, 1.0, None),
            Run("1.1", "c", 12, 20, 9.0, 10.0)]
    report = check(JOBS, runs, [Kill(1.5, "starter", 11)], queue())
    assert report.problems == []
    assert (report.reruns, report.worst_requeue_s) == (1, 7.5)


def test_a_finished_run_that_ran_again_is_caught_unless_its_starter_died_then():
    runs = [Run("1.0", "a", 10, 20, 1.0, 2.0), Run("1.0", "b", 11, 20, 9.0, 10.0),
            Run("1.1", "c", 12, 20, 1.0, 2.0)]
    assert any("ran again" in p for p in check(JOBS, runs, [], queue()).problems)
    excused = check(JOBS, runs, [Kill(2.01, "starter", 10)], queue())
    assert excused.problems == [] and excused.excused_reruns == 1
    late = check(JOBS, runs, [Kill(7.0, "starter", 10)], queue())
    assert any("ran again" in p for p in late.problems)


def test_overlapping_runs_need_a_lapsed_lease():
    runs = [Run("1.0", "a", 10, 20, 1.0, 5.0), Run("1.0", "b", 11, 21, 3.0, 4.0),
            Run("1.1", "c", 12, 20, 1.0, 2.0)]
    kills = [Kill(5.0, "starter", 10)]
    assert any("overlapped" in p for p in check(JOBS, runs, kills, queue()).problems)
    reaped = check(JOBS, runs, kills, queue(reaped={"1.0": [2.5]}))
    assert not any("overlapped" in p for p in reaped.problems)


def test_missing_twice_completed_and_late_runs_are_caught():
    runs = [Run("1.0", "a", 10, 20, 1.0, 2.0), Run("1.1", "b", 11, 20, 60.0, 61.0)]
    problems = check(JOBS, runs, [], queue(completed={"1.0": [3.0, 4.0], "1.1": [50.0]},
                                           status={"1.0": 4})).problems
    text = "\n".join(problems)
    assert "1.0 reached COMPLETED 2 times" in text
    assert "1.1 is missing" in text
    assert "started after the job completed" in text
    assert "never ran" in "\n".join(check(["2.0"], [], [], queue()).problems)


@pytest.mark.timeout(180)
def test_a_pool_under_random_sigkills_completes_every_job_exactly_once():
    plan = ChaosPlan(jobs=20, job_s=2.0, chaos_s=30.0, kill_every_s=(2.0, 3.5),
                     drain_timeout_s=80.0)
    with pool_root("chaos") as root:
        pool = ChaosPool(root, plan)
        try:
            report = pool.run()
        finally:
            pool.close()
    print(report.summary(), file=sys.stderr)
    assert report.problems == [], "\n".join(report.problems)
    assert report.jobs == plan.jobs and sum(report.kills.values()) >= 5
