"""A person's transferred files, on the leader's side: inputs a person staged in
its own namespace are checked and moved into the pool's shared store when the
leader queues its submission, and a person's outputs are handed to that person
only.

A person's Redis user cannot write the pool's shared chunk keys (a chunk there
may belong to anyone's job), so `fetchwork submit` stages a person's inputs in
`fw:{P}:u:<name>:staged` (a hash: `chunk:<sha256>` -> the chunk's bytes,
`manifest:<id>` -> a packed manifest; transfer/personupload.py) and names the
manifest in each ad. When the leader carries out the submission (desk.py), it
reads each manifest the ads name from that person's staging (an id the person
did not stage is refused: it could name someone else's files), checks that
the manifest is the one its id names, checks every staged chunk against its
digest (Redis cannot check that a key's name is the digest of its bytes, so
the leader does), stores it as a pending chunk of the pool (transfer_chunk.lua)
and attaches the manifest with the pool's cap (transfer_attach.lua), exactly as
a role's submission does. A chunk the person did not stage must already be in
the pool. Whatever goes wrong, nothing is queued, what was attached is
detached, and the request's staged data is deleted; staging a submission
never finished expires with its hash (TRANSFER_PENDING_LIFETIME).

Outputs: a person may not read the manifests (their digests would give it
anyone's files), so the leader hands the manifest of a job's waiting outputs
to the person in `fw:{P}:u:<name>:outputs` once the desk checked that the job
is the person's (or the person is a queue super user); the person reads the
chunks it names, writes the files, and tells the leader they were delivered,
which settles them (transfer_settle.lua).

The manifest's packed form is transfer/manifest.py's; this module reads of it
only the chunk digests (the layers keep the broker from importing transfer/,
and a test checks that both read the same digests).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import redis

from fetchwork.broker.store import Store, calls, codec, poolrules
from fetchwork.config.loader import Config
from fetchwork.errors import SubmitError

log = logging.getLogger(__name__)

# The job attributes transfer/inputs.py and transfer/delivery.py name them by.
INPUT_MANIFEST_ATTR = "FetchworkInputManifest"
OUTPUT_MANIFEST_ATTR = "FetchworkOutputManifest"
# The request kinds of outputs (requests.py): hand a job's outputs out, settle them.
OUTPUTS, DELIVERED = "outputs", "delivered"
OUTPUT_KINDS = (OUTPUTS, DELIVERED)
# How long a handed manifest waits for its person.
HANDED_TTL_MS = 3_600_000
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


def chunk_field(digest: str) -> str:
    return f"chunk:{digest}"


def manifest_field(ident: str) -> str:
    return f"manifest:{ident}"


def manifest_digests(packed: bytes) -> list[str]:
    """The distinct chunk digests of a packed manifest (version 1 of transfer/manifest.py),
    in order of first use; ValueError when it is not one."""
    try:
        raw = msgpack.unpackb(packed, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ValueError(f"not a manifest: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("v") != 1 or not isinstance(raw.get("files"), list):
        raise ValueError("not a manifest of a known version")
    digests: dict[str, None] = {}
    for entry in raw["files"]:
        if not isinstance(entry, list) or len(entry) != 5 or not isinstance(entry[4], list):
            raise ValueError("a file entry of the manifest is malformed")
        for digest in entry[4]:
            if not isinstance(digest, str) or not _HEX64.match(digest):
                raise ValueError("a chunk digest of the manifest is malformed")
            digests.setdefault(digest)
    return list(digests)


def _packaged(name: str) -> str:
    return Config.load(environ={}, config_file=os.devnull).require(name)


@dataclass
class Admitted:
    """The input manifests attached for one person's submission: detached again when it
    is not queued after all."""

    store: Store
    counts: dict[str, int] = field(default_factory=dict)

    def rollback(self) -> None:
        for ident, jobs in self.counts.items():
            try:
                calls.transfer_detach(self.store, manifest_id=ident, jobs=jobs)
            except Exception:  # noqa: BLE001 - the refusal is the answer to give
                log.exception("could not release the inputs of a refused submission")
        self.counts.clear()


def _manifest_of(ad: Mapping[str, Any]) -> str | None:
    """The input manifest an ad names (any spelling of the attribute), None for none;
    ValueError for two spellings or a value that is no manifest id."""
    named = [value for name, value in ad.items() if name.lower() == INPUT_MANIFEST_ATTR.lower()]
    if not named:
        return None
    if len(named) > 1 or not isinstance(named[0], str) or not _HEX64.match(named[0]):
        raise ValueError(f"{INPUT_MANIFEST_ATTR} must be one manifest id")
    return named[0]


def admit_inputs(store: Store, person: str, ads: Sequence[Mapping[str, Any]],
                 pending_ms: int | None = None) -> tuple[list[dict[str, Any]], Admitted]:
    """The ads of `person`'s submission with their staged inputs moved into the pool and
    attached (one reference per job), and what to roll back if the submission is not
    queued. SubmitError saying why (the cap's knob when the pool is full); nothing of
    the submission's inputs stays then."""
    fixed: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    try:
        for ad in ads:
            ident = _manifest_of(ad)
            copy = {name: value for name, value in ad.items()
                    if name.lower() != INPUT_MANIFEST_ATTR.lower()}
            if ident is not None:
                copy[INPUT_MANIFEST_ATTR] = ident
                counts[ident] += 1
            fixed.append(copy)
    except ValueError as exc:
        raise SubmitError(str(exc)) from exc
    admitted = Admitted(store)
    if not counts:
        return fixed, admitted
    expire_due(store)  # outputs past their lifetime free their room first
    if pending_ms is None:
        pending_ms = int(float(_packaged("TRANSFER_PENDING_LIFETIME")) * 1000)
    staged = store.keys.person_staged(person)
    used: list[str] = []
    moved: list[str] = []
    try:
        for ident, jobs in counts.items():
            used.append(manifest_field(ident))
            packed: Any = store.client.hget(staged, manifest_field(ident))
            if not isinstance(packed, bytes):
                raise SubmitError(f"input manifest {ident[:12]} was not staged by {person} "
                                  "(or its staging expired): submit again")
            if hashlib.sha256(packed).hexdigest() != ident:
                raise SubmitError(f"input manifest {ident[:12]} is not the one its id names")
            try:
                digests = manifest_digests(packed)
            except ValueError as exc:
                raise SubmitError(f"input manifest {ident[:12]}: {exc}") from exc
            for digest in digests:
                used.append(chunk_field(digest))
                if _move_chunk(store, staged, digest, pending_ms):
                    moved.append(digest)
            _attach(store, ident, packed, digests, jobs)
            admitted.counts[ident] = jobs
    except BaseException:
        admitted.rollback()
        _drop_unattached(store, moved)
        raise
    finally:
        # Admitted or refused, this submission's staging is done with.
        for start in range(0, len(used), 500):
            store.client.hdel(staged, *used[start:start + 500])
    log.info("admitted the inputs of %d job(s) of %s: %d sandbox(es)", sum(counts.values()),
             person, len(counts))
    return fixed, admitted


def _move_chunk(store: Store, staged: str, digest: str, pending_ms: int) -> bool:
    """A staged chunk checked against its digest into the pool (pending until attached);
    a chunk not staged must be in the pool already. Whether its bytes were new there."""
    data: Any = store.client.hget(staged, chunk_field(digest))
    if isinstance(data, bytes):
        if hashlib.sha256(data).hexdigest() != digest:
            raise SubmitError(f"a staged chunk does not hold what its name says "
                              f"({digest[:12]}): nothing was queued")
        new = calls.transfer_chunk(store, digest=digest, data=data, pending_ms=pending_ms)
        # Out of the staging at once: Redis holds each chunk once, not twice, meanwhile.
        store.client.hdel(staged, chunk_field(digest))
        return new
    if not store.client.exists(store.keys.xfer_chunk(digest)):
        raise SubmitError(f"chunk {digest[:12]} was neither staged nor in the pool "
                          "(it lapsed meanwhile): submit again")
    return False


def _drop_unattached(store: Store, digests: list[str]) -> None:
    """Delete the chunks a refused submission brought into the pool that no manifest
    holds (a refused upload leaves nothing); an upload of the same bytes under way
    elsewhere then finds them missing at its attach and sends them again."""
    if not digests:
        return
    refs = store.keys.xfer_chunkrefs
    for _ in range(5):
        with store.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(refs)
                held: Any = pipe.hmget(refs, digests)
                gone = [store.keys.xfer_chunk(d) for d, n in zip(digests, held, strict=True)
                        if n is None]
                pipe.multi()
                if gone:
                    pipe.delete(*gone)
                pipe.execute()
                return
            except redis.WatchError:
                continue
    log.warning("left %d unattached chunk(s) of a refused submission to lapse", len(digests))


def _attach(store: Store, ident: str, packed: bytes, digests: list[str], jobs: int) -> None:
    cap = poolrules.transfer_cap_bytes(store)
    verdict, detail = calls.transfer_attach(store, manifest_id=ident, packed=packed,
                                            digests=digests, jobs=jobs, cap_bytes=cap)
    if verdict == 1:
        return
    if verdict == -1:
        assert isinstance(detail, tuple)
        held, new = detail
        raise poolrules.transfer_cap_refusal(held, new, cap)
    raise SubmitError(f"{len(detail) if isinstance(detail, list) else 'some'} chunk(s) of "
                      "the inputs lapsed before they were attached: submit again")


def _output_of(store: Store, job_id: str) -> str | None:
    """The id of job `job_id`'s outputs while they wait to be delivered, else None."""
    raw = store.client.hget(store.keys.job(job_id), OUTPUT_MANIFEST_ATTR)
    ident = codec.unpack(raw) if isinstance(raw, bytes) else None
    if not isinstance(ident, str) or not _HEX64.match(ident):
        return None
    if store.client.zscore(store.keys.xfer_outputs, f"{job_id}|{ident}") is None:
        return None
    return ident


def expire_due(store: Store, now_s: float | None = None) -> list[str]:
    """Settle as expired the outputs whose TRANSFER_OUTPUT_LIFETIME passed (a person may
    not, so the leader does it when people fetch or send files); the jobs they were of."""
    now_s = time.time() if now_s is None else now_s
    due: Any = store.client.zrangebyscore(store.keys.xfer_outputs, "-inf", now_s)
    gone = []
    for member in due:
        job, _, ident = codec.text(member).partition("|")
        if calls.transfer_settle(store, manifest_id=ident, job_id=job, how="expired"):
            log.info("job %s: its outputs expired unfetched", job)
            gone.append(job)
    return gone


def carry_out(store: Store, person: str, kind: str, jobs: Sequence[str]) -> list[str]:
    """An outputs request of `person` on `jobs` the desk checked are theirs to act on:
    `outputs` hands each waiting manifest to the person, `delivered` settles them. The
    jobs it applied to."""
    handed = store.keys.person_outputs(person)
    done: list[str] = []
    if kind == OUTPUTS:
        expire_due(store)
    for job in jobs:
        ident = _output_of(store, job)
        if kind == OUTPUTS:
            if ident is None:
                continue
            packed: Any = store.client.hget(store.keys.xfer_manifest(ident), "data")
            if not isinstance(packed, bytes):
                continue
            store.client.hset(handed, job, packed)
            store.client.pexpire(handed, HANDED_TTL_MS)
        else:
            store.client.hdel(handed, job)
            if ident is None or not calls.transfer_settle(
                    store, manifest_id=ident, job_id=job, how="delivered"):
                continue
        done.append(job)
    log.info("%s for %s: %s", kind, person, " ".join(done) or "nothing waiting")
    return done
