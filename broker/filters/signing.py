"""Signed admission: what the leader checks of a waiting job before it signs it.

A pool that signs its jobs (broker/trust/signer.py) makes every submission
wait VALIDATING for the leader, which signs what it admits, a batch at a
time (config/signedjob.py). Between the submission and the signature a
job's hash is writable by the execute role (its scripts write job hashes,
and key patterns cannot tell one job from another), so the leader must not
sign whatever it finds there. Each submission therefore records, per job,
the digest of its signed attributes (`staged_digest`) in a key family the
execute role cannot write (`keys.staged`, one hash per cluster; stage.lua
writes it). The leader admits a job only when its hash names it
(ClusterId and ProcId) and its signed attributes give the recorded digest;
a job with no digest (a hand-made submission, or one that skipped staging)
or a changed one is refused with the reason, never signed. The digests of
the jobs it decided are then dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.client import Pipeline

from fetchwork.broker.store import Store, poolrules
from fetchwork.config.signedjob import SignedBatch


class BatchSigner(Protocol):
    """The broker service's signer (broker/trust/signer.py), as admission uses it."""

    def sign_texts(self, texts: Sequence[bytes]) -> list[str]: ...

    def sign_leaves(self, leaves: Sequence[bytes]) -> list[str]: ...

    def sign_batch(self, leaves: Sequence[bytes]) -> SignedBatch: ...


def _split(job: str) -> tuple[str, str]:
    cluster, _, proc = job.partition(".")
    return cluster, proc


def queue_staged(pipe: Pipeline, store: Store, jobs: Sequence[str]) -> int:
    """Queue on `pipe` the reads of the staged digests of `jobs`; the number of replies
    they take (for `staged_of`)."""
    by_cluster = _by_cluster(jobs)
    for cluster, procs in by_cluster.items():
        pipe.hmget(store.keys.staged(cluster), procs)
    return len(by_cluster)


def staged_of(jobs: Sequence[str], replies: Sequence[Any]) -> list[bytes | None]:
    """The staged digest of each of `jobs` (None where there is none), from the replies
    of the reads `queue_staged` queued for them."""
    found: dict[str, Any] = {}
    for (cluster, procs), values in zip(_by_cluster(jobs).items(), replies, strict=True):
        for proc, value in zip(procs, values, strict=True):
            found[f"{cluster}.{proc}"] = value
    return [found.get(job) for job in jobs]


def read_staged(store: Store, jobs: Sequence[str]) -> list[bytes | None]:
    """The staged digest of each of `jobs` (None where there is none), in one round trip."""
    pipe = store.client.pipeline(transaction=False)
    queue_staged(pipe, store, jobs)
    return staged_of(jobs, pipe.execute())


def _by_cluster(jobs: Sequence[str]) -> dict[str, list[str]]:
    by_cluster: dict[str, list[str]] = {}
    for job in jobs:
        cluster, proc = _split(job)
        by_cluster.setdefault(cluster, []).append(proc)
    return by_cluster


def forget_staged(pipe: Pipeline, store: Store, jobs: Sequence[str]) -> None:
    """Drop the staged digests of `jobs` (decided), queued on `pipe`."""
    for cluster, procs in _by_cluster(jobs).items():
        pipe.hdel(store.keys.staged(cluster), *procs)


def refusal(job: str, data: Mapping[str, Any], leaf: bytes,
            staged: bytes | None) -> str | None:
    """Why waiting job `job` (its stored attributes `data`, the leaf of their signed
    text: leaf_digest) must not be signed, given its staged digest; None when it may
    be."""
    if f"{data.get('ClusterId')}.{data.get('ProcId')}" != job:
        return f"its ClusterId and ProcId do not name job {job}: its ad was changed"
    if staged is None:
        return ("it has no staged digest of its signed attributes: it was not submitted "
                "through the pool's submit scripts, so it is not signed")
    if leaf != staged:
        return ("its signed attributes changed while it waited for admission "
                "(written by someone holding a role's credentials)")
    return None


@dataclass(frozen=True)
class Names:
    """What admission needs of a stored job's attribute names: how it spells
    AllowedJobDuration and JobPrio (None: absent), how many attributes
    SUBMIT_MAX_JOB_ATTRS counts, whether it has a BlockedReason. Jobs of one
    submission share their names, so this is worked out once for them all."""

    walltime: str | None
    prio: str | None
    counted: int
    blocked_reason: bool


_NAMES: dict[tuple[str, ...], Names] = {}
_NAMES_KEPT = 1024


def names_of(data: Mapping[str, Any]) -> Names:
    key = tuple(data)
    found = _NAMES.get(key)
    if found is None:
        spelled = {name.lower(): name for name in key}
        found = Names(spelled.get("allowedjobduration"), spelled.get("jobprio"),
                      poolrules.counted_attrs(data), "blockedreason" in spelled)
        if len(_NAMES) < _NAMES_KEPT:
            _NAMES[key] = found
    return found


def rules_refusal(data: Mapping[str, Any], names: Names,
                  rules: poolrules.PoolRules) -> str | None:
    """poolrules.refusal of a stored job, from its names worked out once."""
    asked = {"AllowedJobDuration": data[names.walltime]} if names.walltime else {}
    return (poolrules.walltime_refusal(asked, rules)
            or poolrules.attrs_refusal(names.counted, rules))
