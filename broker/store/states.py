"""Job states, their HTCondor status codes and the attributes the broker owns.

Every job ad carries `FetchworkState` (the state name below) and `JobStatus`
(HTCondor's code). The transitions, each one Lua script:

    (submit)   -> IDLE | HELD         stage.lua then submit.lua (HELD when the ad says hold = true)
    (submit)   -> VALIDATING          the same, while the leader publishes submission filters
    VALIDATING -> IDLE | HELD         admit.lua (the chains and the template accepted it)
    VALIDATING -> FAILED              admit_fail.lua
    (submit)   -> BLOCKED             submit.lua, when scheduling policy limits are set
    IDLE       -> BLOCKED             block.lua (the leader's scheduling pass,
                                      broker/scheduling/leaderpass.py)
    BLOCKED    -> IDLE                unblock.lua (the same pass)
    IDLE       -> RUNNING             claim_quiet.lua, claim.lua (claim.lua also BLOCKED
                                      by a soft PS limit only -> RUNNING, for a slot
                                      no IDLE job fits)
    IDLE       -> ACTIVATING          claim.lua, for a job with an activation chain
    ACTIVATING -> RUNNING             activate_start.lua (the chain answered 0)
    ACTIVATING -> IDLE                activate_defer.lua (1: block; 2, other, timeout: reserve),
                                      activate_abandon.lua, activation_expire.lua
    ACTIVATING -> HELD                activate_hold.lua (3, with HoldUntil)
    ACTIVATING -> FAILED              activate_fail.lua (4)
    HELD       -> IDLE                release_due.lua (HoldUntil passed)
    RUNNING    -> IDLE                reject.lua (head of its priority group)
    RUNNING    -> SUSPENDED -> RUNNING renew.lua (suspended flag)
    RUNNING    -> COMPLETED           finish.lua how=exit
    RUNNING    -> IDLE | FAILED       finish.lua how=evict, reap.lua (Rerunnable decides)
    RUNNING    -> HELD                finish.lua how=hold
    RUNNING    -> HELD | IDLE | REMOVED  policy_exit.lua: how=exit judged by the job's policy
                                      (OnExitHold, OnExitRemove false, PeriodicRemove;
                                      jobpolicy/expressions.py)
    IDLE|BLOCKED|ACTIVATING|HELD|RUNNING -> HELD | IDLE | REMOVED  policy_act.lua: the
                                      leader's periodic pass (PeriodicHold/Release/Remove)
    RUNNING    -> REMOVED             finish.lua how=remove
    RUNNING    -> FAILED              overrun.lua marks a job past its walltime; its end settles it
    RUNNING    -> IDLE                requeue.lua marks it; its end settles it (head of its group)
    BLOCKED    -> IDLE                depend.lua, every dependency completed with ExitCode 0
    BLOCKED|HELD|VALIDATING -> FAILED depend.lua, a dependency that cannot complete so
    IDLE|HELD|VALIDATING|ACTIVATING -> REMOVED  remove.lua
    IDLE|ACTIVATING -> HELD           hold.lua (with a HoldUntil when given)
    HELD       -> IDLE                release.lua (BLOCKED while it waits on dependencies)

A running (or suspended) job that is removed or held keeps its claim and its
state; only its JobStatus changes to 3 or 5 at once (HTCondor shows a job
being removed as X the same way). renew() then answers "removed" or "held" so
the execute side stops it; its finish(), or the reaper when the lease lapses,
completes the transition (a pending removal wins over any `how`; a pending
hold wins over evict). FAILED has no HTCondor code: such a job leaves the
queue like a job removed by the system, with JobStatus 3 and a RemoveReason.
BLOCKED jobs (JobStatus 1, with a BlockedReason) are the ones scheduling
policy keeps out of scheduling; with every policy knob 0 there are none.
VALIDATING and ACTIVATING jobs wait for the leader's filters (JobStatus 1,
in no idle set, so no slot can claim them).
"""

from __future__ import annotations

from enum import StrEnum

from fetchwork.config.protocol import JobStatus


class State(StrEnum):
    BLOCKED = "BLOCKED"
    VALIDATING = "VALIDATING"
    IDLE = "IDLE"
    ACTIVATING = "ACTIVATING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    HELD = "HELD"
    COMPLETED = "COMPLETED"
    REMOVED = "REMOVED"
    FAILED = "FAILED"


JOB_STATUS = {
    State.BLOCKED: JobStatus.IDLE,
    State.VALIDATING: JobStatus.IDLE,
    State.IDLE: JobStatus.IDLE,
    State.ACTIVATING: JobStatus.IDLE,
    State.RUNNING: JobStatus.RUNNING,
    State.SUSPENDED: JobStatus.SUSPENDED,
    State.HELD: JobStatus.HELD,
    State.COMPLETED: JobStatus.COMPLETED,
    State.REMOVED: JobStatus.REMOVED,
    State.FAILED: JobStatus.REMOVED,
}

FINISHED = frozenset({State.COMPLETED, State.REMOVED, State.FAILED})

# The broker's attribute: the dependencies a job still waits on, written as Depends is.
WAITING_ATTR = "FetchworkWaitingOn"

# Attributes only the broker writes; renew()/finish() ignore them in `attrs`
# and submit() replaces them.
MANAGED_ATTRS = frozenset(name.lower() for name in (
    "ClusterId", "ProcId", "GlobalJobId", "QDate", "Owner", "JobStatus",
    "EnteredCurrentStatus", "FetchworkState", "FetchworkClaim", "FetchworkOrder",
    "FetchworkLeaseExpiry", "RemoteHost", "LastRemoteHost", "CompletionDate",
    "HoldReason", "HoldReasonCode", "LastHoldReason", "RemoveReason", "NumJobMatches",
    "HoldReasonSubCode", "FetchworkActivateAfter", "FetchworkReservedSlot",
    # Set by the leader when it admits a job (broker/trust/signer.py).
    "FetchworkSignature",
    "FetchworkActivationReason", "FetchworkActivationSlot",
    # Written by the scheduling policy's pass (broker/scheduling/leaderpass.py).
    "BlockedReason", "BlockedBySoftLimit", "FetchworkBudget", "FetchworkCpus",
    "FetchworkWalltime", "FetchworkPsLimit", "FetchworkPriority", "FetchworkOverrun",
    # Run accounting, kept by claim and finish (lua/jobstates.lua start_claim, leave_claim, settle).
    "JobStartDate",
    "JobCurrentStartDate",
    "JobLastStartDate",
    "JobRunCount",
    "NumJobStarts",
    "NumJobCompletions",
    "RemoteWallClockTime",
    "LastRemoteWallClockTime",
    "CumulativeSlotTime",
    "CommittedTime",
    "CommittedSlotTime",
    # Set when the job policy's PeriodicRelease releases a job (lua/policy_act.lua).
    "ReleaseReason",
    # The dependencies a job still waits on (broker/dependencies/resolver.py).
    "FetchworkWaitingOn",
    # A running job the user requeued (requeue.lua): IDLE at the head of its group when it stops.
    "FetchworkRequeue",
    "FetchworkAutocluster",  # the job's autocluster (broker/autoclusters.py)
    "BypassCount",  # lower jobs started ahead of it while reserved (backfill/leader.py)
))

# JobPrio only orders the idle set; values beyond this bound sort as the bound
# (the idle score must stay an exact double: 2**18 groups of 2**34 positions).
PRIO_BOUND = 2**18 - 1
# Positions per priority group in FetchworkOrder (store/scripts.py hands it to the Lua scripts).
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
    each ordered by `seq` (lua/lib.lua's `head_of_group` puts a rejected job first in its group)."""
    return -prio * PRIO_SCALE + seq
