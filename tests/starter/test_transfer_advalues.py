"""The job ad as the in-process transfer reads it (starter/transferstep.py
`AdValues`): each value converted when read, exactly as `to_dict` converts the
whole ad (pure: no Redis, no processes)."""

from __future__ import annotations

import classad2

from fetchwork.config.ads import to_dict
from fetchwork.starter.transferstep import AdValues


def _ad() -> classad2.ClassAd:
    ad = classad2.ClassAd({"ClusterId": 7, "ProcId": 0, "Cmd": "job.sh", "Ratio": 0.5,
                           "PreserveRelativePaths": True})
    ad["Later"] = classad2.ExprTree("ClusterId + 1")
    ad["Nothing"] = classad2.ExprTree("undefined")
    ad["Stats"] = classad2.ClassAd({"FetchworkFilesCount": 2})
    return ad


def test_values_read_one_by_one_are_those_of_the_whole_ad() -> None:
    ad = _ad()
    whole = to_dict(ad)
    values = AdValues(ad)
    assert {name: values[name] for name in values} == whole
    assert len(values) == len(whole)


def test_absent_attributes_read_as_absent() -> None:
    values = AdValues(_ad())
    assert values.get("UserLog") is None
    assert "TransferOutput" not in values
    assert values.get("Cmd") == "job.sh"
