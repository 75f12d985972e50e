"""Submitting a cluster of jobs: all or nothing, fast for big clusters.

Two steps. stage.lua writes the job hashes batch by batch (a plain
pipeline; staged jobs are in no index, so nothing sees them) after checking
that the cluster belongs to this submission; the attributes that jobs made
from equal ads share are sent once per batch (submission/shape.py). Then one MULTI/EXEC runs
submit.lua per batch to put every job in the queue and idle sets and emit its
event, so the whole cluster appears at once. The second step is cheap per job
(sorted-set members and one XADD), which keeps even 100,000 jobs well inside
a client's socket timeout. If staging fails, the staged hashes are deleted.
When the leader publishes submission filters or job templates, stage.lua
makes each batch VALIDATING and says so, and submit.lua puts those jobs in
the validating set instead of the idle one: no extra round trip either way.
Sequence numbers come from counter:seq before staging, so each job's
identity and FetchworkOrder are decided here (jobads.identity).
"""

from __future__ import annotations

import getpass
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import classad2
import redis
from redis.exceptions import NoScriptError

from fetchwork.broker.connections.durability import ReplicaWait
from fetchwork.broker.dependencies.resolver import plan_dependencies, register_waiting
from fetchwork.broker.scheduling.limits import admission
from fetchwork.broker.scheduling.settings import SchedulingSettings
from fetchwork.broker.store import Store, calls, codec
from fetchwork.broker.store.acmembers import AUTOCLUSTER_ATTR
from fetchwork.broker.store.jobads import PreparedJob, identity, place
from fetchwork.broker.store.states import State
from fetchwork.errors import SubmitError

from .shape import PackedJobs, SubmissionShape, SubmitGroups

log = logging.getLogger(__name__)

BATCH = 1000
# Jobs made visible per MULTI/EXEC: one EXEC must stay well inside a client's
# socket timeout (redis-py's default is 5 s) even on a loaded server.
TRANSACTION = 20_000


@dataclass
class Submitted:
    """A queued cluster: its job ids, and whether they wait for the leader's
    submission filters (VALIDATING) before they become IDLE."""

    job_ids: list[str]
    validating: bool = False


class Submitter:
    """Submits clusters to one pool; jobs without JobLeaseDuration get `default_lease_s`."""

    def __init__(self, store: Store, default_lease_s: float,
                 scheduling: SchedulingSettings | None = None, default_exclusive: bool = False,
                 replica_wait: ReplicaWait | None = None):
        self.store = store
        self.replica_wait = replica_wait  # FETCHWORK_BROKER_WAIT_REPLICAS
        self.default_lease_s = default_lease_s
        self.default_exclusive = default_exclusive  # DEFAULT_JOB_EXCLUSIVE
        # Scheduling policy: MAX_WALLTIME refuses; with limits, jobs start BLOCKED.
        self.scheduling = scheduling

    def next_cluster(self) -> int:
        """Allocate a cluster number."""
        return int(self.store.client.incr(self.store.keys.cluster_counter))

    def submit(self, ads: Sequence[classad2.ClassAd | Mapping[str, Any]], owner: str | None,
               cluster_id: int | None) -> Submitted:
        if not ads:
            return Submitted([])
        qdate_s = int(time.time())
        user = getpass.getuser()
        shape = SubmissionShape(self.default_lease_s, self.default_exclusive)
        jobs = shape.prepare(ads, qdate_s)
        blocked_reason = admission(self.scheduling, [job.attrs for job in jobs])
        store = self.store
        cluster = cluster_id if cluster_id is not None else self.next_cluster()
        first_seq = int(store.client.incrby(store.keys.seq_counter, len(jobs))) - len(jobs) + 1
        placed = [(place(job, identity(store.pool, cluster, proc, qdate_s, first_seq + proc,
                                       job.prio, owner, job.ad_owner, user), blocked_reason),
                   first_seq + proc)
                  for proc, job in enumerate(jobs)]
        # Depends: refused when missing or cyclic; dependent jobs wait BLOCKED.
        if shape.any_depends(jobs):
            plan_dependencies(store, cluster, jobs)
        fields = shape.fields([job for job, _seq in placed])
        nonce = uuid.uuid4().hex
        validating: list[bool] = []
        try:
            self._retrying(lambda: self._stage(cluster, nonce, placed, validating, fields))
        except redis.RedisError as exc:
            self._unstage(cluster, nonce, placed)
            raise SubmitError(f"submission to cluster {cluster} refused: {exc}") from exc
        periodic = shape.periodic(jobs)
        self._retrying(lambda: self._queue(placed, validating, shape.groups, periodic))
        # Durable across a failover (connections/durability.py).
        if self.replica_wait is not None:
            self.replica_wait.after(store.client, store.keys.seq_counter,
                                    f"the submission of cluster {cluster}")
        log.info("submitted %d job(s) to cluster %s", len(placed), cluster)
        return Submitted([job.job_id for job, _seq in placed], any(validating))

    def _retrying(self, step: Callable[[], None]) -> None:
        """Run `step`; once more after NOSCRIPT (the server lost its script cache).
        Both steps may run twice: staging rewrites the same fields, and a failed
        MULTI of scripts ran none of them."""
        try:
            step()
        except NoScriptError:
            self.store.scripts.forget()
            step()

    def _stage(self, cluster: int, nonce: str, placed: list[tuple[PreparedJob, int]],
               validating: list[bool], fields: PackedJobs) -> None:
        store = self.store
        pipe = store.client.pipeline(transaction=False)
        for start in range(0, len(placed), BATCH):
            batch = placed[start:start + BATCH]
            blob = codec.pack_for_lua(fields.runs(start, start + len(batch)))
            calls.stage(store, pipe, cluster=cluster, nonce=nonce,
                        job_ids=[job.job_id for job, _seq in batch], runs=blob)
        # Per batch: (jobs written, whether they are VALIDATING).
        validating[:] = [bool(flag) for _count, flag in pipe.execute()]

    def _unstage(self, cluster: int, nonce: str, placed: list[tuple[PreparedJob, int]]) -> None:
        """Delete what staging wrote, if this submission owns the cluster."""
        keys = self.store.keys
        try:
            owner = self.store.client.hget(keys.clusters, str(cluster))
            if owner is None or codec.text(owner) != nonce:
                return
            pipe = self.store.client.pipeline(transaction=False)
            for start in range(0, len(placed), BATCH):
                pipe.delete(*[keys.job(job.job_id) for job, _seq in placed[start:start + BATCH]])
            pipe.delete(keys.cluster(cluster))
            pipe.hdel(keys.clusters, str(cluster))
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not clean up the failed submission to cluster %s: %s",
                        cluster, exc)

    def _queue(self, placed: list[tuple[PreparedJob, int]], validating: list[bool],
               groups: SubmitGroups, periodic: list[bool]) -> None:
        store = self.store
        for first in range(0, len(placed), TRANSACTION):
            pipe = store.client.pipeline(transaction=True)
            for start in range(first, min(first + TRANSACTION, len(placed)), BATCH):
                batch = placed[start:start + BATCH]
                gids = [job.attrs[AUTOCLUSTER_ATTR] for job, _seq in batch]
                blob = codec.pack_for_lua([
                    [job.job_id, seq, str(job.attrs["FetchworkOrder"]), job.held,
                     job.attrs["FetchworkState"] == State.BLOCKED, gid]
                    for (job, seq), gid in zip(batch, gids, strict=True)])
                reps = codec.pack_for_lua(groups.entries(gids))
                calls.submit(store, pipe, batch=blob, validating=validating[start // BATCH],
                             autoclusters=reps)
                # Jobs with periodic policy expressions, for the leader's periodic pass.
                due = {job.job_id: seq for (job, seq), flag
                       in zip(batch, periodic[start:start + BATCH], strict=True) if flag}
                if due:
                    pipe.zadd(store.keys.periodic, due)
            register_waiting(pipe, store, (job for job, _seq in placed[first:first + TRANSACTION]))
            note_user_logs(pipe, store, (job for job, _seq in placed[first:first + TRANSACTION]))
            pipe.execute()


def note_user_logs(pipe: redis.client.Pipeline, store: Store,
                   jobs: Iterable[PreparedJob]) -> None:
    """Mark the pool as one whose jobs use user logs, in `pipe` (the MULTI that queues
    `jobs`, so the mark is there before any of their events), when one of them names
    one: the leader's user log writer reads events only once it is (leader/interest.py)."""
    if any(job.attrs.get("UserLog") for job in jobs):
        pipe.set(store.keys.userlog_used, 1)
