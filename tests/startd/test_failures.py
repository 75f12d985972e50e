"""Hooks that fail never stop the startd or the other slots.

Slot 1 fetches real work; slot 2's fetch hook hangs and is killed at its
3 s timeout; slot 3's fetch hook is refused (world-writable program) or
crashes (in-process hook raising); slot 4 has no fetch hook at all.
"""

from __future__ import annotations

import os

import pytest

from fetchwork.config import ads
from tests.support.startd import QUEUE_DELAY, Pool, make_world_writable, pool_root
from tests.support.waiting import wait_until

MODES = ["program", "python"]


@pytest.fixture(scope="module", params=MODES)
def run(request):
    mode = request.param
    with pool_root(f"failures-{mode}") as root:
        pool = Pool(root, mode)
        bad_fetch = "fetch" if mode == "program" else "crash"
        config = pool.write_config(
            "NUM_SLOTS = 4\nSTARTD_JOB_HOOK_KEYWORD = GOOD\nSLOT2_JOB_HOOK_KEYWORD = HUNG\n"
            "SLOT3_JOB_HOOK_KEYWORD = BAD\nSLOT4_JOB_HOOK_KEYWORD = NONE\n"
            "HUNG_HOOK_FETCH_WORK_TIMEOUT = 3\n"
            f"FetchWorkDelay = {QUEUE_DELAY}\n"
            + pool.keyword_config("GOOD") + pool.keyword_config("HUNG", fetch="hang"))
        if mode == "program":
            # A world-writable copy of the fetch hook.
            bad = root / "hooks" / "bad-fetch"
            bad.write_text((root / "hooks" / "fetch").read_text())
            bad.chmod(0o755)
            make_world_writable(bad)
            bad_value = str(bad)
        else:
            bad_value = pool.hook_value(bad_fetch)
        with open(config, "a") as handle:
            handle.write(f"BAD_HOOK_FETCH_WORK = {bad_value}\nBAD_HOOK_FETCH_WORK_ARGS = BAD\n")
        (pool.jobs_dir / "BAD").mkdir(exist_ok=True)
        pool.add_job("BAD")
        for _ in range(2):
            pool.add_job("GOOD", cmd="/bin/sleep", args="0.3")
        pool.start()
        try:
            pool.wait_calls("hang", 2, timeout_s=30)
            pool.wait_calls("exit", 2, timeout_s=30)
            pool.wait_log("slot3: fetch hook", timeout_s=30)
        finally:
            pool.status = pool.stop()
        yield pool


def test_other_slot_runs_its_jobs_while_a_fetch_hook_hangs(run):
    hangs = run.calls("hang")
    assert len(run.calls("exit")) == 2
    # The first job was prepared while slot 2's first fetch hook still hung
    # (before the fetch that followed its kill).
    assert hangs[0].at_s < hangs[1].at_s
    assert run.calls("prepare")[0].at_s < hangs[1].at_s


def test_hung_fetch_hook_is_killed_at_its_timeout(run):
    assert "HUNG_HOOK_FETCH_WORK" in run.log_text()
    assert "timed out after 3s" in run.log_text()
    hangs = run.calls("hang")
    # Killed after its 3 s, then the next fetch 1 s (FetchWorkDelay) later:
    # never sooner, and well before the 20 s of HOOK_TIMEOUT_FETCH_WORK.
    assert 3.5 <= hangs[1].at_s - hangs[0].at_s <= 15.0


def test_hung_program_hook_leaves_no_process(run):
    if run.mode != "program":
        pytest.skip("an in-process hook has no process")

    def gone() -> bool:
        try:
            os.killpg(run.calls("hang")[0].pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, 10, what="the hung hook's process group to be gone")


def test_refused_or_crashing_fetch_hook_is_logged_and_fetches_nothing(run):
    log = run.log_text()
    if run.mode == "program":
        assert "is world-writable" in log
    else:
        assert "raised RuntimeError: this hook crashes" in log
    assert (run.jobs_dir / "BAD" / "00001").exists()
    assert "slot3: Unclaimed/Idle -> Claimed" not in log


def test_slot_without_fetch_hook_never_fetches(run):
    log = run.log_text()
    assert "slot4: no fetch hook (keyword NONE)" in log
    assert "slot4: fetch" not in log


def test_startd_survives_and_exits_zero(run):
    assert run.status == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="SLOT_USER is only read by a root starter")
def test_failing_starter_gives_the_claim_back():
    with pool_root("bad-starter") as root:
        pool = Pool(root)
        pool.write_config("STARTD_JOB_HOOK_KEYWORD = Q\nSLOT_USER = no-such-user-fw\n"
                          'FetchWorkDelay = ifThenElse(Activity == "Busy", 300, 0)\n'
                          + pool.keyword_config("Q"))
        pool.add_job("Q")
        pool.add_job("Q")
        assert pool.start("--once").wait(30) == 0
        assert pool.log_text().count("(the starter failed)") == 2
        evicts = pool.calls("evict")
        assert sorted(ads.split_pair(c.stdin)[0]["ClusterId"] for c in evicts) == [1, 2]
        fetches = pool.calls("fetch")
        # After a failed starter the next fetch waits FETCH_WORK_MIN_INTERVAL (0.5 s).
        assert fetches[1].at_s - fetches[0].at_s >= 0.45
