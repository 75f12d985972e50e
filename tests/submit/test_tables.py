"""The submit side's pure parts: condor_q-style tables, job selection, wait progress, JSON."""

from __future__ import annotations

import json

import pytest

from fetchwork.errors import JobIdError
from fetchwork.submit import tables
from fetchwork.submit.submitcli import ClusterProgress, job_failed
from fetchwork.submit.usercli import ads_json, id_constraint

# -- pure: tables and helpers ---------------------------------------------------------

NOW = 1_700_000_000.0


def test_queue_row_of_a_running_job() -> None:
    ad = {"ClusterId": 12, "ProcId": 3, "Owner": "ann", "QDate": NOW - 3600, "JobStatus": 2,
          "JobStartDate": NOW - 90061, "JobPrio": 5, "ImageSize": 2048, "Cmd": "/bin/sleep",
          "Arguments": "'100'"}
    row = tables.queue_row(ad, NOW)
    assert row == ("12.3", "ann", tables.date_text(NOW - 3600), "1+01:01:01", "R", "5", "2.0",
                   "sleep '100'")


def test_queue_row_of_an_idle_job_defaults() -> None:
    row = tables.queue_row({"ClusterId": 1, "ProcId": 0, "JobStatus": 1, "Cmd": "/x/y",
                            "Args": "a b"}, NOW)
    assert row[3:] == ("0+00:00:00", "I", "0", "0.0", "y a b")


def test_history_row_exit_and_completion() -> None:
    done = {"ClusterId": 2, "ProcId": 1, "JobStatus": 4, "ExitCode": 3, "JobDuration": 61,
            "CompletionDate": NOW, "Cmd": "/bin/false"}
    killed = {**done, "ExitBySignal": True, "ExitSignal": 9}
    assert tables.history_row(done, NOW)[3:] == ("0+00:01:01", "C", tables.date_text(NOW), "3",
                                                 "false")
    assert tables.history_row(killed, NOW)[6] == "SIG9"


def test_status_letters_and_clipped_command() -> None:
    assert [tables.status_letter({"JobStatus": s}) for s in (1, 2, 3, 4, 5, 7)] == list("IRXCHS")
    long_ad = {"Cmd": "/bin/echo", "Args": "x" * 100}
    assert len(tables.command_text(long_ad)) == tables.CMD_WIDTH
    assert tables.command_text(long_ad).endswith("...")


def test_slot_row_and_summary() -> None:
    slot = {"Name": "slot1@h", "State": "Claimed", "Activity": "Busy", "LoadAvg": 0.5,
            "Memory": 2048, "JobId": "4.0"}
    assert tables.slot_row(slot) == ("slot1@h", "Claimed", "Busy", "0.50", "2048", "4.0")
    assert tables.slot_summary([slot, {**slot, "Activity": "Idle"}]) == \
        "Total: 2 slots; 1 busy, 1 not busy"


def test_queue_summary_counts() -> None:
    ads = [{"JobStatus": 1}, {"JobStatus": 1}, {"JobStatus": 2}, {"JobStatus": 5}]
    assert tables.queue_summary(ads) == ("Total for query: 4 jobs; 0 completed, 0 removed, "
                                         "2 idle, 1 running, 1 held, 0 suspended")


def test_duration_text() -> None:
    assert tables.duration_text(0) == "0+00:00:00"
    assert tables.duration_text(86400 * 2 + 3661) == "2+01:01:01"
    assert tables.duration_text(None) == ""


@pytest.mark.parametrize("ids, constraint, expected", [
    ((), None, None),
    (("12",), None, "ClusterId == 12"),
    (("12.3", "4"), "Owner == \"x\"",
     "((ClusterId == 12 && ProcId == 3) || ClusterId == 4) && (Owner == \"x\")"),
])
def test_id_constraint(ids: tuple[str, ...], constraint: str | None, expected: str) -> None:
    assert id_constraint(ids, constraint) == expected


def test_id_constraint_rejects_garbage() -> None:
    with pytest.raises(JobIdError):
        id_constraint(("12.x",), None)


def test_job_failed() -> None:
    assert not job_failed({"JobStatus": 4, "ExitCode": 0})
    assert job_failed({"JobStatus": 4, "ExitCode": 2})
    assert job_failed({"JobStatus": 4, "ExitCode": 0, "ExitBySignal": True})
    assert job_failed({"JobStatus": 3})
    assert job_failed({"JobStatus": 5})


def test_cluster_progress_from_events_and_looks() -> None:
    progress = ClusterProgress(["5.0", "5.1", "5.2"])
    progress.saw({"job": "5.0", "state": "RUNNING", "status": "2"})
    progress.saw({"job": "5.1", "state": "COMPLETED", "status": "4"})
    progress.saw({"job": "9.9", "state": "COMPLETED", "status": "4"})
    assert progress.summary() == "1 running, 1 idle" and progress.finished() == 1
    assert not progress.settled()
    progress.reconcile([{"ClusterId": 5, "ProcId": 2, "JobStatus": 5}])
    assert progress.finished() == 2 and progress.settled()
    assert progress.summary() == "0 running, 0 idle, 1 held"


def test_ads_json_uses_htcondor_form() -> None:
    out = json.loads(ads_json([{"A": 1, "R": {"$expr": "TARGET.Memory > 1"}}]))
    assert out == [{"A": 1, "R": "/Expr(TARGET.Memory > 1)/"}]
