"""The key schema of a pool: the only place that spells Redis key names.

Every key of pool P carries the hash tag `{P}`, so all of a pool's keys live
in one Redis Cluster slot and every Lua script touches one slot.

    fw:{P}:job:<C.P>     hash: one field per job ad attribute, msgpack values: the job's own,
                         over the cluster's while linked (lua/jobad.lua)
    fw:{P}:cluster:<C>   hash: the attributes the procs of cluster C share, stored once
    fw:{P}:queue         zset: jobs not yet finished, scored by submission order
    fw:{P}:idle          zset: IDLE jobs, scored by (-JobPrio, submission order)
    fw:{P}:running       zset: claimed jobs, scored by lease expiry (ms)
    fw:{P}:history       zset: COMPLETED/REMOVED/FAILED jobs, scored by end time (ms)
    fw:{P}:events        stream: one entry per transition
    fw:{P}:clusters      hash: cluster number -> the submission that owns it
    fw:{P}:counter:<n>   string: counters (cluster, seq, head)
    fw:{P}:slot:<name>   string: a published slot ad (msgpack), with a TTL
    fw:{P}:slots         zset: published slot names, scored by expiry (ms)
    fw:{P}:leader        string: the broker replica holding leadership, with a TTL
    fw:{P}:filters       hash: the leader's filter summary (filters/gate.py), the pass counter
    fw:{P}:validating    zset: VALIDATING jobs (submission filters pending), scored by sequence
    fw:{P}:staged:<C>    hash: ProcId -> the digest of a waiting job's signed attributes
                         (filters/signing.py); never written by the execute role
    fw:{P}:sig:<n>       string: signed batch n: its signature, id and size, the tree's nodes
    fw:{P}:sig:<n>:jobs  string: batch n's jobs that may still be queued ("C.P0-P1 ...")
    fw:{P}:sigbatches    set: the live signed batches' numbers; sigcount: the last number
    fw:{P}:activating    zset: ACTIVATING jobs (activation chain running), scored by deadline (ms)
    fw:{P}:blocks        zset: jobs whose activation answered 1, scored by priority group
    fw:{P}:reservations  hash: slot name -> the job an activation answer 2 reserved it for
    fw:{P}:holds         zset: held jobs with a HoldUntil, scored by it (s)
    fw:{P}:activation:<token>        hash: a claim's activation request (slot ad, facts)
    fw:{P}:activation:<token>:reply  list: the leader's verdict for that claim
    fw:{P}:soft          zset: jobs BLOCKED only by a soft PS limit, by FetchworkOrder
    fw:{P}:psledger      hash: policy budget -> its running jobs (the claim scripts' PS re-check)
    fw:{P}:userlog       string: id of the last event the leader wrote to the jobs' user logs
    fw:{P}:userlog:used  string: set by the first submission with a UserLog (the leader's
                         user log writer reads the event stream only once it exists)
    fw:{P}:periodic      zset: jobs with a PeriodicHold/Release/Remove expression, by sequence
    fw:{P}:depwait       set: jobs waiting on dependencies (FetchworkWaitingOn set)
    fw:{P}:dependents:<C.P>  set: the jobs that wait on job C.P
    fw:{P}:ac:groups     zset: autoclusters with idle jobs, scored by their best idle score
    fw:{P}:ac:members    zset: idle jobs by autocluster then score, by lex (broker/claim/index.py)
    fw:{P}:ac:reps       hash: autocluster -> what a match reads of its jobs
    fw:{P}:backfill      string: the leader's backfill reservation (msgpack, backfill/plan.py)
    fw:{P}:sortslots     hash: slot name -> its ad while it waits for work (claim/sorting.py)
    fw:{P}:settings      hash: the pool's rules the leader publishes, versioned (store/poolrules.py)
    fw:{P}:doorbell      list: names of people with new requests (any person may push)
    fw:{P}:people        set: names of people who ever sent a request (kept by the leader)
    fw:{P}:u:<name>:requests     stream: one person's requests (broker/trust/requests.py)
    fw:{P}:u:<name>:reply:<id>   list: the leader's answer to that person's request <id>
    fw:{P}:u:<name>:staged   hash: a person's inputs on their way in ("chunk:<sha256>",
                             "manifest:<id>"), until the leader admits them (trust/personfiles.py)
    fw:{P}:u:<name>:outputs  hash: job id -> the output manifest the leader handed that person
    fw:{P}:xfer:chunk:<sha256>  string: one chunk of transferred files (lua/transferrefs.lua)
    fw:{P}:xfer:manifest:<id>   hash: the files of one input or output sandbox, its chunks
    fw:{P}:xfer:refs, xfer:chunkrefs  hash: manifest -> jobs needing it; chunk -> manifests
    fw:{P}:xfer:bytes    string: bytes of all referenced chunks (the pool's cap)
    fw:{P}:xfer:outputs  zset: "<job id>|<manifest id>" of outputs not yet delivered, by expiry (s)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _named(suffix: str) -> Any:
    """A read-only attribute: the pool's key `fw:{P}:<suffix>`."""
    return property(lambda self: f"{self.prefix}{suffix}", doc=f"fw:{{P}}:{suffix}")


@dataclass(frozen=True)
class PoolKeys:
    """Key builders for one pool."""

    pool: str

    def __post_init__(self) -> None:
        if not self.pool or any(ch in self.pool for ch in "{}: \t\n"):
            raise ValueError(f"pool name {self.pool!r} must be non-empty without braces, "
                             "colons or spaces")

    @property
    def prefix(self) -> str:
        return f"fw:{{{self.pool}}}:"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def cluster(self, cluster: int | str) -> str:
        """The cluster ad of cluster number `cluster` (lua/jobad.lua makes the same name)."""
        return f"{self.prefix}cluster:{cluster}"

    def slot(self, name: str) -> str:
        return f"{self.prefix}slot:{name}"

    # The pool's fixed keys, one per line: attribute = its name after the prefix.
    queue = _named("queue")
    idle = _named("idle")
    running = _named("running")
    history = _named("history")
    events = _named("events")
    clusters = _named("clusters")
    cluster_counter = _named("counter:cluster")
    seq_counter = _named("counter:seq")
    head_counter = _named("counter:head")
    slots = _named("slots")
    leader = _named("leader")
    filters = _named("filters")
    validating = _named("validating")
    activating = _named("activating")
    blocks = _named("blocks")
    reservations = _named("reservations")
    holds = _named("holds")
    soft = _named("soft")
    ps_ledger = _named("psledger")
    userlog = _named("userlog")
    # Whether any job ever named a user log (leader/interest.py).
    userlog_used = _named("userlog:used")
    periodic = _named("periodic")
    dep_waiting = _named("depwait")
    ac_groups = _named("ac:groups")
    ac_members = _named("ac:members")
    ac_reps = _named("ac:reps")

    def dependents(self, job_id: str) -> str:
        return f"{self.prefix}dependents:{job_id}"
    backfill = _named("backfill")
    sortslots = _named("sortslots")
    # The pool's rules, as its leader publishes them (store/poolrules.py).
    settings = _named("settings")

    # People (broker/trust): each person's own namespace, and the pool's doorbell.
    doorbell = _named("doorbell")
    people = _named("people")

    def person(self, name: str) -> str:
        """The prefix of person `name`'s namespace, `fw:{P}:u:<name>:`."""
        return f"{self.prefix}u:{name}:"

    def requests(self, name: str) -> str:
        return f"{self.person(name)}requests"

    def reply(self, name: str, request_id: str) -> str:
        return f"{self.person(name)}reply:{request_id}"

    # A person's file transfer (broker/trust/personfiles.py): inputs staged in the
    # person's namespace until the leader admits them, outputs' manifests handed out.
    def person_staged(self, name: str) -> str:
        return f"{self.person(name)}staged"

    def person_outputs(self, name: str) -> str:
        return f"{self.person(name)}outputs"

    # Signed admission (broker/filters/signing.py): the digest of each staged job's
    # signed attributes, per cluster, in a key family only the submitting roles and
    # the broker service write (never the execute role).
    def staged(self, cluster: int | str) -> str:
        return f"{self.prefix}staged:{cluster}"

    # Signed batches (config/signedjob.py, lua/sigbatch.lua): what the jobs of one
    # signed batch share, stored once, and the pool's live batches. Strings and a set:
    # types no submitter or execute rule may write (broker/connections/acl.py).
    sig_batches = _named("sigbatches")
    sig_counter = _named("sigcount")

    def sig_batch(self, number: int | str) -> str:
        """Batch `number`'s string: signature, batch id and size, the tree's nodes."""
        return f"{self.prefix}sig:{number}"

    def sig_jobs(self, number: int | str) -> str:
        """The jobs of batch `number` that may still be queued, as cluster.proc runs."""
        return f"{self.prefix}sig:{number}:jobs"

    def activation(self, token: str) -> str:
        return f"{self.prefix}activation:{token}"

    def activation_reply(self, token: str) -> str:
        return f"{self.prefix}activation:{token}:reply"

    # -- file transfer (lua/transferrefs.lua describes these keys) ---------------------
    xfer_refs = _named("xfer:refs")
    xfer_chunkrefs = _named("xfer:chunkrefs")
    xfer_bytes = _named("xfer:bytes")
    xfer_outputs = _named("xfer:outputs")

    def xfer_chunk(self, digest: str) -> str:
        """One chunk of transferred files, named by the SHA-256 (hex) of its bytes."""
        return f"{self.prefix}xfer:chunk:{digest}"

    def xfer_manifest(self, manifest_id: str) -> str:
        """The manifest of one input or output sandbox."""
        return f"{self.prefix}xfer:manifest:{manifest_id}"
