"""Configuration on a real startd: START (Owner, no fetch), SUSPEND, CONTINUE, PREEMPT,
STARTER_JOB_HOOK_KEYWORD.
"""

from __future__ import annotations

import signal

from fetchwork.config import ads
from tests.support.startd import Pool, pool_root
from tests.support.startd_runs import configured_pool, reconfigure, running
from tests.support.waiting import wait_until


def _names(pool: Pool) -> list[str]:
    return [ads.parse_ad(call.stdin)["Name"] for call in pool.calls("fetch")]


def test_no_fetch_while_start_is_false_until_sighup_makes_it_true():
    base = "NUM_SLOTS = 2\nFetchWorkDelay = 1\n"
    # Without a job, START is false on slot1 and true on slot2.
    with configured_pool("start-false", config_text=base + "START = SlotID == 2\n") as pool:
        with running(pool, "--name", "h") as proc:
            pool.wait_calls("fetch", 3)
            assert set(_names(pool)) == {"slot2@h"}
            assert "slot1: Owner/Idle -> Unclaimed/Idle" not in pool.log_text()
            reconfigure(pool, base + "START = true\n")
            proc.send_signal(signal.SIGHUP)
            pool.wait_log("slot1: Owner/Idle -> Unclaimed/Idle")
            slot1 = wait_until(lambda: [c for c in pool.calls("fetch")
                                        if ads.parse_ad(c.stdin)["Name"] == "slot1@h"],
                               20, fail_if=pool.exited, what="a fetch by slot1")
            assert ads.parse_ad(slot1[0].stdin)["State"] == "Unclaimed"
        assert pool.status == 0


def test_once_counts_a_slot_whose_start_is_false_as_done():
    with configured_pool("once-owner", config_text="START = false\n") as pool:
        assert pool.start("--once").wait(30) == 0
        assert pool.calls("fetch") == []


def test_suspend_then_preempt_a_running_job():
    config = ("FetchWorkDelay = 300\nWANT_SUSPEND = true\n"
              "SUSPEND = TARGET.SuspendMe =?= true\nCONTINUE = false\n"
              'PREEMPT = Activity == "Suspended"\n')
    with configured_pool("suspend", config_text=config) as pool:
        pool.add_job("Q", cmd="/bin/sleep", args="60", text="SuspendMe = true\n")
        with running(pool):
            pool.wait_log("slot1: Claimed/Busy -> Claimed/Suspended")
            pool.wait_log("slot1: Claimed/Suspended -> Preempting/Vacating (PREEMPT is true)")
            exits = pool.wait_calls("exit", 1)
            assert exits[0].args[-1] == "evict"
            assert len(pool.wait_calls("evict", 1)) == 1
        assert pool.status == 0


def test_starter_job_hook_keyword_overrides_the_hook_keyword():
    with pool_root("starter-keyword") as root:
        pool = Pool(root)
        pool.write_config("STARTD_JOB_HOOK_KEYWORD = Q\nSTARTER_JOB_HOOK_KEYWORD = S\n"
                          + pool.keyword_config("Q", kinds=("fetch",))
                          + pool.keyword_config("S", kinds=("prepare", "exit")))
        pool.add_job("Q")
        assert pool.start("--once").wait(30) == 0
        exits = pool.calls("exit")
        assert [c.args for c in exits] == [["S", "exit"]]
        assert ads.parse_ad(exits[0].stdin)["HookKeyword"] == "Q"
        assert [c.args for c in pool.calls("prepare")] == [["S"]]
