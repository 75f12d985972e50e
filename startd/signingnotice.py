"""What a startd says at start about its jobs' owners: whether JOB_SIGNING_PUBLIC_KEY is set.

The check of each job's signature runs in the starter (starter/jobsignature.py),
which loads the cryptography library for it; the startd itself never verifies
a signature. It only says in its first log lines whether a key is configured
and whether the file it names holds an Ed25519 public key, and it tells that
from the file's PEM text (RFC 8410: the DER of an Ed25519 SubjectPublicKeyInfo
is a fixed 12-byte prefix and the 32-byte key), so the daemon that lives for
weeks does not carry some 7 MB of cryptography for one line of its log.
"""

from __future__ import annotations

import base64
import binascii
import re

from fetchwork.config.loader import Config

KNOB = "JOB_SIGNING_PUBLIC_KEY"  # read by starter/jobsignature.py, which checks the jobs

_ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
_PEM = re.compile(rb"-----BEGIN PUBLIC KEY-----\s*(.*?)\s*-----END PUBLIC KEY-----", re.S)


def key_problem(pem: bytes, source: str) -> str | None:
    """Why `pem` is not an Ed25519 public key in PEM form (None: it is one)."""
    found = _PEM.search(pem)
    if found is None:
        return f"{source} is not a PEM public key (no BEGIN PUBLIC KEY block)"
    try:
        der = base64.b64decode(b"".join(found.group(1).split()), validate=True)
    except (binascii.Error, ValueError):
        return f"{source} is not a PEM public key: its body is not base64"
    if len(der) != len(_ED25519_SPKI_PREFIX) + 32 or not der.startswith(_ED25519_SPKI_PREFIX):
        return f"{source} does not hold an Ed25519 public key"
    return None


def startup_notice(config: Config) -> tuple[bool, str]:
    """What a startd says at start about the jobs' owners (its log's first lines), and
    whether it is a warning."""
    path = (config.get(KNOB) or "").strip()
    if not path:
        return True, (f"{KNOB} is empty: job signatures are not checked, and jobs run only "
                      "as the slot's user, never as their Owner")
    try:
        with open(path, "rb") as handle:
            problem = key_problem(handle.read(), path)
    except OSError as exc:
        problem = f"{KNOB} = {path}: cannot read it: {exc.strerror}"
    else:
        if problem is not None:
            problem = f"{KNOB}: {problem}"
    if problem is not None:
        return True, f"{problem}: every job will be held until the key can be read"
    return False, (f"jobs are checked against the pool's public key {path}: a job whose "
                   "signature does not check is held, and only signed jobs run as their "
                   "Owner")
