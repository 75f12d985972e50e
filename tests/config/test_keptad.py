"""A kept ad reads its values back without making classad2 objects, and behaves as
the ClassAd it is: evaluation, formatting, case-insensitive names, in-place loads."""

from __future__ import annotations

from typing import Any

import classad2
import pytest

from fetchwork.config import ads
from fetchwork.config.keptad import KeptAd
from fetchwork.config.matching import mismatch

START = ads.parse_expr('TARGET.Owner =!= "nobody" && TARGET.RequestMemory <= Memory')
REQUIREMENTS = ads.parse_expr("TARGET.Memory >= RequestMemory")


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many ClassAd and ExprTree objects are made from now on."""
    count = [0]
    for cls in (classad2.ClassAd, classad2.ExprTree):
        original = cls.__init__

        def counted(obj: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            count[0] += 1
            _original(obj, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counted)
    return count


def job(**more: Any) -> KeptAd:
    return KeptAd({"Cmd": "/bin/true", "Owner": "alice", "RequestMemory": 64,
                   "Requirements": REQUIREMENTS, **more})


def test_values_read_back_are_the_values_set():
    ad = job(Lease=1.5, Rerunnable=True)
    assert ad["Requirements"] is REQUIREMENTS and ad["Lease"] == 1.5
    assert ad.get("requirements") is REQUIREMENTS and "OWNER" in ad and "Nope" not in ad
    assert ad.lookup("Requirements") is REQUIREMENTS
    assert ad.attrs()["Rerunnable"] is True


def test_reading_and_matching_a_kept_ad_makes_no_object(made):
    slot = KeptAd({"Name": "slot1@h", "Memory": 2048, "Cpus": 1, "Start": START})
    job_ad = job()
    made[0] = 0
    for _ in range(50):
        assert mismatch(slot, job_ad) is None
        assert ads.format_ad(job_ad).startswith(("Cmd", "Owner", "Requirements", "RequestMemory"))
        assert job_ad["Requirements"] is REQUIREMENTS
    assert made[0] == 0


def test_a_plain_ad_makes_an_object_at_each_read(made):
    """What the kept ad saves: a ClassAd makes a new ExprTree at every read."""
    plain = classad2.ClassAd()
    plain["Requirements"] = REQUIREMENTS
    made[0] = 0
    for _ in range(10):
        plain.get("Requirements")
    assert made[0] == 10


def test_load_changes_only_what_differs_and_drops_what_is_gone(made):
    ad = job(Extra=1)
    version = ad.version
    made[0] = 0
    ad.load({"Cmd": "/bin/true", "Owner": "bob", "RequestMemory": 64,
             "Requirements": REQUIREMENTS})
    assert made[0] == 0
    assert ad.version == version + 2  # Owner set, Extra deleted
    assert ad["Owner"] == "bob" and "Extra" not in ad
    assert sorted(ads.format_ad(ad).splitlines()) == sorted(
        ads.format_ad(ads.parse_ad(ads.format_ad(ad))).splitlines())


def test_load_keeps_what_it_is_told_to():
    ad = job(ClaimId="c1")
    ad.load({"Cmd": "/bin/false"}, keep=["ClaimId"])
    assert ad.attrs() == {"Cmd": "/bin/false", "ClaimId": "c1"}


def test_a_name_in_another_case_is_the_same_attribute():
    ad = job()
    ad["owner"] = "carol"
    assert ad["Owner"] == "carol" and len(ad) == 4
    del ad["OWNER"]
    assert "Owner" not in ad and len(ad) == 3


def test_other_values_are_read_from_the_ad_as_before():
    listed = ads.parse_expr("{1, 2}")
    ad = KeptAd({"L": listed, "U": ads.parse_expr("undefined")})
    assert ad["L"] == [1, 2]
    assert ad["U"] is classad2.Value.Undefined
    assert ads.evaluate_attr(ad, "U") is classad2.Value.Undefined


def test_evaluating_a_kept_attribute_uses_the_ad_as_my():
    slot = KeptAd({"Memory": 32, "Start": START})
    assert ads.evaluate_attr(slot, "Start", job()) is False
    slot["Memory"] = 4096
    assert ads.evaluate_attr(slot, "Start", job()) is True
