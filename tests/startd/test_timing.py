"""FetchWorkDelay measured on a real startd: gaps, the running job as TARGET, job end."""

from __future__ import annotations

import pytest

from fetchwork.config import ads
from tests.support.startd_runs import MODES, finished_run


def gaps(calls) -> list[float]:
    return [later.at_s - earlier.at_s for earlier, later in zip(calls, calls[1:], strict=False)]


def state_of(call) -> tuple[str, str]:
    ad = ads.parse_ad(call.stdin)
    return ad["State"], ad["Activity"]


@pytest.fixture(scope="module", params=MODES)
def idle(request):
    """No work at all, FetchWorkDelay = 1: the slot fetches about once a second."""
    config = "FetchWorkDelay = 1\nFETCH_WORK_MIN_INTERVAL = 0.2\n"
    with finished_run("idle", request.param, config,
                      until=lambda pool: pool.wait_calls("fetch", 4, timeout_s=30)) as pool:
        yield pool


def test_fetch_work_delay_of_one_second_gives_one_second_gaps(idle):
    measured = gaps(idle.calls("fetch")[:4])
    assert len(measured) == 3
    # Counted from the end of the previous fetch, so never under 1 s; the
    # upper bound is loose, for a loaded machine.
    assert all(0.95 <= gap <= 4.0 for gap in measured), measured


def test_idle_fetches_see_an_unclaimed_slot(idle):
    states = {ads.parse_ad(call.stdin)["State"] for call in idle.calls("fetch")}
    assert states == {"Unclaimed"}


# 0 on an idle claim, the running job's FetchGap while it runs, 30 s unclaimed.
BUSY_DELAY = ('FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Idle", 0, '
              'ifThenElse(State == "Claimed", TARGET.FetchGap, 30))\n')


@pytest.fixture(scope="module", params=MODES)
def busy(request):
    """One 3 s job whose FetchGap attribute sets the delay while it runs."""
    with finished_run("busy", request.param, BUSY_DELAY,
                      before=lambda pool: pool.add_job("Q", cmd="/bin/sleep", args="3",
                                                       text="FetchGap = 1\n"),
                      until=lambda pool: pool.wait_calls("evict", 1, timeout_s=40)) as pool:
        yield pool


def test_busy_slot_fetches_with_the_running_job_as_target(busy):
    calls = busy.calls("fetch")
    during = [c for c in calls if state_of(c) == ("Claimed", "Busy")]
    # A 3 s job and TARGET.FetchGap = 1 s: fetches while it runs (30 s if
    # FetchWorkDelay did not see the job), never closer than 1 s.
    assert len(during) >= 2, [state_of(c) for c in calls]
    assert all(gap >= 0.95 for gap in gaps(during)), gaps(during)


def test_fetch_is_immediate_when_claimed_idle(busy):
    job_exit = busy.calls("exit")[0]
    evict = busy.calls("evict")[0]
    idle = [c for c in busy.calls("fetch") if state_of(c) == ("Claimed", "Idle")]
    assert len(idle) == 1, "one fetch on the idle claim, then the claim is evicted"
    # The fetch on the idle claim follows the job's exit hook, and the claim
    # is evicted after it found nothing.
    assert job_exit.at_s < idle[0].at_s < evict.at_s
    # FetchWorkDelay is 0 there; 30 s if the slot were Unclaimed.
    assert idle[0].at_s - job_exit.at_s < 15.0


def test_unclaimed_delay_applies_after_the_claim_is_evicted(busy):
    evict = busy.calls("evict")[0]
    assert not [c for c in busy.calls("fetch") if c.at_s > evict.at_s]
