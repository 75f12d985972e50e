"""Manifests in the pool: attach one for the jobs that need it (uploading what the
pool lacks), read one back, settle returned outputs; and the pool's cap on the
bytes of transferred files, read in one place (`pool_cap_bytes`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any

from fetchwork.broker.store import Store, calls, poolrules
from fetchwork.config.loader import Config
from fetchwork.errors import TransferError

from .manifest import Manifest, unpack

log = logging.getLogger(__name__)

# Attach attempts while chunks lapse between upload and attach (each retry sends
# the lapsed ones again).
_ATTACH_TRIES = 3


# The pool's cap on the bytes of transferred files (TRANSFER_POOL_MAX_MB, 0: none) and
# its transfer knobs (`output_rules`): what its broker service published, never a
# submitting client's own; before any publication, the packaged default.
pool_cap_bytes = poolrules.transfer_cap_bytes


def output_rules(store: Store) -> tuple[int, float]:
    """The pool's cap on transferred bytes (`pool_cap_bytes`) and its
    TRANSFER_OUTPUT_LIFETIME in seconds (a duration), from one read of its
    published rules (an output transfer needs both)."""
    published = poolrules.read(store)
    knobs = dict(published.knobs) if published is not None else {}
    names = (poolrules.TRANSFER_CAP_KNOB, "TRANSFER_OUTPUT_LIFETIME")
    defaults: Config | None = None
    if any(name not in knobs for name in names):
        defaults = Config.load(environ={}, config_file=os.devnull)
        for name in names:
            knobs.setdefault(name, defaults.require(name))
    cap_bytes = max(0, int(float(knobs[names[0]]))) * 1024 * 1024
    try:
        lifetime_s = float(knobs[names[1]])
    except ValueError:
        defaults = defaults or Config.load(environ={}, config_file=os.devnull)
        lifetime_s = defaults.get_duration_s(names[1])
    return cap_bytes, lifetime_s


def pending_ms(config: Config) -> int:
    return int(config.get_duration_s("TRANSFER_PENDING_LIFETIME") * 1000)


def attach(store: Store, manifest: Manifest, jobs: int, cap_bytes: int,
           resend: Callable[[list[str]], None], output_of: str = "",
           expires_s: int = 0) -> str:
    """Attach `manifest` for `jobs` jobs; `resend(missing digests)` uploads again what
    lapsed. Its id; SubmitError naming the cap's knob when the pool is full."""
    ident = manifest.ident()
    packed = manifest.pack()
    digests = manifest.digests()
    for _ in range(_ATTACH_TRIES):
        verdict, detail = calls.transfer_attach(
            store, manifest_id=ident, packed=packed, digests=digests, jobs=jobs,
            cap_bytes=cap_bytes, output_of=output_of, expires_s=expires_s,
            inline_bytes=manifest.inline_bytes)
        if verdict == 1:
            return ident
        if verdict == -1:
            assert isinstance(detail, tuple)
            held, new = detail
            raise poolrules.transfer_cap_refusal(held, new, cap_bytes)
        assert isinstance(detail, list)
        log.info("%d chunk(s) lapsed before the manifest was attached; sending them again",
                 len(detail))
        resend(detail)
    raise TransferError("the pool kept losing uploaded chunks before they could be "
                        "attached (is TRANSFER_PENDING_LIFETIME very short?)")


def load(store: Store, manifest_id: str) -> Manifest:
    """The manifest `manifest_id`; TransferError when the pool does not hold it."""
    data: Any = store.client.hget(store.keys.xfer_manifest(manifest_id), "data")
    return _checked(manifest_id, data)


def load_waiting(store: Store, job_id: str, manifest_id: str) -> Manifest | None:
    """Job `job_id`'s outputs `manifest_id` when they wait to be delivered (else None),
    the look and the read in one round trip; TransferError as `load`."""
    with store.client.pipeline(transaction=False) as pipe:
        pipe.zscore(store.keys.xfer_outputs, f"{job_id}|{manifest_id}")
        pipe.hget(store.keys.xfer_manifest(manifest_id), "data")
        waiting, data = pipe.execute()
    return None if waiting is None else _checked(manifest_id, data)


def _checked(manifest_id: str, data: Any) -> Manifest:
    if not isinstance(data, bytes):
        raise TransferError(f"the pool no longer holds the files of manifest "
                            f"{manifest_id[:12]}")
    # A manifest is named by its digest: one rewritten in the pool does not check.
    if hashlib.sha256(data).hexdigest() != manifest_id:
        raise TransferError(f"manifest {manifest_id[:12]} in the pool does not match its "
                            "digest: it was changed after it was stored")
    return unpack(data)


def detach(store: Store, manifest_id: str, jobs: int) -> None:
    calls.transfer_detach(store, manifest_id=manifest_id, jobs=jobs)


def settle(store: Store, manifest_id: str, job_id: str, how: str) -> bool:
    """Job `job_id`'s outputs were delivered or expired (`how`); False when settled before."""
    return calls.transfer_settle(store, manifest_id=manifest_id, job_id=job_id, how=how)


def is_waiting(store: Store, job_id: str, manifest_id: str) -> bool:
    """Whether job `job_id`'s outputs `manifest_id` wait to be delivered."""
    return store.client.zscore(store.keys.xfer_outputs, f"{job_id}|{manifest_id}") is not None


def waiting_outputs(store: Store) -> dict[str, tuple[str, float]]:
    """Job id -> (output manifest id, expiry in s) of outputs not yet delivered."""
    found: dict[str, tuple[str, float]] = {}
    members: Any = store.client.zrange(store.keys.xfer_outputs, 0, -1, withscores=True)
    for member, score in members:
        text = member.decode() if isinstance(member, bytes) else str(member)
        job, _, ident = text.partition("|")
        found[job] = (ident, float(score))
    return found
