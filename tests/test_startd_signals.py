"""Signals on a real startd: SIGTERM (graceful, bounded), SIGQUIT (fast), SIGHUP (reload),
and `--once`.
"""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from fetchwork.config import ads
from tests.test_startd_harness import Pool, pool_root
from tests.waiting import wait_until

MODES = ["program", "python"]


def term_ignoring_job(pool: Pool) -> str:
    """A job script that ignores SIGTERM (only SIGKILL ends it)."""
    path = pool.root / "ignore-term.sh"
    path.write_text("#!/bin/sh\ntrap '' TERM\nwhile :; do sleep 1; done\n")
    path.chmod(0o755)
    return str(path)


def _job_pids(pool: Pool) -> list[int]:
    return [int(ads.parse_ad(c.stdin)["JobPid"]) for c in pool.calls("exit")
            if "JobPid" in ads.parse_ad(c.stdin)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module", params=MODES)
def term(request):
    """Two running jobs, one ignoring SIGTERM; MachineMaxVacateTime is longer than the grace."""
    with pool_root(f"term-{request.param}") as root:
        pool = Pool(root, request.param)
        pool.write_config("NUM_SLOTS = 2\nSTARTD_JOB_HOOK_KEYWORD = Q\n"
                          "MachineMaxVacateTime = 60\nSTARTD_SHUTDOWN_GRACE = 3\n"
                          + pool.keyword_config("Q"))
        pool.add_job("Q", cmd="/bin/sleep", args="60")
        pool.add_job("Q", cmd=term_ignoring_job(pool))
        proc = pool.start()
        try:
            pool.wait_log("job 1.0 started")
            pool.wait_log("job 2.0 started")
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            pool.status = proc.wait(30)
            pool.took_s = time.monotonic() - sent
        finally:
            pool.stop()
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
    wait_until(lambda: not any(_alive(pid) for pid in pids), 10, what="jobs to be gone")


def test_sigterm_cleans_the_execute_directory(term):
    assert list((term.root / "execute").iterdir()) == []


@pytest.fixture(scope="module", params=MODES)
def quit_(request):
    with pool_root(f"quit-{request.param}") as root:
        pool = Pool(root, request.param)
        pool.write_config("STARTD_JOB_HOOK_KEYWORD = Q\nMachineMaxVacateTime = 60\n"
                          "STARTD_SHUTDOWN_GRACE = 60\n" + pool.keyword_config("Q"))
        pool.add_job("Q", cmd=term_ignoring_job(pool))
        proc = pool.start()
        try:
            pool.wait_log("job 1.0 started")
            sent = time.monotonic()
            proc.send_signal(signal.SIGQUIT)
            pool.status = proc.wait(30)
            pool.took_s = time.monotonic() - sent
        finally:
            pool.stop()
        yield pool


def test_sigquit_kills_fast(quit_):
    assert quit_.status == 0
    assert quit_.took_s < 8.0
    assert "fast shutdown" in quit_.log_text()


def test_sigquit_job_is_killed(quit_):
    exits = quit_.calls("exit")
    assert [c.args[-1] for c in exits] == ["evict"]
    pids = _job_pids(quit_)
    wait_until(lambda: not any(_alive(pid) for pid in pids), 10, what="the job to be gone")


@pytest.mark.parametrize("mode", MODES)
def test_sighup_rereads_the_configuration(mode):
    with pool_root(f"hup-{mode}") as root:
        pool = Pool(root, mode)
        base = "STARTD_JOB_HOOK_KEYWORD = Q\nFetchWorkDelay = 0\nFETCH_WORK_MIN_INTERVAL = 0.3\n" \
               "STARTD_ATTRS = Color\n" + pool.keyword_config("Q")
        pool.write_config(base + 'Color = "blue"\n')
        proc = pool.start()
        try:
            pool.wait_calls("fetch", 1)
            pool.write_config(base + 'Color = "red"\n')
            proc.send_signal(signal.SIGHUP)
            pool.wait_log("configuration reloaded")

            def red() -> bool:
                return any(c.slot_attr("Color") == '"red"' or ads.parse_ad(c.stdin).get("Color")
                           == "red" for c in pool.calls("fetch"))

            wait_until(red, 20, fail_if=pool.exited, what="a fetch with the new slot ad")
            assert ads.parse_ad(pool.calls("fetch")[0].stdin)["Color"] == "blue"
        finally:
            assert pool.stop() == 0


@pytest.mark.parametrize("mode", MODES)
def test_once_without_work_exits_after_one_fetch_per_slot(mode):
    with pool_root(f"once-{mode}") as root:
        pool = Pool(root, mode)
        pool.write_config("NUM_SLOTS = 2\nSTARTD_JOB_HOOK_KEYWORD = Q\n"
                          + pool.keyword_config("Q"))
        proc = pool.start("--once")
        assert proc.wait(30) == 0
        assert len(pool.calls("fetch")) == 2


def test_once_without_fetch_hooks_exits_at_once():
    with pool_root("once-nohooks") as root:
        pool = Pool(root)
        pool.write_config("NUM_SLOTS = 2\n")
        assert pool.start("--once").wait(30) == 0
        assert "no fetch hook" in pool.log_text()
