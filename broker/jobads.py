"""Pure shaping of job ads on their way into the queue.

`prepare_submitted` turns one normalized ad (a to_dict-style mapping) into
what submit.lua stores: the attributes the broker sets at submission, the
clamped priority and whether the job starts HELD. `caller_attrs` filters what
the execute side may write through renew() and finish().
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fetchwork.config.ads import from_dict

from .matching import ad_bool, ad_prio
from .states import HOLD_CODE_SUBMITTED_ON_HOLD, MANAGED_ATTRS, clamp_prio, is_managed, job_id

# Attributes with a broker default, by canonical spelling.
CANONICAL = ("JobPrio", "JobLeaseDuration", "Rerunnable")
# A submit command, not an attribute: `hold = true` queues the job HELD.
HOLD_COMMAND = "hold"


@dataclass
class PreparedJob:
    job_id: str
    prio: int
    held: bool
    attrs: dict[str, Any]


# Lower-case names handled by prepare_submitted, with their canonical spelling.
_SPECIAL = {name.lower(): name for name in CANONICAL}
_SPECIAL[HOLD_COMMAND] = HOLD_COMMAND


def _literal_or_eval(data: dict[str, Any], name: str, value: Any, evaluate: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    return evaluate(from_dict({**data, name: value}))


def prepare_submitted(data: Mapping[str, Any], cluster: int, proc: int, owner: str | None,
                      qdate_s: int, pool: str, default_lease_s: float,
                      fallback_owner: str | None = None) -> PreparedJob:
    """The stored form of one submitted ad, before its place in the queue is known."""
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
    held = False
    if HOLD_COMMAND in special:
        value = _literal_or_eval(attrs, "FetchworkHold", special[HOLD_COMMAND],
                                 lambda ad: ad_bool(ad, "FetchworkHold", False))
        held = value is True or (isinstance(value, int | float) and value != 0)
    prio = clamp_prio(_literal_or_eval(attrs, "JobPrio", attrs["JobPrio"], ad_prio))
    owner = owner or _owner_of(data) or fallback_owner or getpass.getuser()
    ident = job_id(cluster, proc)
    attrs.update({
        "ClusterId": cluster,
        "ProcId": proc,
        "GlobalJobId": f"{pool}#{ident}#{qdate_s}",
        "QDate": qdate_s,
        "Owner": owner,
    })
    if held:
        attrs["HoldReason"] = "submitted on hold"
        attrs["HoldReasonCode"] = HOLD_CODE_SUBMITTED_ON_HOLD
    return PreparedJob(ident, prio, held, attrs)


def _owner_of(data: Mapping[str, Any]) -> str | None:
    for name, value in data.items():
        if name.lower() == "owner" and isinstance(value, str) and value:
            return value
    return None


def caller_attrs(data: Mapping[str, Any]) -> dict[str, Any]:
    """What renew()/finish() store: everything but the attributes the broker owns."""
    return {name: value for name, value in data.items() if not is_managed(name)}
