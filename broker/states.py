"""Job states, their HTCondor status codes and the attributes the broker owns.

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

from enum import StrEnum

from fetchwork.config.protocol import JobStatus


class State(StrEnum):
    BLOCKED = "BLOCKED"
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    HELD = "HELD"
    COMPLETED = "COMPLETED"
    REMOVED = "REMOVED"
    FAILED = "FAILED"


JOB_STATUS = {
    State.BLOCKED: JobStatus.IDLE,
    State.IDLE: JobStatus.IDLE,
    State.RUNNING: JobStatus.RUNNING,
    State.SUSPENDED: JobStatus.SUSPENDED,
    State.HELD: JobStatus.HELD,
    State.COMPLETED: JobStatus.COMPLETED,
    State.REMOVED: JobStatus.REMOVED,
    State.FAILED: JobStatus.REMOVED,
}

FINISHED = frozenset({State.COMPLETED, State.REMOVED, State.FAILED})

# Attributes only the broker writes; renew()/finish() ignore them in `attrs`
# and submit() replaces them.
MANAGED_ATTRS = frozenset(name.lower() for name in (
    "ClusterId", "ProcId", "GlobalJobId", "QDate", "Owner", "JobStatus",
    "EnteredCurrentStatus", "FetchworkState", "FetchworkClaim", "FetchworkOrder",
    "FetchworkLeaseExpiry", "RemoteHost", "LastRemoteHost", "CompletionDate",
    "HoldReason", "HoldReasonCode", "LastHoldReason", "RemoveReason", "NumJobMatches",
    "HoldReasonSubCode",
    "FetchworkAutocluster",
))

# JobPrio only orders the idle set; values beyond this bound sort as the bound
# (the idle score must stay an exact double: 2**18 groups of 2**34 positions).
PRIO_BOUND = 2**18 - 1
# Positions per priority group in FetchworkOrder (scripts.py hands it to the Lua scripts).
PRIO_SCALE = 2**34


def clamp_prio(value: object) -> int:
    """JobPrio as used for ordering: an integer within +-PRIO_BOUND (non-numbers are 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(-PRIO_BOUND, min(PRIO_BOUND, int(value)))


def is_managed(name: str) -> bool:
    return name.lower() in MANAGED_ATTRS


def idle_order(prio: int, seq: int) -> int:
    """FetchworkOrder, the idle set's score: priority groups (higher JobPrio first),
    each ordered by `seq` (lib.lua's `head_of_group` puts a rejected job first in its group)."""
    return -prio * PRIO_SCALE + seq
