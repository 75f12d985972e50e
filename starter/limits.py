"""What the starter enforces of its slot without privileges (pure decisions).

- CPU affinity: a slot ad carrying `CpuAffinity` (`0,1`, written by the
  startd when ASSIGN_CPU_AFFINITY is true) pins the job to those cores.
- Memory: the job's ImageSize (peak resident KB of its tree) over its
  RequestMemory (MB) is reported in the ad (`MemoryUsage` in MB,
  `MemoryExceeded`) and logged once; with MEMORY_LIMIT_POLICY = hold the job
  is also held, with HTCondor's hold code for memory exceeded.
"""

from __future__ import annotations

import logging
from typing import Any

import classad2

from fetchwork.config.ads import as_number, evaluate_attr
from fetchwork.config.loader import Config
from fetchwork.config.protocol import HOLD, HoldCode
from fetchwork.errors import AdError, ConfigError
from fetchwork.hooks import control

log = logging.getLogger(__name__)

AFFINITY_ATTR = "CpuAffinity"
REPORT, HOLD_JOB = "report", HOLD
POLICIES = (REPORT, HOLD_JOB)


def memory_policy(config: Config) -> str:
    """MEMORY_LIMIT_POLICY: report or hold."""
    policy = (config.get("MEMORY_LIMIT_POLICY") or "").strip().lower()
    if policy not in POLICIES:
        raise ConfigError(f"MEMORY_LIMIT_POLICY must be {' or '.join(POLICIES)}, "
                          f"not {policy!r}")
    return policy


def cpu_affinity(slot_ad: Any) -> tuple[int, ...] | None:
    """The cores the slot ad assigns (`CpuAffinity = "0,2"`), or None."""
    text = slot_ad.get(AFFINITY_ATTR) if AFFINITY_ATTR in slot_ad else None
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        cores = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        log.warning("the slot's %s %r is not a list of cores; not pinning the job",
                    AFFINITY_ATTR, text)
        return None
    return cores or None


def request_memory_mb(job_ad: Any, slot_ad: Any) -> float | None:
    """The job's RequestMemory in MB when it sets one that is a number."""
    try:
        return as_number(evaluate_attr(job_ad, "RequestMemory", slot_ad))
    except AdError:
        return None


def check_memory(job_ad: Any, slot_ad: Any, image_size_kb: int, policy: str) -> bool:
    """Put MemoryUsage (and MemoryExceeded) into the job ad; True when the job is to be
    held now (policy hold, over its RequestMemory, not held for it before)."""
    usage_mb = -(-image_size_kb // 1024)
    job_ad["MemoryUsage"] = usage_mb
    limit_mb = request_memory_mb(job_ad, slot_ad)
    if limit_mb is None or image_size_kb <= limit_mb * 1024:
        return False
    if job_ad.get("MemoryExceeded") is True:
        return False  # said (and done) once already
    job_ad["MemoryExceeded"] = True
    log.warning("the job uses %d MB (ImageSize %d KB), more than its RequestMemory of %g MB%s",
                usage_mb, image_size_kb, limit_mb,
                "; holding it (MEMORY_LIMIT_POLICY = hold)" if policy == HOLD_JOB else "")
    if policy != HOLD_JOB:
        return False
    name = slot_ad.get("Name") if "Name" in slot_ad else None
    where = name if isinstance(name, str) and name else "its slot"
    job_ad["HoldReason"] = (f"Error from {where}: the job used {usage_mb} MB of memory, "
                            f"more than its RequestMemory of {limit_mb:g} MB "
                            "(MEMORY_LIMIT_POLICY = hold)")
    job_ad["HoldReasonCode"] = int(HoldCode.MEMORY_EXCEEDED)
    job_ad["HoldReasonSubCode"] = 0
    return True


def enforce_memory(job_ad: Any, slot_ad: Any, image_size_kb: int, policy: str) -> None:
    """`check_memory`, and ask this process's starter to hold the job when it says so."""
    if check_memory(job_ad, slot_ad, image_size_kb, policy):
        control.request(HOLD)


def vacate_time_s(config: Config, slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd) -> float:
    """Seconds a vacating job gets: HTCondor evaluates MachineMaxVacateTime in the slot
    ad; else the configuration decides."""
    value = as_number(evaluate_attr(slot_ad, "MachineMaxVacateTime", job_ad))
    if value is None:
        value = config.get_float("MachineMaxVacateTime")
    return max(0.0, value)
