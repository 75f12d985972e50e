"""A person's side of file transfer: inputs staged in the person's own namespace for
the leader to admit, and the person's outputs fetched through the leader.

A person's Redis user may not write the pool's shared chunks (broker/trust/
personfiles.py says why and what the leader does). So a person's submission
sends each chunk the pool lacks into `fw:{P}:u:<name>:staged` (a hash that
expires TRANSFER_PENDING_LIFETIME after its last write, so an abandoned upload
goes by itself, and an upload sent again within that time sends only what is
missing), then each manifest, and names the manifest in the job ads; the
leader checks and attaches them as it queues the jobs, and deletes the staging.

Outputs: the leader hands the manifest of a job's waiting outputs to the person
(`outputs` request, only for the person's own jobs), the files are written into
the job's Iwd as transfer/delivery.py writes them, and a `delivered` request
settles them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fetchwork.broker.client import Broker
from fetchwork.broker.trust.client import PersonClient
from fetchwork.broker.trust.personfiles import DELIVERED, OUTPUTS, chunk_field, manifest_field
from fetchwork.errors import TransferError

from .chunks import CHUNK_BYTES, ChunkStore, read_exact
from .delivery import Delivery, iwd_of, write_outputs
from .inputs import INPUT_MANIFEST_ATTR, InputPlan, Uploader, input_plan, transfers
from .manifest import FileEntry, Manifest, unpack

log = logging.getLogger(__name__)


class StagedChunks(ChunkStore):
    """Chunks sent into one person's staging instead of the pool's shared keys."""

    def __init__(self, broker: Broker, person: str, pending_ms: int):
        super().__init__(broker.store, pending_ms)
        self.staged = broker.keys.person_staged(person)

    def upload(self, fd: int, name: str, mode: int,
               progress: Callable[[int], None] | None = None) -> FileEntry:
        """Stage the file open at `fd` chunk by chunk (what the pool or the staging holds
        already is not sent again); its entry as `name`."""
        whole = hashlib.sha256()
        digests: list[str] = []
        size = 0
        client = self.store.client
        while True:
            data = read_exact(fd, CHUNK_BYTES)
            if not data and digests:
                break
            whole.update(data)
            digest = hashlib.sha256(data).hexdigest()
            if not client.exists(self.store.keys.xfer_chunk(digest)):
                self.stage(chunk_field(digest), data, only_new=True)
            digests.append(digest)
            size += len(data)
            if progress is not None:
                progress(len(data))
            if len(data) < CHUNK_BYTES:
                break
        return FileEntry(name, mode, size, whole.hexdigest(), tuple(digests))

    def stage(self, name: str, data: bytes, only_new: bool = False) -> None:
        """One field of the staging, which then lives TRANSFER_PENDING_LIFETIME more."""
        pipe = self.store.client.pipeline(transaction=True)
        if only_new:
            pipe.hsetnx(self.staged, name, data)
        else:
            pipe.hset(self.staged, name, data)
        pipe.pexpire(self.staged, max(1, self.pending_ms))
        added, _ = pipe.execute()
        if added:
            self.sent_bytes += len(data)


def stage_inputs(broker: Broker, person: str, ads: Sequence[dict[str, Any]],
                 pending_ms: int, say: Callable[[str], None] = log.info) -> None:
    """Stage the inputs of every transferring job of `ads` for the leader and name each
    job's manifest in its ad (the leader attaches them when it queues the jobs)."""
    chunks = StagedChunks(broker, person, pending_ms)
    uploader = Uploader(chunks)
    plans: dict[InputPlan, list[dict[str, Any]]] = {}
    for ad in ads:
        if transfers(ad):
            plans.setdefault(input_plan(ad), []).append(ad)
    for plan, jobs in plans.items():
        manifest = Manifest(tuple(uploader.send(source) for source in plan.files),
                            plan.dirs, plan.urls)
        ident = manifest.ident()
        chunks.stage(manifest_field(ident), manifest.pack())
        for ad in jobs:
            ad[INPUT_MANIFEST_ATTR] = ident
    if plans:
        say(f"staged the inputs of {sum(len(j) for j in plans.values())} job(s) for the "
            f"pool's broker: {len(plans)} sandbox(es), "
            f"{chunks.sent_bytes / (1024 * 1024):.1f} MB sent")


def deliver(broker: Broker, person: PersonClient, job_id: str,
            ad: Mapping[str, Any]) -> Delivery | None:
    """Write the waiting outputs of `person`'s job `job_id` into its Iwd and settle them;
    None when it has none waiting. BrokerError when the job is not the person's,
    TransferError naming the file when one cannot be written."""
    if job_id not in person.act(OUTPUTS, [job_id]):
        return None
    iwd = iwd_of(job_id, ad)
    handed: Any = broker.client.hget(broker.keys.person_outputs(person.name), job_id)
    if not isinstance(handed, bytes):
        raise TransferError(f"job {job_id}: the broker's hand-over of its outputs lapsed; "
                            "fetch them again")
    manifest = unpack(handed)
    write_outputs(broker.store, manifest, iwd)
    person.act(DELIVERED, [job_id])
    log.info("job %s: delivered %d file(s) into %s", job_id, len(manifest.files), iwd)
    return Delivery(job_id, len(manifest.files), manifest.size)
