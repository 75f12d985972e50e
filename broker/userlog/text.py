"""HTCondor's job event log (user log) text: one event record in, its text out.

Each event is a header line `NNN (CCC.PPP.000) YYYY-MM-DD HH:MM:SS ` (event
number, job id, local time, as HTCondor writes by default) followed by the
event's body, and the line `...` that ends every event. The bodies follow
HTCondor's classic layout, so HTCondor's readers (`htcondor2.JobEventLog`,
condor_wait, DAGMan) parse them: 000 submitted, 001 executing, 004 evicted,
005 terminated with its return value or signal and the CPU usage block,
006 image size, 009 aborted, 010/011 suspended/unsuspended, 012 held with its
reason, code and subcode, 013 released, 040 file transfer (input or output
queued, started, finished). Pure: no clock, no files.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass

SEPARATOR = "...\n"


class EventCode(enum.IntEnum):
    """HTCondor's user log event numbers (the ones fetchwork writes)."""

    SUBMIT = 0
    EXECUTE = 1
    JOB_EVICTED = 4
    JOB_TERMINATED = 5
    IMAGE_SIZE = 6
    JOB_ABORTED = 9
    JOB_SUSPENDED = 10
    JOB_UNSUSPENDED = 11
    JOB_HELD = 12
    JOB_RELEASED = 13
    FILE_TRANSFER = 40


class TransferType(enum.IntEnum):
    """The kinds of HTCondor's file transfer event (040), its `Type` attribute."""

    INPUT_QUEUED = 1
    INPUT_STARTED = 2
    INPUT_FINISHED = 3
    OUTPUT_QUEUED = 4
    OUTPUT_STARTED = 5
    OUTPUT_FINISHED = 6


# The first line of a 040 event's body, by its type: HTCondor's readers
# recognise the type by this exact text.
TRANSFER_LINES = {
    TransferType.INPUT_QUEUED: "Entered queue to transfer input files",
    TransferType.INPUT_STARTED: "Started transferring input files",
    TransferType.INPUT_FINISHED: "Finished transferring input files",
    TransferType.OUTPUT_QUEUED: "Entered queue to transfer output files",
    TransferType.OUTPUT_STARTED: "Started transferring output files",
    TransferType.OUTPUT_FINISHED: "Finished transferring output files",
}


@dataclass(frozen=True)
class Usage:
    """CPU seconds a run used (HTCondor's "Run Remote Usage")."""

    user_cpu_s: float = 0.0
    sys_cpu_s: float = 0.0


@dataclass(frozen=True)
class Exit:
    """How a job's program ended: a return value, or the signal that killed it."""

    code: int = 0
    signal: int | None = None


@dataclass(frozen=True)
class ResourceTable:
    """The terminated event's table: what the job used and requested."""

    memory_usage_mb: int | None = None
    request_memory_mb: int | None = None
    request_cpus: int | None = None
    request_disk_kb: int | None = None


def header(code: EventCode, cluster: int, proc: int, at_s: float) -> str:
    """`NNN (CCC.PPP.000) YYYY-MM-DD HH:MM:SS ` in local time (HTCondor's ISO_DATE form)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(at_s)))
    return f"{int(code):03d} ({cluster:03d}.{proc:03d}.000) {stamp} "


def event_text(code: EventCode, cluster: int, proc: int, at_s: float, body: str) -> str:
    """One whole event: header, body (ending in a newline) and the `...` line."""
    return header(code, cluster, proc, at_s) + body + SEPARATOR


def _one_line(text: str) -> str:
    """A reason on one line (the log's layout is line by line)."""
    return " ".join(text.split())


def _cpu_time(seconds: float) -> str:
    """`D HH:MM:SS` of whole seconds."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days} {hours:02d}:{minutes:02d}:{secs:02d}"


def _usage_line(usage: Usage, label: str) -> str:
    return (f"\t\tUsr {_cpu_time(usage.user_cpu_s)}, Sys {_cpu_time(usage.sys_cpu_s)}"
            f"  -  {label}\n")


def submitted_body(host: str) -> str:
    return f"Job submitted from host: {host}\n"


def executing_body(host: str) -> str:
    return f"Job executing on host: {host}\n"


def evicted_body(usage: Usage, reason: str = "") -> str:
    """004: the job left its slot and goes back to the queue (not checkpointed)."""
    body = ("Job was evicted.\n\t(0) CPU times\n" + _usage_line(usage, "Run Remote Usage")
            + _usage_line(Usage(), "Run Local Usage")
            + "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n")
    if reason.strip():
        body += f"\tReason: {_one_line(reason)}\n"
    return body


def _resource_table(resources: ResourceTable) -> str:
    """The `Partitionable ResourceTable` table (Usage, Request, Allocated columns)."""
    rows = []
    for label, used, requested in (
            ("Cpus", None, resources.request_cpus),
            ("Disk (KB)", None, resources.request_disk_kb),
            ("Memory (MB)", resources.memory_usage_mb, resources.request_memory_mb)):
        if used is None and requested is None:
            continue
        rows.append((label, "" if used is None else str(used),
                     "" if requested is None else str(requested)))
    if not rows:
        return ""
    lines = [f"\tPartitionable Resources : {'Usage':>8} {'Request':>8} {'':>9} \n"]
    lines += [f"\t   {label:<20} : {used:>8} {requested:>8} {'':>9} \n"
              for label, used, requested in rows]
    return "".join(lines)


def terminated_body(end: Exit, usage: Usage, resources: ResourceTable | None = None) -> str:
    """005: the job's program ended and the job left the queue."""
    if end.signal is None:
        body = f"Job terminated.\n\t(1) Normal termination (return value {end.code})\n"
    else:
        body = (f"Job terminated.\n\t(0) Abnormal termination (signal {end.signal})\n"
                "\t(0) No core file\n")
    body += (_usage_line(usage, "Run Remote Usage") + _usage_line(Usage(), "Run Local Usage")
             + _usage_line(usage, "Total Remote Usage")
             + _usage_line(Usage(), "Total Local Usage"))
    body += "".join(f"\t0  -  {what} By Job\n" for what in (
        "Run Bytes Sent", "Run Bytes Received", "Total Bytes Sent", "Total Bytes Received"))
    return body + (_resource_table(resources) if resources is not None else "")


def image_size_body(image_size_kb: int, resident_set_size_kb: int | None = None) -> str:
    """006: the job's image size grew (with MemoryUsage in MB and the RSS in KB)."""
    body = f"Image size of job updated: {int(image_size_kb)}\n"
    if resident_set_size_kb is not None:
        memory_mb = math.ceil(resident_set_size_kb / 1024)
        body += (f"\t{memory_mb}  -  MemoryUsage of job (MB)\n"
                 f"\t{int(resident_set_size_kb)}  -  ResidentSetSize of job (KB)\n")
    return body


def aborted_body(reason: str) -> str:
    """009: the job left the queue without terminating (removed, or failed by policy)."""
    body = "Job was aborted.\n"
    if reason.strip():
        body += f"\t{_one_line(reason)}\n"
    return body


def suspended_body(num_pids: int) -> str:
    return f"Job was suspended.\n\tNumber of processes actually suspended: {num_pids}\n"


def unsuspended_body() -> str:
    return "Job was unsuspended.\n"


def held_body(reason: str, code: int, subcode: int) -> str:
    """012: the job was held, with HoldReason, HoldReasonCode and HoldReasonSubCode."""
    text = _one_line(reason) or "Reason unspecified"
    return f"Job was held.\n\t{text}\n\tCode {int(code)} Subcode {int(subcode)}\n"


def released_body(reason: str) -> str:
    """013: the job was released from its hold."""
    body = "Job was released.\n"
    if reason.strip():
        body += f"\t{_one_line(reason)}\n"
    return body


def file_transfer_body(kind: TransferType, queued_s: int | None = None, host: str = "") -> str:
    """040: a step of the job's file transfer, with the seconds it waited in the
    transfer queue (HTCondor's QueueingDelay) and the host it goes to, when known.
    HTCondor's event has no other lines: its readers know only these two."""
    body = TRANSFER_LINES[kind] + "\n"
    if queued_s is not None and queued_s >= 0:
        body += f"\tSeconds spent in queue: {int(queued_s)}\n"
    if host.strip():
        body += f"\tTransferring to host: {_one_line(host)}\n"
    return body
