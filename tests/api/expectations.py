"""What htcondor2 documents for each answer of tests/api/htcondor_script.py.

The checks hold for any interface the script runs against: the types
htcondor2 documents (SubmitResult's methods, lists of `classad2.ClassAd`,
`act`'s ClassAd of counts, `edit`'s count) and what the script's calls must
have done to its jobs. An interface passes when `check(record)` raises
nothing; test_script.py runs it on fetchwork's answers, and test_interface.py
holds fetchwork's signatures against htcondor2's own.
"""

from __future__ import annotations

from typing import Any

import classad2

from tests.api.htcondor_script import Record

# The counts htcondor2's Schedd.act puts in its result ad.
ACT_COUNTS = ("TotalSuccess", "TotalNotFound", "TotalBadStatus", "TotalAlreadyDone",
              "TotalPermissionDenied", "TotalError", "TotalJobAds", "TotalChangedAds")
# SubmitResult's documented methods.
SUBMIT_RESULT = ("cluster", "first_proc", "num_procs", "clusterad")


def ads(value: Any) -> list[classad2.ClassAd]:
    """A list of ClassAds, as query and history return."""
    assert isinstance(value, list), type(value)
    assert all(isinstance(ad, classad2.ClassAd) for ad in value), value
    return value


def counts(value: Any) -> dict[str, int]:
    """act's result: a ClassAd with every count, whole numbers."""
    assert isinstance(value, classad2.ClassAd), type(value)
    found = {name: value[name] for name in ACT_COUNTS}
    assert all(isinstance(number, int) for number in found.values()), found
    return found


def attrs(ad: classad2.ClassAd) -> dict[str, Any]:
    return {name: ad[name] for name in ad.keys()}


def check(record: Record) -> None:
    """htcondor2's expectations on every answer of the script."""
    assert set(record.errors) <= {"edit_owner", "bad_constraint"}, record.errors
    items, held = record.results["submit_items"], record.results["submit_count"]
    for result in (items, held):
        for method in SUBMIT_RESULT:
            assert callable(getattr(result, method)), method
        assert isinstance(result.cluster(), int) and result.first_proc() == 0
    assert items.num_procs() == 2 and held.num_procs() == 3
    assert items.cluster() != held.cluster()
    cluster = held.cluster()

    queried = ads(record.results["query_held"])
    assert sorted(attrs(ad)["ProcId"] for ad in queried) == [0, 1, 2]
    assert all(set(attrs(ad)) == {"ClusterId", "ProcId", "JobStatus"} for ad in queried)
    assert all(ad["ClusterId"] == cluster and ad["JobStatus"] == 5 for ad in queried)
    assert sorted(ad["ProcId"] for ad in ads(record.results["query_expr"])) == [1, 2]
    assert len(ads(record.results["query_limit"])) == 1

    assert record.results["edit_one"] == 1
    tags = {ad["ProcId"]: ad.get("Tag") for ad in ads(record.results["query_tag"])}
    assert tags == {0: "edited", 1: None, 2: None}
    assert "edit_owner" in record.errors and "edit_owner" not in record.results

    assert counts(record.results["release_one"])["TotalSuccess"] == 1
    hold = counts(record.results["hold_twice"])
    assert (hold["TotalSuccess"], hold["TotalAlreadyDone"]) == (1, 1)
    reason = ads(record.results["query_reason"])
    assert [ad["HoldReason"] for ad in reason] == ["held by the script"]
    assert counts(record.results["release_last"])["TotalSuccess"] == 1
    again = counts(record.results["release_again"])
    assert (again["TotalSuccess"], again["TotalBadStatus"]) == (0, 1)
    assert counts(record.results["remove_missing"])["TotalNotFound"] == 1
    assert counts(record.results["remove_cluster"])["TotalSuccess"] == 3

    assert record.results["drained"] is True
    finished = ads(record.results["history_quick"])
    by_proc = {ad["ProcId"]: attrs(ad) for ad in finished}
    assert by_proc[0]["ExitCode"] == 0 and by_proc[1]["ExitCode"] == 3
    assert {ad["Word"] for ad in by_proc.values()} == {"alpha", "beta"}
    assert all(ad["JobStatus"] == 4 for ad in by_proc.values())
    assert len(ads(record.results["history_match"])) == 1
    removed = ads(record.results["history_removed"])
    assert sorted(ad["ProcId"] for ad in removed) == [0, 1, 2]
    assert all(ad["JobStatus"] == 3 for ad in removed)
    assert "bad_constraint" in record.errors

    assert record.results["log_terminated"] is True
    seen = record.results["log_events"]
    for proc in (0, 1):
        kinds = [kind for kind, cluster, job in seen
                 if (cluster, job) == (items.cluster(), proc)]
        assert kinds[0] == "SUBMIT" and "EXECUTE" in kinds and kinds[-1] == "JOB_TERMINATED"
