"""The leader's request desk: carries out what people asked for in their namespaces.

A person's client writes a request to its own stream and pushes its name
onto the pool's doorbell list (people.py, requests.py). As one of the
leader's duties, the desk pops the doorbell every `POLL_S` and, on taking
the lead, reads every known person's stream (so a new leader finishes what
its predecessor left). For each entry it decides with the person's name
taken from the stream's key, never from the entry: a submission is queued
with `Owner` set to that name whatever the ads say (through the leader's own
Submitter, so the pool's rules apply); an action or edit is carried out only
when every job it names is that person's (or the person is one of
QUEUE_SUPER_USERS). Then it answers on the reply list and deletes the entry.
A request that cannot be parsed, or that is refused, changes nothing and is
answered with the reason. A request whose answer already exists (the leader
died between the two) is not carried out again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import redis

from fetchwork.broker.connections.aclpeople import NAME_RE
from fetchwork.broker.store import Store, calls, codec
from fetchwork.broker.submission.submitter import Submitted
from fetchwork.config.protocol import HoldCode
from fetchwork.config.signedjob import SIGNATURE_ATTR, SIGNED_ATTRIBUTES, staged_digest
from fetchwork.errors import FetchworkError

from . import personfiles, requests

log = logging.getLogger(__name__)

POLL_S = 0.2
# Entries read per person per pass, and doorbell rings popped per pass.
ENTRIES = 64
RINGS = 256
# A reply waits this long for its client.
REPLY_TTL_MS = 3_600_000
# People the desk remembers (the people set): a bound on what one pass reads.
MAX_PEOPLE = 100_000

Sign = Callable[[Mapping[str, Any]], str]
_SIGNED = frozenset(name.lower() for name in SIGNED_ATTRIBUTES)


class Queueing(Protocol):
    """How the desk queues a person's jobs: the leader's own client (broker/client.py),
    so the pool's rules, as the leader has them, apply."""

    def next_cluster(self) -> int: ...

    def submit_cluster(self, ads: Sequence[Mapping[str, Any]], owner: str | None = None,
                       cluster_id: int | None = None) -> Submitted: ...

    def edit(self, job_ids: Sequence[str], attr: str, value: str) -> list[str]: ...


def given_to(person: str) -> str:
    """What the clusters hash holds for a cluster number given to `person` until its
    submission claims it (stage.lua then records the submission's own nonce)."""
    return f"person:{person}"


class RequestDesk:
    """Carries out people's requests while this replica leads."""

    name = "requests"
    reads_events = False

    def __init__(self, store: Store, queueing: Queueing, super_users: frozenset[str],
                 sign: Sign | None = None):
        self.store = store
        self.queueing = queueing
        self.super_users = super_users
        self.sign = sign
        self._sweep = True
        self._passed_at: float | None = None

    # -- as a duty of the leader (leader/duty.py) ---------------------------------

    def on_lead(self, since: str) -> None:
        self._sweep = True

    def on_lose(self) -> None:
        pass

    def on_events(self, events: Sequence[tuple[str, dict[str, str]]]) -> None:
        pass

    def due_in_s(self, now_s: float) -> float:
        if self._sweep or self._passed_at is None:
            return 0.0
        return max(0.0, self._passed_at + POLL_S - now_s)

    def run_due(self, now_s: float) -> None:
        self.run_pass()
        self._passed_at = now_s

    def close(self) -> None:
        pass

    # -- passes -------------------------------------------------------------------

    def run_pass(self) -> int:
        """Carry out the pending requests of everyone who rang (everyone known after
        taking the lead); the number of requests answered."""
        client, keys = self.store.client, self.store.keys
        rung: Any = client.lpop(keys.doorbell, RINGS) or []
        names = {codec.text(raw) for raw in rung}
        if self._sweep:
            known: Any = client.srandmember(keys.people, MAX_PEOPLE) or []
            names |= {codec.text(raw) for raw in known}
            self._sweep = False
        answered = 0
        for name in sorted(names):
            if not NAME_RE.match(name):
                continue  # a ring for no possible person: nobody's stream to read
            try:
                answered += self._serve(name)
            except redis.ResponseError as exc:
                # Not a stream (a key someone else made there): this person only waits.
                log.warning("cannot read the requests of %s (%s): %s", name,
                            self.store.keys.requests(name), exc)
        return answered

    def _serve(self, person: str) -> int:
        client, keys = self.store.client, self.store.keys
        stream = keys.requests(person)
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
            stream, "-", "+", count=ENTRIES)
        if not entries:
            return 0
        client.sadd(keys.people, person)
        for entry_id, fields in entries:
            reply = self._answer(person, fields)
            request_id = requests.request_id_of(fields)
            pipe = client.pipeline(transaction=True)
            if request_id is not None and reply is not None:
                pipe.rpush(keys.reply(person, request_id), reply)
                pipe.pexpire(keys.reply(person, request_id), REPLY_TTL_MS)
            pipe.xdel(stream, entry_id)
            pipe.execute()
        return len(entries)

    def _answer(self, person: str, fields: Mapping[bytes, bytes]) -> bytes | None:
        """The reply to one entry (None: already answered before)."""
        request_id = requests.request_id_of(fields)
        if request_id is not None and self.store.client.exists(
                self.store.keys.reply(person, request_id)):
            return None
        try:
            request = requests.parse(fields)
        except ValueError as exc:
            log.info("request of %s refused: %s", person, exc)
            return requests.encode_reply(False, f"request refused: {exc}")
        try:
            return self._carry_out(person, request)
        except (FetchworkError, redis.ResponseError) as exc:
            log.info("request %s (%s) of %s failed: %s", request.request_id, request.kind,
                     person, exc)
            return requests.encode_reply(False, f"{request.kind} refused: {exc}")

    def _carry_out(self, person: str, request: requests.Request) -> bytes:
        if request.kind == "cluster":
            cluster = self.queueing.next_cluster()
            self.store.client.hset(self.store.keys.clusters, str(cluster), given_to(person))
            return requests.encode_reply(True, cluster=cluster)
        if request.kind == "submit":
            # The inputs the person staged, checked and moved into the pool first.
            ads, inputs = personfiles.admit_inputs(self.store, person, request.ads)
            try:
                if request.cluster is not None:
                    why = self._take_cluster(person, request.cluster)
                    if why is not None:
                        inputs.rollback()
                        return requests.encode_reply(False, f"submit refused: {why}")
                submitted = self.queueing.submit_cluster(ads, person, request.cluster)
            except BaseException:
                inputs.rollback()
                raise
            log.info("queued %d job(s) for %s", len(submitted.job_ids), person)
            return requests.encode_reply(True, jobs=submitted.job_ids,
                                         validating=submitted.validating)
        owners = self._owners(request.jobs)
        why = requests.refusal(person, owners, self.super_users, request.jobs)
        if why is not None:
            log.info("%s of %s refused: %s", request.kind, person, why)
            return requests.encode_reply(False, f"{request.kind} refused: {why}")
        if request.kind == "edit":
            return self._edit(person, request)
        if request.kind in personfiles.OUTPUT_KINDS:
            done = personfiles.carry_out(self.store, person, request.kind, request.jobs)
            return requests.encode_reply(True, jobs=done)
        done = self._act(person, request)
        log.info("%s by %s: %s", request.kind, person, " ".join(done) or "nothing to change")
        return requests.encode_reply(True, jobs=done)

    def _take_cluster(self, person: str, cluster: int) -> str | None:
        """Why `person` may not fill `cluster`, or None (the cluster is then free for the
        submission to claim)."""
        keys, client = self.store.keys, self.store.client
        holder = client.hget(keys.clusters, str(cluster))
        if holder is None or codec.text(holder) != given_to(person):
            return f"cluster {cluster} was not given to {person}: ask for a cluster first"
        client.hdel(keys.clusters, str(cluster))
        return None

    def _owners(self, jobs: Sequence[str]) -> dict[str, str | None]:
        values = self.store.fields(list(jobs), ["Owner"])
        return {job: (owner[0] if isinstance(owner[0], str) else None)
                for job, owner in zip(jobs, values, strict=True)}

    def _act(self, person: str, request: requests.Request) -> list[str]:
        store, jobs = self.store, list(request.jobs)
        if request.kind == "remove":
            return calls.remove(store, job_ids=jobs,
                                reason=request.reason or f"removed by {person}")
        if request.kind == "hold":
            return calls.hold(store, job_ids=jobs, reason=request.reason or f"held by {person}",
                              code=int(HoldCode.USER_REQUEST), hold_until_s=request.hold_until)
        if request.kind == "release":
            return calls.release(store, job_ids=jobs)
        return calls.requeue(store, job_ids=jobs)

    def _edit(self, person: str, request: requests.Request) -> bytes:
        """condor_qedit through the leader's own client (the same refusals), then the
        edited jobs signed again when the attribute is one the signature covers."""
        done = self.queueing.edit(list(request.jobs), request.attr, request.value)
        if self.sign is not None and request.attr.lower() in _SIGNED:
            client, keys = self.store.client, self.store.keys
            for job, data in self.store.hashes(done):
                calls.qedit(self.store, job_ids=[job], attr=SIGNATURE_ATTR,
                            value=codec.pack(self.sign(data)), priority_group=None,
                            significant=False, periodic=False)
                # A job still waiting for admission: its staged digest follows the edit
                # the leader made (filters/signing.py).
                cluster, _, proc = job.partition(".")
                if client.hexists(keys.staged(cluster), proc):
                    client.hset(keys.staged(cluster), proc, staged_digest(data))
        log.info("edit by %s of %s: %s", person, " ".join(done) or "no job", request.attr)
        return requests.encode_reply(True, jobs=done)
