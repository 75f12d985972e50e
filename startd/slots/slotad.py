"""The slot ClassAd: what a slot tells its hooks about itself.

`slot_ad_attrs` is pure: machine facts, the slot's status and claim, and the
policy expressions go in, the ad's attributes come out (the startd sets them
in the slot's one ClassAd: slotadcache.py). `gather_facts` is the one
function here that looks at the machine.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.config.loader import Config
from fetchwork.config.protocol import ad_job_id
from fetchwork.errors import AdError
from fetchwork.startd.states import SlotStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MachineFacts:
    """What the whole machine has; slots get an even share."""

    machine: str
    opsys: str
    arch: str
    cpus: int
    memory_mb: int
    disk_kb: int
    load_avg: float


@dataclass(frozen=True)
class SlotPolicy:
    """The expression texts a slot publishes, and the admin's STARTD_ATTRS."""

    start: str = "true"
    rank: str = "0"
    extra_attrs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimView:
    """The part of the slot's claim (its ClaimId's job) a slot ad shows."""

    job_id: str | None
    rank: float
    job_started_at: float | None


def gather_facts(config: Config, execute_dir: str) -> MachineFacts:
    """Measure the machine: NUM_CPUS, MEMORY (default: detected), free disk under EXECUTE, load."""
    try:
        usage = shutil.disk_usage(execute_dir if os.path.isdir(execute_dir) else "/")
        disk_kb = usage.free // 1024
    except OSError:
        disk_kb = 0
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return MachineFacts(
        machine=config.get("FULL_HOSTNAME") or "localhost",
        opsys=config.get("OPSYS") or "LINUX",
        arch=config.get("ARCH") or "X86_64",
        cpus=config.get_int("NUM_CPUS"),
        memory_mb=config.get_int("MEMORY"),
        disk_kb=int(disk_kb),
        load_avg=float(load),
    )


def read_policy(config: Config, slot_id: int | None = None) -> SlotPolicy:
    """START, RANK and the knobs named by STARTD_ATTRS (undefined names are skipped).

    As in HTCondor, `SLOT<N>_<NAME>` gives slot N its own value of a
    STARTD_ATTRS knob.
    """
    extra: dict[str, str] = {}
    for name in config.get_list("STARTD_ATTRS"):
        value = config.get(f"SLOT{slot_id}_{name}") if slot_id is not None else None
        if value is None or not value.strip():
            value = config.get(name)
        if value is None or not value.strip():
            log.warning("STARTD_ATTRS names %s, which is not defined; not published", name)
            continue
        extra[name] = value.strip()
    return SlotPolicy(start=(config.get("START") or "true").strip() or "true",
                      rank=(config.get("RANK") or "0").strip() or "0",
                      extra_attrs=extra)


def slot_name(slot_id: int, startd_name: str) -> str:
    return f"slot{slot_id}@{startd_name}"


@functools.lru_cache(maxsize=256)
def _policy_expr(text: str) -> Any:
    """A policy expression parsed once per text. The slot ad is rebuilt many times
    per job, and classad2 keeps some memory from every parse, so a fresh parse each
    time made a long-running startd grow with every job."""
    return ads.parse_expr(text)


def slot_ad_attrs(slot_id: int, startd_name: str, num_slots: int, facts: MachineFacts,
                  status: SlotStatus, policy: SlotPolicy, now: float,
                  claim: ClaimView | None = None) -> dict[str, Any]:
    """The attributes of slot `slot_id` (1-based) of `num_slots` static slots, as plain
    values (and the policy expressions, parsed once): the startd keeps one ClassAd per
    slot and sets in it only what changed (startd/slots/slotadcache.py)."""
    share = max(num_slots, 1)
    ad: dict[str, Any] = {}
    # Admin attributes first, so the attributes below always win.
    for name, text in policy.extra_attrs.items():
        try:
            ad[name] = _policy_expr(text)
        except AdError as exc:
            log.warning("STARTD_ATTRS: %s is not a ClassAd expression (%s); not published",
                        name, exc)
    ad["MyType"] = "Machine"
    ad["Name"] = slot_name(slot_id, startd_name)
    ad["SlotID"] = slot_id
    ad["Machine"] = facts.machine
    ad["State"] = status.state.value
    ad["Activity"] = status.activity.value
    ad["EnteredCurrentState"] = int(status.entered_state_at)
    ad["EnteredCurrentActivity"] = int(status.entered_activity_at)
    ad["MyCurrentTime"] = int(now)
    # Static slots split the machine evenly, as HTCondor's default slot type does.
    ad["Cpus"] = max(facts.cpus // share, 1)
    ad["Memory"] = max(facts.memory_mb // share, 1)
    ad["Disk"] = max(facts.disk_kb // share, 0)
    ad["OpSys"] = facts.opsys
    ad["Arch"] = facts.arch
    # HTCondor shares the machine's load among slots; here it is split evenly.
    ad["TotalLoadAvg"] = round(facts.load_avg, 3)
    ad["LoadAvg"] = round(facts.load_avg / share, 3)
    ad["TotalSlots"] = num_slots
    ad["TotalCpus"] = facts.cpus
    ad["TotalMemory"] = facts.memory_mb
    ad["Start"] = _policy_expr(policy.start)
    # As in HTCondor, a slot's Requirements is its START expression.
    ad["Requirements"] = _policy_expr(policy.start)
    ad["Rank"] = _policy_expr(policy.rank)
    if claim is not None:
        ad["CurrentRank"] = claim.rank
        if claim.job_id is not None:
            ad["JobId"] = claim.job_id
        if claim.job_started_at is not None:
            ad["JobStart"] = int(claim.job_started_at)
    return ad


def job_id_of(job_ad: classad2.ClassAd) -> str | None:
    """`ClusterId.ProcId` when the ad has them, else GlobalJobId, else None."""
    job_id = ad_job_id(job_ad)
    if job_id is not None:
        return job_id
    global_id = job_ad.get("GlobalJobId")
    return global_id if isinstance(global_id, str) else None


# The startd's own name for a fetched job whose ad has no id (startd/slots/localid.py).
LOCAL_ID_ATTR = "FetchworkLocalJobId"


def job_label(job_ad: classad2.ClassAd) -> str:
    """The job's id for log lines: `job_id_of`, else its local id, else "(no id)"."""
    local = job_ad.get(LOCAL_ID_ATTR) if LOCAL_ID_ATTR in job_ad else None
    return job_id_of(job_ad) or (local if isinstance(local, str) else None) or "(no id)"
