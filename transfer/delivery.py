"""Delivery of a job's returned outputs into its `Iwd`, as the user running this code.

The output manifest already names each file as it must land (the execute side
applied `output`/`error` and `transfer_output_remaps`); every name is checked
again here (relative, no `..`) and written through safefiles, which follows no
symbolic link on the way and replaces files atomically. Once every file is
written the outputs are settled (transfer_settle.lua): delivered once, and their
chunks freed when no one else needs them. A failure leaves them waiting, so the
next attempt writes them all again.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from fetchwork.broker.store import Store
from fetchwork.config.protocol import HoldCode
from fetchwork.errors import TransferError

from . import inline, safefiles, stored
from .chunks import ChunkStore
from .manifest import Manifest

log = logging.getLogger(__name__)

OUTPUT_MANIFEST_ATTR = "FetchworkOutputManifest"
# The job's FetchworkOutputs once settled: "delivered" or "expired".
DELIVERED, EXPIRED = "delivered", "expired"
OUTPUTS_ATTR = "FetchworkOutputs"
SPOOL_ATTR = "FetchworkSpool"


@dataclass(frozen=True)
class Delivery:
    job_id: str
    files: int
    bytes: int


def output_manifest(ad: Mapping[str, Any]) -> str | None:
    ident = ad.get(OUTPUT_MANIFEST_ATTR)
    return ident if isinstance(ident, str) and ident else None


def deliver(store: Store, job_id: str, ad: Mapping[str, Any],
            rights: Callable[[], AbstractContextManager[None]] = nullcontext
            ) -> Delivery | None:
    """Write job `job_id`'s waiting outputs into its Iwd and settle them; None when the
    job has none waiting. TransferError naming the file when one cannot be written.
    The files are written inside `rights()` (the Owner's, privstate.as_user, for a
    root process), the pool's bookkeeping outside it."""
    ident = output_manifest(ad)
    if ident is None:
        return None
    manifest = stored.load_waiting(store, job_id, ident)
    if manifest is None:
        return None
    iwd = iwd_of(job_id, ad)
    with rights():
        write_outputs(store, manifest, iwd)
    stored.settle(store, ident, job_id, DELIVERED)
    log.info("job %s: delivered %d file(s) into %s", job_id, len(manifest.files), iwd)
    return Delivery(job_id, len(manifest.files), manifest.size)


def iwd_of(job_id: str, ad: Mapping[str, Any]) -> str:
    """The job's Iwd, where its outputs land; TransferError when it has no absolute one."""
    iwd = ad.get("Iwd")
    if not isinstance(iwd, str) or not os.path.isabs(iwd):
        raise TransferError(f"job {job_id} has no absolute Iwd to deliver its outputs into")
    return iwd


def write_outputs(store: Store, manifest: Manifest, iwd: str) -> None:
    """Write the folders and files `manifest` names into `iwd`, each checked and written
    through safefiles; TransferError naming the file when one cannot be written."""
    chunk_store = ChunkStore(store, 0)
    code = HoldCode.TRANSFER_OUTPUT_ERROR
    for folder in manifest.dirs:
        safefiles.make_folder(iwd, folder, code)
    for entry in manifest.files:
        fill = (inline.fill(entry, code) if entry.data is not None
                else functools.partial(chunk_store.download, entry))
        safefiles.write_file(iwd, entry.name, entry.mode, fill, code)


def expire_due(store: Store, now_s: float | None = None) -> list[str]:
    """Settle as expired the outputs whose time passed; the jobs they belonged to."""
    now_s = time.time() if now_s is None else now_s
    gone = []
    for job_id, (ident, expires_s) in stored.waiting_outputs(store).items():
        if expires_s <= now_s and stored.settle(store, ident, job_id, EXPIRED):
            log.info("job %s: its outputs expired unfetched", job_id)
            gone.append(job_id)
    return gone
