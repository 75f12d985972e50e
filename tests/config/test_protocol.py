"""The shared vocabulary and the one match rule (pure, no Redis)."""

from __future__ import annotations

import pytest

from fetchwork.config.ads import parse_ad
from fetchwork.config.matching import matches, mismatch
from fetchwork.config.protocol import ad_job_id, clip, job_id, job_id_key, parse_job_id
from fetchwork.errors import JobIdError


def test_job_ids_round_trip_and_sort_numerically():
    assert parse_job_id(job_id(12, 3)) == (12, 3)
    assert parse_job_id(" 12 ") == (12, None)
    assert sorted(["10.0", "9.1", "9.10", "9.2"], key=job_id_key) == ["9.1", "9.2", "9.10",
                                                                         "10.0"]
    with pytest.raises(JobIdError, match="not a job id"):
        parse_job_id("12.x")


def test_an_ads_job_id_needs_whole_cluster_and_proc():
    assert ad_job_id(parse_ad("ClusterId = 4\nProcId = 0\n")) == "4.0"
    assert ad_job_id({"clusterid": 4, "PROCID": 2}) == "4.2"
    assert ad_job_id(parse_ad("ClusterId = 4\n")) is None
    assert ad_job_id({"ClusterId": "4", "ProcId": 1}) is None
    assert ad_job_id({"ClusterId": True, "ProcId": 1}) is None


def test_clip_marks_what_it_cut():
    assert clip("abc", 5) == "abc"
    assert clip("abcdefgh", 5) == "abcde..."


SLOT = parse_ad('Name = "slot1@m"\nMemory = 2048\n')


def test_a_missing_start_accepts_on_both_sides_of_the_system():
    job = parse_ad('Cmd = "/bin/true"\nRequirements = TARGET.Memory >= 1024\n')
    assert "Start" not in SLOT
    assert matches(job, SLOT)
    assert mismatch(SLOT, job) is None


def test_start_and_requirements_refuse_when_false_or_undefined():
    job = parse_ad('Owner = "mallory"\n')
    slot = parse_ad('Name = "s"\nStart = TARGET.Owner == "alice"\n')
    assert mismatch(slot, job) == "START for this job is not true"
    undefined = parse_ad("Requirements = TARGET.NoSuchAttr > 1\n")
    assert not matches(undefined, SLOT)
    assert "Requirements" in (mismatch(SLOT, undefined) or "")
