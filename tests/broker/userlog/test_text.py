"""The user log's text: each event, as HTCondor's own reader (htcondor2.JobEventLog)
parses it, and which events each transition writes. Pure: no Redis."""

from __future__ import annotations

import time
from pathlib import Path

import htcondor2
import pytest

from fetchwork.broker.userlog import text
from fetchwork.broker.userlog.events import bodies, event_time_s, render
from fetchwork.broker.userlog.text import EventCode, Exit, ResourceTable, Usage

AT_S = 1_700_000_000.0
T = htcondor2.JobEventType


def parsed(tmp_path: Path, *events: str) -> list[htcondor2.JobEvent]:
    path = tmp_path / "job.log"
    path.write_text("".join(events))
    return list(htcondor2.JobEventLog(str(path)).events(0))


def one(tmp_path: Path, code: EventCode, body: str, cluster: int = 7,
        proc: int = 2) -> htcondor2.JobEvent:
    (event,) = parsed(tmp_path, text.event_text(code, cluster, proc, AT_S, body))
    assert (event.cluster, event.proc, event.timestamp) == (cluster, proc, int(AT_S))
    return event


def test_the_header_is_htcondors_iso_form_in_local_time():
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(AT_S))
    assert text.header(EventCode.JOB_HELD, 1234, 5, AT_S) == f"012 (1234.005.000) {stamp} "
    assert text.event_text(EventCode.SUBMIT, 1, 0, AT_S, "x\n").endswith("x\n...\n")


def test_submit_and_execute(tmp_path):
    event = one(tmp_path, EventCode.SUBMIT, text.submitted_body("<queue.host>"))
    assert event.type == T.SUBMIT and event["SubmitHost"] == "<queue.host>"
    event = one(tmp_path, EventCode.EXECUTE, text.executing_body("slot1@node"))
    assert event.type == T.EXECUTE and event["ExecuteHost"] == "slot1@node"


def test_terminated_with_a_return_value_usage_and_resources(tmp_path):
    body = text.terminated_body(Exit(code=3), Usage(61.7, 90061.0),
                                ResourceTable(memory_usage_mb=5, request_memory_mb=128,
                                          request_cpus=1, request_disk_kb=1000))
    assert "\t\tUsr 0 00:01:01, Sys 1 01:01:01  -  Run Remote Usage\n" in body
    event = one(tmp_path, EventCode.JOB_TERMINATED, body)
    assert event.type == T.JOB_TERMINATED
    assert event["TerminatedNormally"] is True and event["ReturnValue"] == 3
    assert event["RunRemoteUsage"] == "Usr 0 00:01:01, Sys 1 01:01:01"
    assert event["TotalRemoteUsage"] == event["RunRemoteUsage"]
    assert (event["MemoryUsage"], event["RequestMemory"], event["RequestCpus"],
            event["RequestDisk"]) == (5, 128, 1, 1000)


def test_terminated_by_a_signal(tmp_path):
    event = one(tmp_path, EventCode.JOB_TERMINATED, text.terminated_body(Exit(signal=9), Usage()))
    assert event["TerminatedNormally"] is False and event["TerminatedBySignal"] == 9


def test_evicted_held_released_aborted(tmp_path):
    event = one(tmp_path, EventCode.JOB_EVICTED, text.evicted_body(Usage(2, 1), "lease expired"))
    assert event.type == T.JOB_EVICTED and event["Reason"] == "lease expired"
    assert event["RunRemoteUsage"] == "Usr 0 00:00:02, Sys 0 00:00:01"
    event = one(tmp_path, EventCode.JOB_HELD, text.held_body("disk\nfull", 14, 28))
    assert event.type == T.JOB_HELD
    assert (event["HoldReason"], event["HoldReasonCode"], event["HoldReasonSubCode"]) == \
        ("disk full", 14, 28)
    event = one(tmp_path, EventCode.JOB_HELD, text.held_body("", 1, 0))
    # HTCondor's reader takes its own placeholder for "no reason".
    assert "HoldReason" not in event.keys() and event["HoldReasonCode"] == 1
    event = one(tmp_path, EventCode.JOB_RELEASED, text.released_body("via fetchwork release"))
    assert event.type == T.JOB_RELEASED and event["Reason"] == "via fetchwork release"
    event = one(tmp_path, EventCode.JOB_ABORTED, text.aborted_body("removed by alice"))
    assert event.type == T.JOB_ABORTED and event["Reason"] == "removed by alice"


def test_image_size_suspended_unsuspended(tmp_path):
    event = one(tmp_path, EventCode.IMAGE_SIZE, text.image_size_body(3000, 3000))
    assert (event["Size"], event["MemoryUsage"], event["ResidentSetSize"]) == (3000, 3, 3000)
    event = one(tmp_path, EventCode.JOB_SUSPENDED, text.suspended_body(4))
    assert event.type == T.JOB_SUSPENDED and event["NumberOfPIDs"] == 4
    assert one(tmp_path, EventCode.JOB_UNSUSPENDED, text.unsuspended_body()).type == \
        T.JOB_UNSUSPENDED


def codes(event: dict[str, str], job: dict | None = None) -> list[int]:
    return [int(code) for code, _body in bodies(event, job or {}, "<h>")]


@pytest.mark.parametrize(("event", "expected"), [
    ({"type": "submit", "state": "IDLE"}, [0]),
    ({"type": "submit", "state": "HELD"}, [0, 12]),
    ({"type": "submit", "state": "VALIDATING"}, [0]),
    ({"type": "claim", "state": "RUNNING", "slot": "s"}, [1]),
    ({"type": "activate", "state": "ACTIVATING"}, []),
    ({"type": "image", "state": "RUNNING", "size": "100"}, [6]),
    ({"type": "suspend", "state": "SUSPENDED"}, [10]),
    ({"type": "continue", "state": "RUNNING"}, [11]),
    ({"type": "hold", "state": "HELD", "hold_reason": "r", "hold_code": "1",
      "hold_subcode": "0"}, [12]),
    ({"type": "hold", "state": "RUNNING"}, []),       # a mark on a running job
    ({"type": "hold", "state": "HELD", "until": "9"}, []),  # a new HoldUntil only
    ({"type": "release", "state": "IDLE"}, [13]),
    ({"type": "release", "state": "BLOCKED"}, [13]),
    ({"type": "release", "state": "RUNNING"}, []),
    ({"type": "finish", "state": "IDLE"}, [4]),
    ({"type": "reap", "state": "IDLE"}, [4]),
    ({"type": "reject", "state": "IDLE"}, [4]),
    ({"type": "finish", "state": "COMPLETED"}, [5]),
    ({"type": "finish", "state": "REMOVED"}, [9]),
    ({"type": "remove", "state": "REMOVED"}, [9]),
    ({"type": "reap", "state": "FAILED"}, [9]),
    ({"type": "admit", "state": "FAILED"}, [9]),
    ({"type": "remove", "state": "RUNNING"}, []),
    ({"type": "block", "state": "BLOCKED"}, []),
    ({"type": "transfer", "state": "RUNNING", "kind": "input_queued"}, [40]),
    ({"type": "transfer", "state": "RUNNING", "kind": "output_finished", "success": "false"},
     [40]),
    ({"type": "transfer", "state": "RUNNING", "kind": "sideways"}, []),
    ({"type": "transfer", "state": "RUNNING"}, []),
])
def test_which_events_a_transition_writes(event, expected):
    assert codes(event) == expected


def test_the_event_carries_the_hold_and_the_job_the_rest(tmp_path):
    hold = {"type": "finish", "job": "3.1", "state": "HELD", "hold_reason": "over memory",
            "hold_code": "3", "hold_subcode": "7"}
    done = {"type": "finish", "job": "3.1", "state": "COMPLETED"}
    job = {"ExitCode": 2, "ExitBySignal": False, "RemoteUserCpu": 1.5, "RemoteSysCpu": 0.2,
           "ImageSize": 2048, "RequestMemory": 64, "RequestCpus": 1,
           "RequestDisk": {"$expr": "DiskUsage"}}
    held, ended = parsed(tmp_path, render("1700000000000-0", hold, {"HoldReason": "old"}, "<h>"),
                         render("1700000001500-3", done, job, "<h>"))
    assert (held.cluster, held.proc, held["HoldReason"], held["HoldReasonCode"],
            held["HoldReasonSubCode"]) == (3, 1, "over memory", 3, 7)
    assert ended["ReturnValue"] == 2 and ended["MemoryUsage"] == 2
    assert ended["RequestMemory"] == 64 and "RequestDisk" not in ended.keys()
    assert ended.timestamp == 1_700_000_001


def test_submitted_on_hold_takes_the_jobs_reason():
    (_submit, (code, body)) = bodies({"type": "submit", "state": "HELD"},
                                     {"LastHoldReason": "submitted on hold",
                                      "HoldReasonCode": None}, "<h>")
    assert code == EventCode.JOB_HELD
    assert body == "Job was held.\n\tsubmitted on hold\n\tCode 15 Subcode 0\n"


def test_a_stream_id_is_the_events_time():
    assert event_time_s("1700000001500-3") == 1_700_000_001.5


def test_a_run_the_job_policy_sent_back_says_why(tmp_path):
    rerun = {"type": "finish", "job": "4.0", "state": "IDLE",
             "reason": "The job's OnExitRemove expression was false"}
    (evicted,) = parsed(tmp_path, render("1700000000000-0", rerun, {}, "<h>"))
    assert evicted["Reason"] == "The job's OnExitRemove expression was false"
    (tmp_path / "two").mkdir()
    silent = {**rerun, "reason": ""}
    (plain,) = parsed(tmp_path / "two", render("1700000000000-0", silent, {}, "<h>"))
    assert plain["Reason"] == "the job was evicted from its slot"


@pytest.mark.parametrize(("kind", "transfer_type"), [
    ("input_queued", 1), ("input_started", 2), ("input_finished", 3),
    ("output_queued", 4), ("output_started", 5), ("output_finished", 6)])
def test_each_transfer_kind_is_htcondors_transfer_type(tmp_path, kind, transfer_type):
    entry = {"type": "transfer", "job": "7.2", "kind": kind, "bytes": "1048576",
             "success": "true"}
    (event,) = parsed(tmp_path, render("1700000000000-0", entry, {}, "<h>"))
    assert event.type == T.FILE_TRANSFER
    assert event["Type"] == transfer_type
    assert (event.cluster, event.proc) == (7, 2)
    assert "QueueingDelay" not in event and "Host" not in event


def test_a_transfer_event_carries_its_queueing_delay_and_host(tmp_path):
    started = {"type": "transfer", "job": "7.2", "kind": "input_started", "seconds": "12.7",
               "host": "slot1@node7"}
    queued = {"type": "transfer", "job": "7.2", "kind": "output_queued", "host": "slot1@node7",
              "seconds": "3"}
    first, second = parsed(tmp_path, render("1700000000000-0", started, {}, "<h>"),
                           render("1700000001000-0", queued, {}, "<h>"))
    assert (first["Type"], first["QueueingDelay"], first["Host"]) == (2, 12, "slot1@node7")
    # Only a started event says how long it was queued (HTCondor's QueueingDelay).
    assert (second["Type"], second["Host"]) == (4, "slot1@node7")
    assert "QueueingDelay" not in second


def test_a_transfer_body_is_htcondors_text():
    body = text.file_transfer_body(text.TransferType.OUTPUT_STARTED, 4, "slot2@n")
    assert body == ("Started transferring output files\n\tSeconds spent in queue: 4\n"
                    "\tTransferring to host: slot2@n\n")
    assert text.file_transfer_body(text.TransferType.INPUT_FINISHED) == (
        "Finished transferring input files\n")
