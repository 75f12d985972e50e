"""Job states, HTCondor status codes, job ids and the attributes the broker owns.

Every job ad carries `FetchworkState` (the state name below) and `JobStatus`
(HTCondor's code). The transitions, each one Lua script:

    (submit)   -> IDLE | HELD         stage.lua then submit.lua (HELD when the ad says hold = true)
    IDLE       -> RUNNING             claim.lua
    RUNNING    -> IDLE                reject.lua (head of its priority group)
    RUNNING    -> SUSPENDED -> RUNNING renew.lua (suspended flag)
    RUNNING    -> COMPLETED           finish.lua how=exit
    RUNNING    -> IDLE | FAILED       finish.lua how=evict, reap.lua (Rerunnable decides)
    RUNNING    -> HELD                finish.lua how=hold
    RUNNING    -> REMOVED             finish.lua how=remove
    IDLE|HELD  -> REMOVED             remove.lua
    IDLE       -> HELD                hold.lua
    HELD       -> IDLE                release.lua

A running (or suspended) job that is removed or held keeps its claim and its
state; only its JobStatus changes to 3 or 5 at once (HTCondor shows a job
being removed as X the same way). renew() then answers "removed" or "held" so
the execute side stops it; its finish(), or the reaper when the lease lapses,
completes the transition (a pending removal wins over any `how`; a pending
hold wins over evict). FAILED has no HTCondor code: such a job leaves the
queue like a job removed by the system, with JobStatus 3 and a RemoveReason.
BLOCKED is reserved for scheduling policy; nothing produces it yet.
"""

from __future__ import annotations

import re
from enum import StrEnum

from fetchwork.errors import JobIdError


class State(StrEnum):
    BLOCKED = "BLOCKED"
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    HELD = "HELD"
    COMPLETED = "COMPLETED"
    REMOVED = "REMOVED"
    FAILED = "FAILED"


# HTCondor JobStatus codes.
IDLE_STATUS = 1
RUNNING_STATUS = 2
REMOVED_STATUS = 3
COMPLETED_STATUS = 4
HELD_STATUS = 5
SUSPENDED_STATUS = 7

JOB_STATUS = {
    State.BLOCKED: IDLE_STATUS,
    State.IDLE: IDLE_STATUS,
    State.RUNNING: RUNNING_STATUS,
    State.SUSPENDED: SUSPENDED_STATUS,
    State.HELD: HELD_STATUS,
    State.COMPLETED: COMPLETED_STATUS,
    State.REMOVED: REMOVED_STATUS,
    State.FAILED: REMOVED_STATUS,
}

FINISHED = frozenset({State.COMPLETED, State.REMOVED, State.FAILED})
FINISH_HOWS = ("exit", "evict", "hold", "remove")
RENEW_ANSWERS = ("ok", "gone", "removed", "held")

# HTCondor HoldReasonCode values used here.
HOLD_CODE_USER = 1
HOLD_CODE_JOB_POLICY = 3
HOLD_CODE_SUBMITTED_ON_HOLD = 15

# Attributes only the broker writes; renew()/finish() ignore them in `attrs`
# and submit() replaces them.
MANAGED_ATTRS = frozenset(name.lower() for name in (
    "ClusterId", "ProcId", "GlobalJobId", "QDate", "Owner", "JobStatus",
    "EnteredCurrentStatus", "FetchworkState", "FetchworkClaim", "FetchworkOrder",
    "FetchworkLeaseExpiry", "RemoteHost", "LastRemoteHost", "CompletionDate",
    "HoldReason", "HoldReasonCode", "LastHoldReason", "RemoveReason", "NumJobMatches",
    "HoldReasonSubCode",
))

# JobPrio only orders the idle set; values beyond this bound sort as the bound
# (the idle score must stay an exact double: 2**18 groups of 2**34 positions).
PRIO_BOUND = 2**18 - 1
# Positions per priority group in FetchworkOrder (the same constant is in lua/lib.lua).
PRIO_SCALE = 2**34

_JOB_ID_RE = re.compile(r"\A(\d+)\.(\d+)\Z")
_CLUSTER_RE = re.compile(r"\A(\d+)\Z")


def job_id(cluster: int, proc: int) -> str:
    return f"{cluster}.{proc}"


def parse_job_id(text: str) -> tuple[int, int | None]:
    """`"12.3"` -> (12, 3); `"12"` (a whole cluster) -> (12, None)."""
    text = text.strip()
    match = _JOB_ID_RE.match(text)
    if match:
        return int(match.group(1)), int(match.group(2))
    match = _CLUSTER_RE.match(text)
    if match:
        return int(match.group(1)), None
    raise JobIdError(f"{text!r} is not a job id: use ClusterId.ProcId (12.3) or a cluster (12)")


def clamp_prio(value: object) -> int:
    """JobPrio as used for ordering: an integer within +-PRIO_BOUND (non-numbers are 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(-PRIO_BOUND, min(PRIO_BOUND, int(value)))


def is_managed(name: str) -> bool:
    return name.lower() in MANAGED_ATTRS
