"""The vocabulary every component shares: job ids, status and hold codes, the
words of the hook and starter protocols, and the names of sandbox files.

This module sits at the bottom of the dependency graph (it imports nothing
of fetchwork but the errors), so the broker, the hooks, the starter and the
startd all spell these facts the same way, from here. The Lua scripts get
the codes from here too (`broker/store/scripts.py` writes them into each script).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Any

from fetchwork.errors import JobIdError

# -- job ids -------------------------------------------------------------------

_JOB_ID_RE = re.compile(r"\A(\d+)\.(\d+)\Z")
_CLUSTER_RE = re.compile(r"\A(\d+)\Z")


def job_id(cluster: int, proc: int) -> str:
    """`ClusterId.ProcId`, as HTCondor writes a job id."""
    return f"{cluster}.{proc}"


def parse_job_id(text: str) -> tuple[int, int | None]:
    """`"12.3"` -> (12, 3); `"12"` (a whole cluster) -> (12, None); JobIdError otherwise."""
    text = text.strip()
    match = _JOB_ID_RE.match(text)
    if match:
        return int(match.group(1)), int(match.group(2))
    match = _CLUSTER_RE.match(text)
    if match:
        return int(match.group(1)), None
    raise JobIdError(f"{text!r} is not a job id: use ClusterId.ProcId (12.3) or a cluster (12)")


def job_id_key(text: str) -> tuple[int, int]:
    """A sort key for job ids `C.P` (a bare cluster sorts as `C.0`)."""
    cluster, proc = parse_job_id(text)
    return cluster, proc or 0


def _literal(ad: Any, name: str) -> Any:
    """A literal attribute of a ClassAd or a mapping, case-insensitively; None otherwise."""
    if isinstance(ad, Mapping):
        if name in ad:
            return ad[name]
        lower = name.lower()
        return next((value for key, value in ad.items() if key.lower() == lower), None)
    try:
        return ad[name] if name in ad else None
    except (KeyError, TypeError):
        return None


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def ad_job_id(ad: Any) -> str | None:
    """`ClusterId.ProcId` of a job ad (ClassAd or mapping) when both are whole numbers."""
    cluster, proc = _whole(_literal(ad, "ClusterId")), _whole(_literal(ad, "ProcId"))
    if cluster is None or proc is None:
        return None
    return job_id(cluster, proc)


# -- HTCondor's JobStatus -------------------------------------------------------

class JobStatus(enum.IntEnum):
    """HTCondor's numeric JobStatus, which the ads carry for hooks written for HTCondor."""

    IDLE = 1
    RUNNING = 2
    REMOVED = 3
    COMPLETED = 4
    HELD = 5
    TRANSFERRING_OUTPUT = 6
    SUSPENDED = 7


# condor_q's letters and words for them.
STATUS_LETTERS = {1: "I", 2: "R", 3: "X", 4: "C", 5: "H", 6: ">", 7: "S"}
STATUS_NAMES = {1: "idle", 2: "running", 3: "removed", 4: "completed", 5: "held",
                7: "suspended"}


class HoldCode(enum.IntEnum):
    """The HoldReasonCode values fetchwork sets (HTCondor's numbers)."""

    USER_REQUEST = 1
    JOB_POLICY = 3
    # HTCondor's CorruptedCredential: here, a job whose signature does not check on
    # the execute machine (starter/jobsignature.py).
    SIGNATURE_INVALID = 4
    # The starter could not set the job up (a file it could not open, a
    # program it could not run); HoldReasonSubCode holds the errno.
    STARTER_ERROR = 14
    SUBMITTED_ON_HOLD = 15
    # The job used more memory than its RequestMemory (MEMORY_LIMIT_POLICY = hold).
    MEMORY_EXCEEDED = 34
    # File transfer (transfer/): an output the job did not make, an input that
    # could not be had (a missing chunk, a failed URL: HoldReasonSubCode holds a
    # plugin's exit code), and the size limits of the job's sandboxes.
    TRANSFER_OUTPUT_ERROR = 12
    TRANSFER_INPUT_ERROR = 13
    MAX_TRANSFER_INPUT_SIZE_EXCEEDED = 32
    MAX_TRANSFER_OUTPUT_SIZE_EXCEEDED = 33


# -- the hook and starter protocols ---------------------------------------------

# How a job left its slot: the word the exit hook gets (HOOK_JOB_EXIT's argument).
EXIT, EVICT, HOLD, REMOVE = "exit", "evict", "hold", "remove"
EXIT_HOWS = (EXIT, EVICT, HOLD, REMOVE)

# The reply hook's argument.
ACCEPT, REJECT = "accept", "reject"

# Control words the startd writes to a starter (and an in-process hook asks for).
SUSPEND, CONTINUE, VACATE, KILL = "suspend", "continue", "vacate", "kill"
CONTROL_WORDS = (SUSPEND, CONTINUE, VACATE, KILL, REMOVE, HOLD)

# Files the startd writes into a job's sandbox (what `_CONDOR_JOB_AD` and
# `_CONDOR_MACHINE_AD` name).
JOB_AD_FILE = ".job.ad"
MACHINE_AD_FILE = ".machine.ad"


# -- text ----------------------------------------------------------------------

def clip(text: str, limit: int = 80) -> str:
    """`text` cut to `limit` characters with `...` when longer (for error messages)."""
    return text if len(text) <= limit else text[:limit] + "..."
