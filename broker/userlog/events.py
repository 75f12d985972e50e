"""Which user log events a transition writes, and what they say.

One entry of the pool's event stream (type, job, state, and the fields some
scripts add) with a few attributes of the job (`JOB_FIELDS`) becomes the
text of zero or more HTCondor user log events (userlog/text.py):

    submit                       -> 000 submitted (and 012 held when submitted on hold)
    claim (RUNNING)              -> 001 executing on the slot
    image                        -> 006 image size
    suspend, continue            -> 010, 011
    any -> HELD with hold fields -> 012 held (reason, code and subcode from the event)
    release -> IDLE              -> 013 released
    finish, reap, reject -> IDLE -> 004 evicted (back in the queue)
    any -> COMPLETED             -> 005 terminated (return value or signal, CPU usage)
    any -> REMOVED or FAILED     -> 009 aborted (RemoveReason)
    transfer                     -> 040 file transfer (its `kind`, below)

A `transfer` entry (written by the execute side as a job's files move) has
`kind`: input_queued, input_started, input_finished, output_queued,
output_started or output_finished (HTCondor's transfer types 1 to 6), and
optionally `host` (where the files go), `seconds`, `bytes` and `success`
(true or false). On a started entry `seconds` is the time spent queued
(HTCondor's "Seconds spent in queue"); HTCondor's event carries neither the
bytes nor the outcome, so they stay in the stream (a failed transfer is
followed by its hold). An unknown kind writes nothing.

Marks of a pending removal or hold on a running job write nothing: its
event comes when the claim ends. Pure: the event's time is its stream id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fetchwork.config.protocol import HoldCode, parse_job_id

from .text import (
    EventCode,
    Exit,
    ResourceTable,
    TransferType,
    Usage,
    aborted_body,
    event_text,
    evicted_body,
    executing_body,
    file_transfer_body,
    held_body,
    image_size_body,
    released_body,
    submitted_body,
    suspended_body,
    terminated_body,
    unsuspended_body,
)

# The job attributes the events need besides the stream entry itself.
JOB_FIELDS = ("UserLog", "Iwd", "HoldReason", "LastHoldReason", "HoldReasonCode",
              "HoldReasonSubCode", "RemoveReason", "ExitCode", "ExitBySignal", "ExitSignal",
              "RemoteUserCpu", "RemoteSysCpu", "ImageSize", "NumPids", "RequestCpus",
              "RequestMemory", "RequestDisk")

# Why a job went back to the queue, by the transition that sent it.
EVICTION_REASONS = {
    "reap": "the job's lease expired (its startd stopped renewing it)",
    "reject": "the slot declined the job",
    "finish": "the job was evicted from its slot",
}


def event_time_s(event_id: str) -> float:
    """The time of a stream entry: its id is `<ms>-<seq>`."""
    return int(event_id.partition("-")[0]) / 1000.0


def _number(job: Mapping[str, Any], name: str) -> float | None:
    value = job.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _whole(job: Mapping[str, Any], name: str) -> int | None:
    value = _number(job, name)
    return None if value is None else int(value)


def _text(job: Mapping[str, Any], name: str) -> str:
    value = job.get(name)
    return value if isinstance(value, str) else ""


def usage_of(job: Mapping[str, Any]) -> Usage:
    return Usage(_number(job, "RemoteUserCpu") or 0.0, _number(job, "RemoteSysCpu") or 0.0)


def exit_of(job: Mapping[str, Any]) -> Exit:
    signal = _whole(job, "ExitSignal")
    if job.get("ExitBySignal") is True and signal is not None:
        return Exit(signal=signal)
    return Exit(code=_whole(job, "ExitCode") or 0)


def resources_of(job: Mapping[str, Any]) -> ResourceTable:
    size_kb = _whole(job, "ImageSize")
    return ResourceTable(memory_usage_mb=None if size_kb is None else math.ceil(size_kb / 1024),
                     request_memory_mb=_whole(job, "RequestMemory"),
                     request_cpus=_whole(job, "RequestCpus"),
                     request_disk_kb=_whole(job, "RequestDisk"))


# A `transfer` entry's kind -> HTCondor's transfer type.
TRANSFER_KINDS = {
    "input_queued": TransferType.INPUT_QUEUED,
    "input_started": TransferType.INPUT_STARTED,
    "input_finished": TransferType.INPUT_FINISHED,
    "output_queued": TransferType.OUTPUT_QUEUED,
    "output_started": TransferType.OUTPUT_STARTED,
    "output_finished": TransferType.OUTPUT_FINISHED,
}
STARTED = (TransferType.INPUT_STARTED, TransferType.OUTPUT_STARTED)


def _transfer(event: Mapping[str, str]) -> list[tuple[EventCode, str]]:
    kind = TRANSFER_KINDS.get(event.get("kind", ""))
    if kind is None:
        return []
    queued_s = None
    if kind in STARTED:
        try:
            queued_s = int(float(event.get("seconds", "")))
        except ValueError:
            queued_s = None
    return [(EventCode.FILE_TRANSFER, file_transfer_body(kind, queued_s, event.get("host", "")))]


def _held(event: Mapping[str, str], job: Mapping[str, Any]) -> str:
    if "hold_code" in event:
        return held_body(event.get("hold_reason", ""), int(event["hold_code"] or 0),
                         int(event.get("hold_subcode") or 0))
    # Submitted on hold: the reason is the job's (or, once released, its last one).
    reason = _text(job, "HoldReason") or _text(job, "LastHoldReason") or "submitted on hold"
    code = _whole(job, "HoldReasonCode") or int(HoldCode.SUBMITTED_ON_HOLD)
    return held_body(reason, code, _whole(job, "HoldReasonSubCode") or 0)


def bodies(event: Mapping[str, str], job: Mapping[str, Any],
           host: str) -> list[tuple[EventCode, str]]:
    """The user log events (number, body) of one stream entry; `host` is the queue's."""
    kind, state = event.get("type", ""), event.get("state", "")
    if kind == "submit":
        found = [(EventCode.SUBMIT, submitted_body(host))]
        if state == "HELD":
            found.append((EventCode.JOB_HELD, _held(event, job)))
        return found
    if kind == "image" and event.get("size", "").isdigit():
        return [(EventCode.IMAGE_SIZE, image_size_body(int(event["size"]), int(event["size"])))]
    if kind == "suspend":
        return [(EventCode.JOB_SUSPENDED, suspended_body(_whole(job, "NumPids") or 1))]
    if kind == "continue":
        return [(EventCode.JOB_UNSUSPENDED, unsuspended_body())]
    if kind == "transfer":
        return _transfer(event)
    if kind == "claim" and state == "RUNNING":
        return [(EventCode.EXECUTE, executing_body(event.get("slot", "")))]
    if state == "HELD" and "hold_code" in event:
        return [(EventCode.JOB_HELD, _held(event, job))]
    if state in ("IDLE", "BLOCKED") and kind == "release":  # BLOCKED: still on dependencies
        timed = event.get("reason") == "HoldUntil"
        reason = "HoldUntil passed" if timed else "via fetchwork release"
        return [(EventCode.JOB_RELEASED, released_body(reason))]
    if state == "IDLE" and kind in EVICTION_REASONS:
        # A run the job policy sent back (on_exit_remove false) says why.
        reason = event.get("reason") or EVICTION_REASONS[kind]
        return [(EventCode.JOB_EVICTED, evicted_body(usage_of(job), reason))]
    if state == "COMPLETED":
        return [(EventCode.JOB_TERMINATED,
                 terminated_body(exit_of(job), usage_of(job), resources_of(job)))]
    if state in ("REMOVED", "FAILED"):
        return [(EventCode.JOB_ABORTED, aborted_body(_text(job, "RemoveReason")))]
    return []


def render(event_id: str, event: Mapping[str, str], job: Mapping[str, Any], host: str) -> str:
    """The text one stream entry appends to its job's user log ('' for none)."""
    cluster, proc = parse_job_id(event.get("job", ""))
    at_s = event_time_s(event_id)
    return "".join(event_text(code, cluster, proc or 0, at_s, body)
                   for code, body in bodies(event, job, host))
