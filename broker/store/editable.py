"""Which job attributes a user may change after submission (condor_qedit), and
the stored form of an edited value. Pure: no Redis here; qedit.lua applies it.

As HTCondor's schedd does, the attributes of SYSTEM_IMMUTABLE_JOB_ATTRS
(`Owner`, `ClusterId`, `ProcId`, `MyType`, `TargetType`) never change once a
job is queued, and neither do the ones the stock configuration adds to
IMMUTABLE_JOB_ATTRS (`JobUniverse`, `User`, `OsUser` and the accounting
group). Beyond those, every attribute only the broker writes
(states.MANAGED_ATTRS: the state, the claim, the run accounting, the hold and
remove reasons) is refused: the transitions own them, and `fetchwork hold`,
`release`, `rm` and `requeue` change them; and so are the few the broker acts
on only when a job is queued or held (`Depends`, `HoldUntil`), where an edit
would change the ad and nothing else. The pool's own lists are not
read from the caller's configuration: a client never decides the pool's rules.
"""

from __future__ import annotations

import re
from typing import Any

import classad2

from fetchwork.config.ads import parse_expr
from fetchwork.config.protocol import clip

from . import codec
from .states import MANAGED_ATTRS, clamp_prio

# HTCondor's SYSTEM_IMMUTABLE_JOB_ATTRS, and what its stock configuration adds.
IMMUTABLE_ATTRS = ("Owner", "ClusterId", "ProcId", "MyType", "TargetType",
                   "JobUniverse", "User", "OsUser", "AcctGroup", "AcctGroupUser",
                   "AccountingGroup")
_IMMUTABLE = frozenset(name.lower() for name in IMMUTABLE_ATTRS)
# Attributes the broker acts on when a job is queued or held, not when they change:
# an edit would change the ad and nothing else. What to do instead.
FIXED_ATTRS = {
    "depends": "a job's dependencies are resolved when it is queued; remove it and submit "
               "it again with the new depends_on",
    "fetchworkdependsonnames": "a job's dependencies are resolved when it is queued",
    "holduntil": "a timed hold is set with `fetchwork hold --until` (or --for)",
}
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def refusal(attr: str) -> str | None:
    """Why a user may not set `attr` on a queued job; None when it may."""
    if not _NAME_RE.match(attr or ""):
        return f"{clip(attr)!r} is not an attribute name"
    low = attr.lower()
    if low in _IMMUTABLE:
        return f"attribute {attr} cannot be changed once a job is queued (it is immutable)"
    if low in FIXED_ATTRS:
        return f"attribute {attr} cannot be edited: {FIXED_ATTRS[low]}"
    if low in MANAGED_ATTRS:
        return (f"attribute {attr} is kept by the broker and cannot be edited; "
                "hold, release, rm and requeue change a job's state")
    return None


def stored_value(attr: str, value: str | classad2.ExprTree) -> Any:
    """The stored (to_dict) form of `value`: ClassAd expression text, as condor_qedit
    takes it (`"text"` for a string, `10`, `TARGET.Memory > 100`), or an ExprTree.
    Raises AdError for text that is not an expression."""
    parsed = (value if isinstance(value, classad2.ExprTree)
              else parse_expr(str(value), source=f"the new value of {attr}"))
    return codec.AdNormalizer().normalize({attr: parsed})[attr]


def priority_group(attr: str, stored: Any) -> int | None:
    """For a JobPrio edit, the idle order's new priority group (-JobPrio, clamped);
    None for other attributes. A JobPrio that is not a number orders as 0."""
    if attr.lower() != "jobprio":
        return None
    return -clamp_prio(stored)
