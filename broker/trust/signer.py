"""The broker service's half of job signing: its key, and signing admitted jobs.

Only the broker service holds the pool's private key (knob JOB_SIGNING_KEY,
a PEM file readable by that service alone). When it is set, the leader makes
every new job wait for admission (the filter summary says `submit`) and
signs the jobs it admits (filters/leader.py), so no job reaches a slot
unsigned. It signs a batch at a time: one Ed25519 signature over the root of
a hash tree of the batch's jobs, with the pool's name and a batch id
(config/signedjob.py), so a job costs the leader its signed text and a few
SHA-256 hashes. What a batch shares (its signature and the tree's nodes) is
stored once in the pool (`sign_batch`); each job names its batch and leaf.
A pool on one machine makes its own key pair (`ensure_key_pair`, called by
`fetchwork up`).
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fetchwork.config import signedjob
from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError

log = logging.getLogger(__name__)

KEY_KNOB = "JOB_SIGNING_KEY"


class Signer:
    """Signs batches of job ads of pool `pool` with the pool's private key."""

    def __init__(self, private_pem: bytes, source: str, pool: str = "default"):
        try:
            self._key = signedjob.read_private_key(private_pem, source)
        except ValueError as exc:
            raise ConfigError(f"{KEY_KNOB}: {exc}") from exc
        self.source = source
        self.pool = pool
        # Batch ids: this signer's random prefix and a count, so no two batches of any
        # replica, before or after a restart, share one.
        self._prefix = secrets.token_hex(8)
        self._count = itertools.count(1)

    @classmethod
    def from_config(cls, config: Config) -> Signer | None:
        """The signer JOB_SIGNING_KEY names; None when the knob is empty (jobs are not
        signed, and startds run them only as their slot users)."""
        path = (config.get(KEY_KNOB) or "").strip()
        if not path:
            return None
        try:
            pem = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"{KEY_KNOB} = {path}: cannot read it: {exc.strerror}") from exc
        return cls(pem, path, config.require("FETCHWORK_POOL").strip())

    def sign_texts(self, texts: Sequence[bytes]) -> list[str]:
        """The FetchworkSignature of each job of one batch, from their signed texts
        (signedjob.signed_text_of), in order."""
        return signedjob.sign_batch(self._key, self.pool, self._batch_id(), texts)

    def sign_leaves(self, leaves: Sequence[bytes]) -> list[str]:
        """`sign_texts` from the jobs' leaves (signedjob.leaf_digest of their texts)."""
        return signedjob.sign_leaves(self._key, self.pool, self._batch_id(), leaves)

    def sign_batch(self, leaves: Sequence[bytes]) -> signedjob.SignedBatch:
        """One batch of jobs (their leaves, in order) signed as the string the pool
        stores once for them all (signedjob.sign_batch_blob); each job keeps only its
        place in the batch."""
        return signedjob.sign_batch_blob(self._key, self.pool, self._batch_id(), leaves)

    def _batch_id(self) -> str:
        return f"{self._prefix}.{next(self._count)}"

    def signature(self, data: Mapping[str, Any]) -> str:
        """The FetchworkSignature of one stored job (a to_dict-style mapping), a batch
        of its own."""
        return self.sign_texts([signedjob.signed_text_of(data)])[0]

    def public_pem(self) -> str:
        return signedjob.public_pem(self._key)


def ensure_key_pair(private_path: Path, public_path: Path) -> bool:
    """Make a key pair at these paths unless the private key exists (the public file is
    written again from it); True when a new pair was made. The private file is 0600."""
    private_path.parent.mkdir(parents=True, exist_ok=True)
    made = False
    if not private_path.exists():
        private, _public = signedjob.new_private_pem()
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(private)
        made = True
        log.info("made the pool's job signing key %s", private_path)
    signer = Signer(private_path.read_bytes(), str(private_path))
    public_path.write_text(signer.public_pem(), encoding="utf-8")
    return made


def pool_signer(config: Config) -> Signer | None:
    """The broker service's signer, its choice logged."""
    signer = Signer.from_config(config)
    if signer is None:
        log.warning("%s is empty: jobs are not signed, so startds run them as their slot "
                    "users only, never as their owners", KEY_KNOB)
    else:
        log.info("jobs are signed with %s when admitted", signer.source)
    return signer
