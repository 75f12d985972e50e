"""Submitting a cluster of jobs: all or nothing, fast for big clusters.

Two steps. stage.lua writes the job hashes batch by batch (a plain
pipeline; staged jobs are in no index, so nothing sees them) after checking
that the cluster belongs to this submission. Then one MULTI/EXEC runs
submit.lua per batch to put every job in the queue and idle sets and emit its
event, so the whole cluster appears at once. The second step is cheap per job
(sorted-set members and one XADD), which keeps even 100,000 jobs well inside
a client's socket timeout. If staging fails, the staged hashes are deleted.
Sequence numbers come from counter:seq before staging, so FetchworkOrder is
computed here: -JobPrio * 2^34 + sequence.
"""

from __future__ import annotations

import getpass
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import classad2
import redis
from redis.exceptions import NoScriptError

from fetchwork.errors import SubmitError

from . import codec
from .jobads import PreparedJob, prepare_submitted
from .states import HELD_STATUS, IDLE_STATUS, PRIO_SCALE, State

if TYPE_CHECKING:
    from .client import Broker

log = logging.getLogger(__name__)

BATCH = 1000
# Jobs made visible per MULTI/EXEC: one EXEC must stay well inside a client's
# socket timeout (redis-py's default is 5 s) even on a loaded server.
TRANSACTION = 20_000


class Submitter:
    def __init__(self, broker: Broker):
        self.broker = broker

    def submit(self, ads: Sequence[classad2.ClassAd | Mapping[str, Any]], owner: str | None,
               cluster_id: int | None) -> list[str]:
        if not ads:
            return []
        normalizer = codec.AdNormalizer()
        qdate_s = int(time.time())
        fallback_owner = owner or getpass.getuser()
        jobs = [prepare_submitted(normalizer.normalize(ad), 0, proc, owner, qdate_s,
                                  self.broker.pool, self.broker.default_lease_s, fallback_owner)
                for proc, ad in enumerate(ads)]
        broker = self.broker
        cluster = cluster_id if cluster_id is not None else broker.next_cluster()
        last_seq = int(broker.client.incrby(broker.keys.seq_counter, len(jobs)))
        placed = [place(job, cluster, last_seq - len(jobs) + proc + 1, qdate_s, broker.pool)
                  for proc, job in enumerate(jobs)]
        nonce = uuid.uuid4().hex
        try:
            self._retrying(lambda: self._stage(cluster, nonce, placed))
        except redis.RedisError as exc:
            self._unstage(cluster, nonce, placed)
            raise SubmitError(f"submission to cluster {cluster} refused: {exc}") from exc
        self._retrying(lambda: self._queue(placed))
        log.info("submitted %d job(s) to cluster %s", len(placed), cluster)
        return [job.job_id for job, _seq in placed]

    def _retrying(self, step: Callable[[], None]) -> None:
        """Run `step`; once more after NOSCRIPT (the server lost its script cache).
        Both steps may run twice: staging rewrites the same fields, and a failed
        MULTI of scripts ran none of them."""
        try:
            step()
        except NoScriptError:
            self.broker.scripts.forget()
            step()

    def _stage(self, cluster: int, nonce: str, placed: list[tuple[PreparedJob, int]]) -> None:
        broker = self.broker
        broker.scripts.ensure_loaded(["stage"])
        pipe = broker.client.pipeline(transaction=False)
        head = ["", str(broker.events_maxlen), str(cluster), nonce]
        packer = codec.FieldPacker()
        for start in range(0, len(placed), BATCH):
            batch = placed[start:start + BATCH]
            blob = codec.pack_for_lua([packer.fields(job.attrs) for job, _seq in batch])
            keys = broker.pool_keys() + [broker.keys.job(job.job_id) for job, _seq in batch]
            broker.scripts.queue(pipe, "stage", keys, [*head, blob])
        pipe.execute()

    def _unstage(self, cluster: int, nonce: str, placed: list[tuple[PreparedJob, int]]) -> None:
        """Delete what staging wrote, if this submission owns the cluster."""
        keys = self.broker.keys
        try:
            owner = self.broker.client.hget(keys.clusters, str(cluster))
            if owner is None or owner.decode() != nonce:
                return
            pipe = self.broker.client.pipeline(transaction=False)
            for start in range(0, len(placed), BATCH):
                pipe.delete(*[keys.job(job.job_id) for job, _seq in placed[start:start + BATCH]])
            pipe.hdel(keys.clusters, str(cluster))
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not clean up the failed submission to cluster %s: %s",
                        cluster, exc)

    def _queue(self, placed: list[tuple[PreparedJob, int]]) -> None:
        broker = self.broker
        broker.scripts.ensure_loaded(["submit"])
        head = ["", str(broker.events_maxlen)]
        for first in range(0, len(placed), TRANSACTION):
            pipe = broker.client.pipeline(transaction=True)
            for start in range(first, min(first + TRANSACTION, len(placed)), BATCH):
                blob = codec.pack_for_lua([
                    [job.job_id, seq, str(job.attrs["FetchworkOrder"]), job.held]
                    for job, seq in placed[start:start + BATCH]])
                broker.scripts.queue(pipe, "submit", broker.pool_keys(), [*head, blob])
            pipe.execute()


def place(job: PreparedJob, cluster: int, seq: int, qdate_s: int,
          pool: str) -> tuple[PreparedJob, int]:
    """Fill in `job`'s cluster, sequence and initial state (in place); (job, seq)."""
    attrs = job.attrs
    job.job_id = f"{cluster}.{attrs['ProcId']}"
    attrs["ClusterId"] = cluster
    attrs["GlobalJobId"] = f"{pool}#{job.job_id}#{qdate_s}"
    attrs["FetchworkOrder"] = -job.prio * PRIO_SCALE + seq
    attrs["FetchworkState"] = State.HELD.value if job.held else State.IDLE.value
    attrs["JobStatus"] = HELD_STATUS if job.held else IDLE_STATUS
    attrs["EnteredCurrentStatus"] = qdate_s
    return job, seq
