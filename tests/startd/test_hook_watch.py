"""An in-process hook of the startd that hangs is abandoned at its timeout.

A `python:` reply hook that hangs is abandoned at its timeout and said as a
warning, while the slot goes on running its jobs.
"""

from __future__ import annotations

import re

from tests.support.startd import QUEUE_DELAY, Pool, pool_root


def test_a_hung_in_process_reply_hook_is_abandoned_at_its_timeout():
    with pool_root("hook-watch") as root:
        pool = Pool(root, "python")
        pool.write_config(
            "STARTD_JOB_HOOK_KEYWORD = GOOD\nGOOD_HOOK_REPLY_FETCH_TIMEOUT = 1\n"
            f"FetchWorkDelay = {QUEUE_DELAY}\n"
            + pool.keyword_config("GOOD", kinds=("fetch", "evict", "prepare", "exit"))
            + f"GOOD_HOOK_REPLY_FETCH = {pool.hook_value('hang')}\n"
            "GOOD_HOOK_REPLY_FETCH_ARGS = GOOD\n")
        jobs = [pool.add_job("GOOD", cmd="/bin/true") for _ in range(2)]
        pool.start()
        try:
            pool.wait_calls("exit", 2, timeout_s=30)
            # The startd's own warning, read at its next wake-up after the hook's end.
            log = pool.wait_log(f"REPLY_FETCH hook [GOOD accept] for job {jobs[0]} took",
                                timeout_s=30)
        finally:
            pool.stop()
        hangs = pool.calls("hang")
        assert [call.args[-1] for call in hangs] == ["accept", "accept"]
        warnings = [line for line in log.splitlines()
                    if "WARNING" in line and "REPLY_FETCH hook" in line]
        assert warnings and "timed out after 1s" in warnings[0], log[-3000:]
        took = re.search(rf"for job {re.escape(jobs[0])} took ([0-9.]+)s", warnings[0])
        assert took is not None and 1.0 <= float(took.group(1)) < 10.0, warnings
