"""Submitting a cluster of jobs: all or nothing, fast for big clusters.

Two steps. stage.lua writes the job hashes batch by batch (a plain
pipeline; staged jobs are in no index, so nothing sees them) after checking
that the cluster belongs to this submission; the attributes that jobs made
from equal ads share are sent once per batch (submission/shape.py). Then one MULTI/EXEC runs
submit.lua per batch to put every job in the queue and idle sets and emit its
event, so the whole cluster appears at once. The second step is cheap per job
(sorted-set members and one XADD), which keeps even 100,000 jobs well inside
a client's socket timeout. If staging fails, the staged hashes are deleted.
A submission of one batch with nothing else to write as it is queued (no
periodic policy, dependency or user log) takes one step: stage.lua queues
the batch itself once it is staged (lua/queueing.lua, submit.lua's work),
which saves a round trip on the path of a single job's start.
The pool's rules are its leader's, never this client's configuration:
stage.lua checks every job against the rules the leader published
(store/poolrules.py: MAX_WALLTIME, SUBMIT_MAX_JOB_ATTRS; a refusal names the
job and the rule, and nothing is queued) and says how the batch waits:
VALIDATING for the leader when nothing is published yet or the pool has
submission filters or job templates, BLOCKED for the policy's pass when it
has scheduling limits. submit.lua then puts the jobs in the validating,
blocked or idle part: no extra round trip either way. The published rules
are read once per submission, with the sequence numbers, for what they give
a job that does not say (its lease, DEFAULT_JOB_EXCLUSIVE). Sequence numbers
come from counter:seq before staging, so each job's identity and
FetchworkOrder are decided here (jobads.identity).
A batch that will wait for the leader also carries each job's staged digest
(config/signedjob.py staged_digest), which stage.lua keeps where the execute
role cannot write: a pool that signs admits a job only while its signed
attributes still give that digest (filters/signing.py).
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
from redis.exceptions import NoPermissionError, NoScriptError

from fetchwork.broker.connections.durability import ReplicaWait
from fetchwork.broker.dependencies.resolver import plan_dependencies, register_waiting, waits
from fetchwork.broker.store import Store, calls, codec, poolrules
from fetchwork.broker.store.acmembers import AUTOCLUSTER_ATTR
from fetchwork.broker.store.jobads import PreparedJob, identity, place
from fetchwork.broker.store.states import State
from fetchwork.config.signedjob import staged_digest
from fetchwork.errors import SubmitError

from .shape import PackedJobs, SubmissionShape, SubmitGroups

log = logging.getLogger(__name__)

BATCH = 1000
# Jobs made visible per MULTI/EXEC: one EXEC must stay well inside a client's
# socket timeout (redis-py's default is 5 s) even on a loaded server.
TRANSACTION = 20_000


# stage.lua's answer for a batch whose jobs wait for the leader's admission.
VALIDATING_MODE = "validating"


@dataclass
class Submitted:
    """A queued cluster: its job ids, whether they wait VALIDATING for the leader's
    admission before they become IDLE, and whether that is because the pool's leader
    has published no rules yet (`unpublished`: the pool fails closed)."""

    job_ids: list[str]
    validating: bool = False
    unpublished: bool = False


class Submitter:
    """Submits clusters to one pool. What a job that does not say gets (its lease,
    Exclusive) is the pool's published default; `default_lease_s` and
    `default_exclusive` stand in only while the pool has published none, and the
    leader's admission decides those jobs."""

    def __init__(self, store: Store, default_lease_s: float, default_exclusive: bool = False,
                 replica_wait: ReplicaWait | None = None):
        self.store = store
        self.replica_wait = replica_wait  # FETCHWORK_BROKER_WAIT_REPLICAS
        self.default_lease_s = default_lease_s
        self.default_exclusive = default_exclusive  # DEFAULT_JOB_EXCLUSIVE

    def next_cluster(self) -> int:
        """Allocate a cluster number."""
        return int(self.store.client.incr(self.store.keys.cluster_counter))

    def submit(self, ads: Sequence[classad2.ClassAd | Mapping[str, Any]], owner: str | None,
               cluster_id: int | None) -> Submitted:
        if not ads:
            return Submitted([])
        qdate_s = int(time.time())
        user = getpass.getuser()
        store = self.store
        pipe = store.client.pipeline(transaction=False)
        if cluster_id is None:
            pipe.incr(store.keys.cluster_counter)
        pipe.incrby(store.keys.seq_counter, len(ads))
        pipe.hmget(store.keys.settings, poolrules.RULE_FIELDS)
        *counters, settings = pipe.execute()
        cluster = int(counters[0]) if cluster_id is None else cluster_id
        first_seq = int(counters[-1]) - len(ads) + 1
        published = poolrules.from_rule_values(settings)
        lease_s, exclusive = ((published.rules.default_lease_s, published.rules.default_exclusive)
                              if published is not None
                              else (self.default_lease_s, self.default_exclusive))
        shape = SubmissionShape(lease_s, exclusive)
        jobs = shape.prepare(ads, qdate_s)
        placed = [(place(job, identity(store.pool, cluster, proc, qdate_s, first_seq + proc,
                                       job.prio, owner, job.ad_owner, user)),
                   first_seq + proc)
                  for proc, job in enumerate(jobs)]
        # Depends: refused when missing or cyclic; dependent jobs wait BLOCKED.
        if shape.any_depends(jobs):
            plan_dependencies(store, cluster, jobs)
        nonce = uuid.uuid4().hex
        fields = shape.fields([job for job, _seq in placed])
        # Jobs that will wait for the leader's admission: their staged digests.
        for_leader = published is None or published.rules.filtered
        digests = [staged_digest(job.attrs) for job, _seq in placed] if for_leader else []
        modes: list[str] = []
        periodic = shape.periodic(jobs)
        # One batch with nothing else to write as it is queued (what `_queue` writes
        # beside submit.lua): staged and queued at once.
        at_once = len(placed) <= BATCH and not any(periodic) and not any(
            waits(job) or uses_user_log(job) for job, _seq in placed)
        queue = self._queue_args(placed, shape.groups) if at_once else None
        try:
            self._retrying(lambda: self._stage(cluster, nonce, placed, modes, fields, digests,
                                               queue))
        except redis.RedisError as exc:
            # A call that also queues may have run with only its reply lost.
            landed = (self._landed(cluster, placed, exc)
                      if queue is not None and not isinstance(exc, redis.ResponseError)
                      else False)
            if not landed:
                self._unstage(cluster, nonce, placed)
                rule = rules_refusal(exc)
                if rule is not None:  # stage.lua names the job and the pool's rule
                    raise SubmitError(f"the pool refused the submission to cluster {cluster}: "
                                      f"{rule}") from exc
                raise SubmitError(f"submission to cluster {cluster} refused: {exc}") from exc
            modes[:] = [VALIDATING_MODE if for_leader else ""]
        if queue is None:
            self._retrying(lambda: self._queue(placed, modes, shape.groups, periodic))
        # Durable across a failover (connections/durability.py).
        if self.replica_wait is not None:
            self.replica_wait.after(store.client, store.keys.seq_counter,
                                    f"the submission of cluster {cluster}")
        validating = any(mode == VALIDATING_MODE for mode in modes)
        log.info("submitted %d job(s) to cluster %s%s", len(placed), cluster,
                 "; they wait for the pool's leader, which has published no rules yet"
                 if published is None else "")
        return Submitted([job.job_id for job, _seq in placed], validating,
                         unpublished=published is None)

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
               modes: list[str], fields: PackedJobs, digests: list[bytes],
               queue: tuple[bytes, bytes] | None = None) -> None:
        """stage.lua for each batch; with `queue` (the one batch's submit.lua arguments,
        `_queue_args`), the call queues it too."""
        store = self.store
        pipe = store.client.pipeline(transaction=False)
        for start in range(0, len(placed), BATCH):
            batch = placed[start:start + BATCH]
            blob = codec.pack_for_lua(fields.runs(start, start + len(batch)))
            calls.stage(store, pipe, cluster=cluster, nonce=nonce,
                        job_ids=[job.job_id for job, _seq in batch], runs=blob,
                        digests=b"".join(digests[start:start + BATCH]),
                        queue=queue[0] if queue else b"",
                        autoclusters=queue[1] if queue else b"")
        # Per batch: (jobs written, how they wait: 'validating', 'blocked' or '', [queued]).
        modes[:] = [codec.text(reply[1]) for reply in pipe.execute()]

    def _landed(self, cluster: int, placed: list[tuple[PreparedJob, int]],
                failure: redis.RedisError) -> bool:
        """Whether a stage-and-queue call that failed with `failure` (no reply) queued
        its batch: its first job is in the queue or the history. When that cannot be
        told either, nothing is deleted (the jobs may be queued) and the error says so."""
        keys = self.store.keys
        first = placed[0][0].job_id
        try:
            pipe = self.store.client.pipeline(transaction=False)
            pipe.zscore(keys.queue, first)
            pipe.zscore(keys.history, first)
            return any(score is not None for score in pipe.execute())
        except redis.RedisError as exc:
            raise SubmitError(
                f"the submission to cluster {cluster} got no answer ({failure}), and whether "
                f"it was queued cannot be told now ({exc}): look for job {first} in the "
                f"queue before submitting it again") from failure

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
            pipe.delete(keys.cluster(cluster), keys.staged(cluster))
            pipe.hdel(keys.clusters, str(cluster))
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not clean up the failed submission to cluster %s: %s",
                        cluster, exc)

    @staticmethod
    def _queue_args(batch: list[tuple[PreparedJob, int]],
                    groups: SubmitGroups) -> tuple[bytes, bytes]:
        """submit.lua's `batch` and `autoclusters` arguments for `batch`."""
        gids = [job.attrs[AUTOCLUSTER_ATTR] for job, _seq in batch]
        blob = codec.pack_for_lua([
            [job.job_id, seq, str(job.attrs["FetchworkOrder"]), job.held,
             job.attrs["FetchworkState"] == State.BLOCKED, gid]
            for (job, seq), gid in zip(batch, gids, strict=True)])
        return blob, codec.pack_for_lua(groups.entries(gids))

    def _queue(self, placed: list[tuple[PreparedJob, int]], modes: list[str],
               groups: SubmitGroups, periodic: list[bool]) -> None:
        store = self.store
        for first in range(0, len(placed), TRANSACTION):
            pipe = store.client.pipeline(transaction=True)
            for start in range(first, min(first + TRANSACTION, len(placed)), BATCH):
                batch = placed[start:start + BATCH]
                blob, reps = self._queue_args(batch, groups)
                calls.submit(store, pipe, batch=blob, mode=modes[start // BATCH],
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
    if any(uses_user_log(job) for job in jobs):
        pipe.set(store.keys.userlog_used, 1)


def uses_user_log(job: PreparedJob) -> bool:
    """Whether new job `job` names a user log (`note_user_logs` marks the pool)."""
    return bool(job.attrs.get("UserLog"))


# How stage.lua ends a refusal by the pool's rules.
_REFUSAL_END = "; nothing was queued"


def rules_refusal(exc: redis.RedisError) -> str | None:
    """stage.lua's refusal by the pool's rules as it wrote it (a pipeline prefixes
    which command failed), or None for any other error."""
    if not isinstance(exc, redis.ResponseError) or isinstance(exc, NoPermissionError):
        return None
    text = str(exc)
    marker = "of pipeline caused error: "
    text = text.split(marker, 1)[1] if marker in text else text
    return text if text.endswith(_REFUSAL_END) else None
