"""FetchWorkDelay measured on a real startd: gaps, the running job as TARGET, job end."""

from __future__ import annotations

import pytest

from fetchwork.config import ads
from tests.test_startd_harness import Pool, pool_root

MODES = ["program", "python"]


def gaps(calls) -> list[float]:
    return [later.at_s - earlier.at_s for earlier, later in zip(calls, calls[1:], strict=False)]


@pytest.fixture(scope="module", params=MODES)
def idle(request):
    """No work at all, FetchWorkDelay = 1: the slot fetches about once a second."""
    with pool_root(f"idle-{request.param}") as root:
        pool = Pool(root, request.param)
        pool.write_config("STARTD_JOB_HOOK_KEYWORD = Q\nFetchWorkDelay = 1\n"
                          "FETCH_WORK_MIN_INTERVAL = 0.2\n" + pool.keyword_config("Q"))
        pool.start()
        try:
            pool.wait_calls("fetch", 4, timeout_s=30)
        finally:
            pool.stop()
        yield pool


def test_fetch_work_delay_of_one_second_gives_one_second_gaps(idle):
    measured = gaps(idle.calls("fetch")[:4])
    assert len(measured) == 3
    # Counted from the end of the previous fetch, so a little over 1 s each.
    assert all(0.95 <= gap <= 2.5 for gap in measured), measured


def test_idle_fetches_see_an_unclaimed_slot(idle):
    states = {ads.parse_ad(call.stdin)["State"] for call in idle.calls("fetch")}
    assert states == {"Unclaimed"}


@pytest.fixture(scope="module", params=MODES)
def busy(request):
    """One 3 s job whose FetchGap attribute sets the delay while it runs."""
    with pool_root(f"busy-{request.param}") as root:
        pool = Pool(root, request.param)
        pool.write_config(
            "STARTD_JOB_HOOK_KEYWORD = Q\n"
            'FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Idle", 0, '
            'ifThenElse(State == "Claimed", TARGET.FetchGap, 30))\n'
            + pool.keyword_config("Q"))
        pool.add_job("Q", cmd="/bin/sleep", args="3", text="FetchGap = 1\n")
        pool.start()
        try:
            pool.wait_calls("evict", 1, timeout_s=40)
        finally:
            pool.stop()
        yield pool


def test_busy_slot_fetches_with_the_running_job_as_target(busy):
    calls = busy.calls("fetch")
    during = [c for c in calls if ads.parse_ad(c.stdin)["Activity"] == "Busy"]
    assert len(during) >= 2, [ads.parse_ad(c.stdin)["Activity"] for c in calls]
    assert all(0.95 <= gap <= 2.5 for gap in gaps(during)), gaps(during)


def test_fetch_is_immediate_when_claimed_idle(busy):
    job_exit = busy.calls("exit")[0]
    idle = [c for c in busy.calls("fetch")
            if (ads.parse_ad(c.stdin)["State"], ads.parse_ad(c.stdin)["Activity"])
            == ("Claimed", "Idle")]
    assert len(idle) == 1, "one fetch on the idle claim, then the claim is evicted"
    # FetchWorkDelay is 0 there (30 s if the slot were Unclaimed): the fetch
    # follows the starter's exit, which follows the job's exit hook.
    assert 0 < idle[0].at_s - job_exit.at_s < 3.0


def test_unclaimed_delay_applies_after_the_claim_is_evicted(busy):
    evict = busy.calls("evict")[0]
    assert not [c for c in busy.calls("fetch") if c.at_s > evict.at_s]
