"""Run until cancelled in the starter: the pure parts (who keeps the slot, until when,
what ends it early)."""

from __future__ import annotations

import classad2

from fetchwork.config.protocol import EVICT, HOLD, KILL, REMOVE, SUSPEND, VACATE
from fetchwork.starter.keepslot import end_at, keeps_slot, stop_how


def ad(**attrs):
    job = classad2.ClassAd()
    for name, value in attrs.items():
        job[name] = value
    return job


def test_only_a_job_that_asks_keeps_its_slot():
    assert keeps_slot(ad(RunUntilCanceled=True))
    assert not keeps_slot(ad(RunUntilCanceled=False))
    assert not keeps_slot(ad())


def test_the_slot_is_kept_until_the_run_time_from_the_jobs_start_is_used_up():
    # Started at 1000 (the broker's start wins over the starter's), 60 s allowed;
    # now is 1010 on the wall clock and 500 on the monotonic one: 50 s left.
    job = ad(AllowedJobDuration=60, JobCurrentStartDate=1000, JobStartDate=1005)
    assert end_at(job, now_wall_s=1010, now_mono_s=500) == 550
    assert end_at(ad(AllowedJobDuration=60, JobStartDate=1005), 1010, 500) == 555
    assert end_at(ad(AllowedJobDuration=60), 1010, 500) == 560
    assert end_at(ad(), 1010, 500) is None, "no run time: kept until cancelled"
    assert end_at(ad(AllowedJobDuration=0), 1010, 500) is None


def test_a_removal_hold_or_vacate_ends_a_kept_slot_and_suspend_does_not():
    assert stop_how(REMOVE) == REMOVE and stop_how(HOLD) == HOLD
    assert stop_how(VACATE) == EVICT and stop_how(KILL) == EVICT
    assert stop_how(SUSPEND) is None
