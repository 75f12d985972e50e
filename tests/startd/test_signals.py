"""Signals on a real startd: SIGTERM (graceful, bounded), SIGQUIT (fast), SIGHUP (reload),
and `--once`.
"""

from __future__ import annotations

import signal

import pytest

from fetchwork.config import ads
from tests.support.processes import alive
from tests.support.startd import Pool, pool_root
from tests.support.startd_runs import (
    MODES,
    configured_pool,
    finished_run,
    reconfigure,
    running,
    signal_and_wait,
)
from tests.support.waiting import wait_until


def term_ignoring_job(pool: Pool) -> str:
    """A job script that ignores SIGTERM (only SIGKILL ends it)."""
    path = pool.root / "ignore-term.sh"
    path.write_text("#!/bin/sh\ntrap '' TERM\nwhile :; do sleep 1; done\n")
    path.chmod(0o755)
    return str(path)


def queue_term_ignoring_job(pool: Pool) -> None:
    pool.add_job("Q", cmd=term_ignoring_job(pool))


def _job_pids(pool: Pool) -> list[int]:
    return [int(ads.parse_ad(c.stdin)["JobPid"]) for c in pool.calls("exit")
            if "JobPid" in ads.parse_ad(c.stdin)]


def term_two_jobs(pool: Pool) -> None:
    pool.wait_log("job 1.0 started")
    pool.wait_log("job 2.0 started")
    signal_and_wait(pool, signal.SIGTERM)


@pytest.fixture(scope="module", params=MODES)
def term(request):
    """Two running jobs, one ignoring SIGTERM; MachineMaxVacateTime is longer than the grace."""
    config = "NUM_SLOTS = 2\nMachineMaxVacateTime = 60\nSTARTD_SHUTDOWN_GRACE = 3\n"

    def two_jobs(pool: Pool) -> None:
        pool.add_job("Q", cmd="/bin/sleep", args="60")
        queue_term_ignoring_job(pool)

    with finished_run("term", request.param, config, term_two_jobs, two_jobs) as pool:
        yield pool


def test_sigterm_exits_zero_within_the_grace_bound(term):
    assert term.status == 0, term.log_text()[-2000:]
    # STARTD_SHUTDOWN_GRACE 3 s, then kill, then at most 2 s before SIGKILL.
    assert term.took_s < 12.0


def test_sigterm_runs_the_exit_hooks_with_evict(term):
    exits = term.calls("exit")
    assert sorted(ads.parse_ad(c.stdin)["ClusterId"] for c in exits) == [1, 2]
    assert {c.args[-1] for c in exits} == {"evict"}


def test_sigterm_evicts_the_claims(term):
    assert len(term.calls("evict")) == 2


def test_sigterm_leaves_no_job_behind(term):
    pids = _job_pids(term)
    assert len(pids) == 2
    wait_until(lambda: not any(alive(pid) for pid in pids), 10, what="jobs to be gone")


def test_sigterm_cleans_the_execute_directory(term):
    assert list((term.root / "execute").iterdir()) == []


def quit_one_job(pool: Pool) -> None:
    pool.wait_log("job 1.0 started")
    signal_and_wait(pool, signal.SIGQUIT)


@pytest.fixture(scope="module", params=MODES)
def quit_(request):
    config = "MachineMaxVacateTime = 60\nSTARTD_SHUTDOWN_GRACE = 60\n"
    with finished_run("quit", request.param, config, quit_one_job,
                      queue_term_ignoring_job) as pool:
        yield pool


def test_sigquit_kills_fast(quit_):
    assert quit_.status == 0
    assert quit_.took_s < 8.0
    assert "fast shutdown" in quit_.log_text()


def test_sigquit_job_is_killed(quit_):
    exits = quit_.calls("exit")
    assert [c.args[-1] for c in exits] == ["evict"]
    pids = _job_pids(quit_)
    wait_until(lambda: not any(alive(pid) for pid in pids), 10, what="the job to be gone")


@pytest.mark.parametrize("mode", MODES)
def test_sighup_rereads_the_configuration(mode):
    base = "FetchWorkDelay = 0\nFETCH_WORK_MIN_INTERVAL = 0.3\nSTARTD_ATTRS = Color\n"
    with configured_pool("hup", mode, base + 'Color = "blue"\n') as pool:
        with running(pool) as proc:
            pool.wait_calls("fetch", 1)
            reconfigure(pool, base + 'Color = "red"\n')
            proc.send_signal(signal.SIGHUP)
            pool.wait_log("configuration reloaded")

            def red() -> bool:
                return any(c.slot_attr("Color") == '"red"' or ads.parse_ad(c.stdin).get("Color")
                           == "red" for c in pool.calls("fetch"))

            wait_until(red, 20, fail_if=pool.exited, what="a fetch with the new slot ad")
            assert ads.parse_ad(pool.calls("fetch")[0].stdin)["Color"] == "blue"
        assert pool.status == 0


@pytest.mark.parametrize("mode", MODES)
def test_once_without_work_exits_after_one_fetch_per_slot(mode):
    with configured_pool("once", mode, "NUM_SLOTS = 2\n") as pool:
        assert pool.start("--once").wait(30) == 0
        assert len(pool.calls("fetch")) == 2


def test_once_without_fetch_hooks_exits_at_once():
    with pool_root("once-nohooks") as root:
        pool = Pool(root)
        pool.write_config("NUM_SLOTS = 2\n")
        assert pool.start("--once").wait(30) == 0
        assert "no fetch hook" in pool.log_text()
