"""Pure shaping of job ads on their way into the queue.

`prepare_submitted` turns one normalized ad (a to_dict-style mapping) into
what stage.lua stores, before the job's place is known: the attributes the
caller may set, the clamped priority and whether the job starts HELD.
`identity` decides the attributes that name and place a job (Owner,
ClusterId, ProcId, GlobalJobId, FetchworkOrder), once; `place` puts them and
the initial state on a prepared job. `caller_attrs` filters what the execute
side may write through renew() and finish(). `slot_name`, `ad_bool` and
`ad_prio` read a slot's name, a boolean and JobPrio out of ads; `walltime_of`
the run time a job asks for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import classad2

from fetchwork.config.ads import as_bool, as_number, evaluate_attr, from_dict
from fetchwork.config.protocol import HoldCode, job_id
from fetchwork.errors import AdError

from .states import JOB_STATUS, MANAGED_ATTRS, State, clamp_prio, idle_order, is_managed

# Attributes with a broker default, by canonical spelling.
CANONICAL = ("JobPrio", "JobLeaseDuration", "Rerunnable")
# A submit command, not an attribute: `hold = true` queues the job HELD.
HOLD_COMMAND = "hold"


@dataclass
class PreparedJob:
    prio: int
    held: bool
    attrs: dict[str, Any]
    # The Owner the ad itself names, if any.
    ad_owner: str | None = None
    job_id: str = ""


# Lower-case names handled by prepare_submitted, with their canonical spelling.
_SPECIAL = {name.lower(): name for name in CANONICAL}
_SPECIAL[HOLD_COMMAND] = HOLD_COMMAND


def _literal_or_eval(data: dict[str, Any], name: str, value: Any, evaluate: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    return evaluate(from_dict({**data, name: value}))


def prepare_submitted(data: Mapping[str, Any], qdate_s: int,
                      default_lease_s: float, default_exclusive: bool = False) -> PreparedJob:
    """The stored form of one submitted ad, before its place in the queue is known
    (`default_exclusive`: DEFAULT_JOB_EXCLUSIVE, for a job that does not say Exclusive)."""
    attrs: dict[str, Any] = {}
    special: dict[str, Any] = {}
    for name, value in data.items():
        low = name.lower()
        if low in _SPECIAL:
            special[_SPECIAL[low]] = value
        elif low not in MANAGED_ATTRS:
            attrs[name] = value
    attrs["JobPrio"] = special.get("JobPrio", 0)
    attrs["JobLeaseDuration"] = special.get("JobLeaseDuration", int(default_lease_s))
    attrs["Rerunnable"] = special.get("Rerunnable", True)
    if default_exclusive and not any(name.lower() == "exclusive" for name in attrs):
        attrs["Exclusive"] = True
    held = False
    if HOLD_COMMAND in special:
        value = _literal_or_eval(attrs, "FetchworkHold", special[HOLD_COMMAND],
                                 lambda ad: ad_bool(ad, "FetchworkHold", False))
        held = value is True or (isinstance(value, int | float) and value != 0)
    prio = clamp_prio(_literal_or_eval(attrs, "JobPrio", attrs["JobPrio"], ad_prio))
    attrs["QDate"] = qdate_s
    if held:
        attrs["HoldReason"] = "submitted on hold"
        attrs["HoldReasonCode"] = int(HoldCode.SUBMITTED_ON_HOLD)
    return PreparedJob(prio, held, attrs, _owner_of(data))


def identity(pool: str, cluster: int, proc: int, qdate_s: int, seq: int, prio: int,
             owner: str | None, ad_owner: str | None, user: str) -> dict[str, Any]:
    """The attributes that name and place a job: Owner (the submitter's `owner`, else
    the ad's, else `user`), ClusterId, ProcId, GlobalJobId and FetchworkOrder."""
    return {
        "Owner": owner or ad_owner or user,
        "ClusterId": cluster,
        "ProcId": proc,
        "GlobalJobId": f"{pool}#{job_id(cluster, proc)}#{qdate_s}",
        "FetchworkOrder": idle_order(prio, seq),
    }


def place(job: PreparedJob, identity_attrs: Mapping[str, Any],
          blocked_reason: str | None = None) -> PreparedJob:
    """Put `identity_attrs` and the initial state (IDLE or HELD; BLOCKED with
    `blocked_reason` when scheduling policy places it first) on `job`, in place."""
    attrs = job.attrs
    attrs.update(identity_attrs)
    job.job_id = job_id(attrs["ClusterId"], attrs["ProcId"])
    state = State.HELD if job.held else State.BLOCKED if blocked_reason else State.IDLE
    if state is State.BLOCKED:
        attrs["BlockedReason"] = blocked_reason
    attrs["FetchworkState"] = state.value
    attrs["JobStatus"] = int(JOB_STATUS[state])
    attrs["EnteredCurrentStatus"] = attrs["QDate"]
    return job


def _owner_of(data: Mapping[str, Any]) -> str | None:
    for name, value in data.items():
        if name.lower() == "owner" and isinstance(value, str) and value:
            return value
    return None


def caller_attrs(data: Mapping[str, Any]) -> dict[str, Any]:
    """What renew()/finish() store: everything but the attributes the broker owns."""
    return {name: value for name, value in data.items() if not is_managed(name)}


def slot_name(slot: classad2.ClassAd) -> str:
    """The slot's Name (what a claimed job records as RemoteHost)."""
    value = slot.get("Name")
    return value if isinstance(value, str) and value else "unnamed-slot"


def ad_bool(ad: classad2.ClassAd, name: str, default: bool) -> bool:
    """Attribute `name` evaluated in `ad` as a boolean; `default` when absent or not boolean."""
    if name not in ad:
        return default
    try:
        return as_bool(evaluate_attr(ad, name), default)
    except AdError:
        return default


def ad_prio(ad: classad2.ClassAd) -> int:
    """JobPrio evaluated in `ad`, clamped for ordering; 0 when absent or not a number."""
    if "JobPrio" not in ad:
        return 0
    try:
        value: Any = as_number(evaluate_attr(ad, "JobPrio"))
    except AdError:
        return 0
    return clamp_prio(value)


def walltime_of(ad: Mapping[str, Any], default_walltime_s: float) -> float:
    """AllowedJobDuration in seconds when a positive number, else the default."""
    value = ad.get("AllowedJobDuration")
    if value is None:
        value = next((v for name, v in ad.items() if name.lower() == "allowedjobduration"), None)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return default_walltime_s
    return float(value)
