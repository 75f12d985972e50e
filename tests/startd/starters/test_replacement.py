"""Starters kept across jobs and replaced after N of them, on a real startd under load:
many short jobs on 2 slots with STARTER_JOBS_PER_PROCESS = 3, every hook a program
or in-process. Each job writes its parent's pid (its starter's) into a file of its
own."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.startd import QUEUE_DELAY, make_world_writable
from tests.support.startd_runs import MODES, configured_pool, running

pytestmark = pytest.mark.timeout(300)

JOBS = 40
PER_STARTER = 3


@pytest.fixture(scope="module", params=MODES)
def ran(request):
    config = (f"NUM_SLOTS = 2\nSTARTER_JOBS_PER_PROCESS = {PER_STARTER}\n"
              f"FetchWorkDelay = {QUEUE_DELAY}\nFETCH_WORK_MIN_INTERVAL = 0\n")
    with configured_pool("replacement", request.param, config) as pool:
        out = pool.root / "ran"
        out.mkdir()
        make_world_writable(out)
        for number in range(1, JOBS + 1):
            pool.add_job("Q", cmd="/bin/sh", args=f"-c 'echo $PPID > {out}/{number}'")
        with running(pool):
            pool.wait_calls("exit", JOBS, timeout_s=240)
        starters = {int(path.name): int(path.read_text()) for path in out.iterdir()}
        yield pool, starters


def test_every_job_ran_once(ran):
    pool, starters = ran
    assert sorted(starters) == list(range(1, JOBS + 1))
    for kind in ("exit", "prepare"):
        calls = pool.calls(kind)
        per_job = Counter(call.attr("ClusterId") for call in calls)
        twice = [(call.attr("ClusterId"), call.args, call.pid, call.at_s) for call in calls
                 if per_job[call.attr("ClusterId")] > 1]
        assert len(calls) == JOBS and not twice, (kind, twice, pool.log_text()[-6000:])


def test_no_starter_runs_more_than_its_jobs(ran):
    _pool, starters = ran
    per_starter = Counter(starters.values())
    assert max(per_starter.values()) <= PER_STARTER, per_starter


def test_starters_are_kept_and_replaced(ran):
    _pool, starters = ran
    per_starter = Counter(starters.values())
    assert len(per_starter) >= -(-JOBS // PER_STARTER), per_starter
    # Kept: most starters ran more than one job (a slot's next job goes to its starter).
    assert sum(1 for count in per_starter.values() if count > 1) >= len(per_starter) // 2, \
        per_starter


def test_the_startd_saw_no_starter_fail(ran):
    pool, _starters = ran
    log = pool.log_text()
    assert "the starter failed" not in log and "Traceback" not in log, log[-3000:]
    assert pool.status == 0
