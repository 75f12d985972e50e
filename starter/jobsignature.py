"""The execute machine's check of a job's signature, before anything runs as its owner.

JOB_SIGNING_PUBLIC_KEY names the pool's public key (a PEM file; `fetchwork
acl public-key` prints it). With it, every job must carry a signature by the
pool's broker service over the attributes that decide its run
(config/signedjob.py); a job whose signature does not check is not run at
all: it is held, with a reason that names the check and this slot (so the
job's hold event says which machine refused it). Without the knob nothing
is checked, and a job never runs as its Owner, only as the slot's user
(runas.py): an execute machine that cannot tell whether the broker handed a
job over trusts no Owner. The key file is read again when it changes.
`verdict` is the one call, made before the starter does anything for the job.

The broker signs a batch of jobs at a time; each job carries its proof path
to the batch's signed root (config/signedjob.py). The check recomputes the
root from the job's own attributes (SHA-256 only) and verifies the root's
signature once per batch: the roots verified are kept (`ROOTS_KEPT`, the
least recently used dropped), so the jobs of one batch that reach this
process after the first cost no Ed25519 verification. The signed root names
the pool (FETCHWORK_POOL of this machine must be the broker's).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from fetchwork.config import signedjob
from fetchwork.config.loader import Config
from fetchwork.config.protocol import HoldCode
from fetchwork.errors import ConfigError

log = logging.getLogger(__name__)

KNOB = "JOB_SIGNING_PUBLIC_KEY"
# Batch roots whose signature this process verified (each a few hundred bytes).
ROOTS_KEPT = 4096
_roots = signedjob.RootCache(ROOTS_KEPT)


@dataclass(frozen=True)
class Verdict:
    """Whether the job may run as its Owner, and why it may not run at all (None: it may)."""

    owner_trusted: bool
    refusal: str | None = None


_cache: dict[str, tuple[float, int, Ed25519PublicKey]] = {}
_lock = threading.Lock()


def public_key(config: Config) -> Ed25519PublicKey | None:
    """The pool's public key JOB_SIGNING_PUBLIC_KEY names (None when it is empty);
    ConfigError naming the knob and file when it cannot be read."""
    path = (config.get(KNOB) or "").strip()
    if not path:
        return None
    try:
        stat = os.stat(path)
        with _lock:
            kept = _cache.get(path)
        if kept is not None and kept[:2] == (stat.st_mtime, stat.st_size):
            return kept[2]
        with open(path, "rb") as handle:
            key = signedjob.read_public_key(handle.read(), path)
    except OSError as exc:
        raise ConfigError(f"{KNOB} = {path}: cannot read it: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"{KNOB}: {exc}") from exc
    with _lock:
        _cache[path] = (stat.st_mtime, stat.st_size, key)
    return key


def verdict(config: Config, job_ad: Any) -> Verdict:
    """Check `job_ad` against the pool's public key."""
    try:
        key = public_key(config)
    except ConfigError as exc:
        # A configured key that cannot be read: run nothing rather than trust the ad.
        return Verdict(False, f"job signature check failed: {exc}")
    if key is None:
        return Verdict(False)
    pool = (config.get("FETCHWORK_POOL") or "").strip()
    why = signedjob.check(key, job_ad, pool, _roots)
    if why is not None:
        return Verdict(False, f"job signature check failed ({KNOB}): {why}")
    return Verdict(True)


def hold_attributes(slot_ad: Any, slot: int, refusal: str) -> dict[str, Any]:
    """HoldReason (naming the slot, as HTCondor's starter does) and HoldReasonCode for a
    job refused by the check. HTCondor's code 4 is a job whose credentials are invalid."""
    name = slot_ad["Name"] if "Name" in slot_ad else None
    where = name if isinstance(name, str) and name else f"slot{slot}"
    return {"HoldReason": f"Error from {where}: {refusal}",
            "HoldReasonCode": int(HoldCode.SIGNATURE_INVALID), "HoldReasonSubCode": 0}
