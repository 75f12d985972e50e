"""The broker's client API, over a pool's store (store/__init__.py).

Every state change is one Lua script (see `store/states.py` for the transitions);
job ads are read in bulk through read_ads.lua. Ads come back as classad2
ClassAds with HTCondor attribute names plus `FetchworkState`. The Redis
client must return bytes (redis-py's default); one Broker may be shared by
threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import classad2
import redis

from fetchwork.broker.autoclusters import SIGNIFICANT_ATTRS
from fetchwork.broker.claim.claimer import Claimer
from fetchwork.broker.connections.durability import ReplicaWait
from fetchwork.broker.jobpolicy.expressions import PERIODIC_ATTRS, Action
from fetchwork.broker.jobpolicy.onexit import POLICY, POLICY_ATTRS, finished, judge_exit
from fetchwork.broker.scheduling.settings import scheduling_in_force
from fetchwork.broker.store import calls, codec, editable, poolrules
from fetchwork.broker.store.jobads import caller_attrs
from fetchwork.broker.trust.people import person_of
from fetchwork.config.ads import as_bool, evaluate, from_dict, parse_expr, to_dict, unparse
from fetchwork.config.loader import Config, get_config
from fetchwork.config.protocol import EXIT, EXIT_HOWS, HOLD, HoldCode, job_id_key, parse_job_id
from fetchwork.errors import AdError, BrokerError, EditError

from .store import READ_BATCH, Store

if TYPE_CHECKING:
    # Imported where first used: a connection that only claims and finishes jobs (an
    # execute machine's in-process hooks) loads neither the submission path nor the
    # people's request path, nor the signing library both bring (some 8 MB).
    from fetchwork.broker.submission.submitter import Submitted, Submitter
    from fetchwork.broker.trust.client import PersonClient

log = logging.getLogger(__name__)

AdLike: TypeAlias = classad2.ClassAd | Mapping[str, Any]
OP_BATCH = 500
# Attributes a match reads of every job: an edit of one takes a job out of its autocluster.
_SIGNIFICANT = frozenset(name.lower() for name in SIGNIFICANT_ATTRS)
# Periodic policy expressions: an edit of one puts a job in the periodic pass's index.
_PERIODIC = frozenset(name.lower() for name in PERIODIC_ATTRS)
# The user actions Broker.apply runs, each one Lua script of that name.
ACTIONS = ("remove", "hold", "release", "requeue")


class Broker:
    """One pool of one Redis: submit, query, claim, renew, finish, reap."""

    def __init__(self, client: redis.Redis, pool: str = "default", config: Config | None = None):
        config = config if config is not None else get_config()
        # This process's configuration: the pool's own where this is its broker service.
        self.config = config
        self.store = Store(client, pool, config.get_int("BROKER_EVENTS_MAXLEN"))
        self.client = client
        self.pool = pool
        self.keys = self.store.keys
        self.default_lease_s = config.get_duration_s("JOB_DEFAULT_LEASE_DURATION")
        # Scheduling policy (broker/scheduling): None while every scheduling knob is 0.
        self.scheduling = scheduling_in_force(config)
        self._claimer = Claimer.from_config(
            self.store, self.default_lease_s, config,
            soft_tier=self.scheduling is not None and self.scheduling.limits_on())
        self._person: PersonClient | bool | None = None  # person(): None until asked
        # The pool's rules are its leader's (store/poolrules.py): these two knobs only
        # stand in while it has published none.
        self._submitter_made: Submitter | None = None

    @property
    def _submitter(self) -> Submitter:
        """The submission path, made at the first submission."""
        if self._submitter_made is None:
            from fetchwork.broker.submission.submitter import Submitter

            self._submitter_made = Submitter(self.store, self.default_lease_s,
                                             self.config.get_bool("DEFAULT_JOB_EXCLUSIVE"),
                                             ReplicaWait.from_config(self.config))
        return self._submitter_made

    @classmethod
    def from_config(cls, config: Config | None = None, start: bool = True) -> Broker:
        """A broker on the configured Redis (the embedded one, started if needed)."""
        from fetchwork.broker.connections.clients import connect

        config = config if config is not None else get_config()
        pool = config.require("FETCHWORK_POOL").strip()
        return cls(connect(config, start=start, pool=pool), pool, config)

    # -- reading helpers -----------------------------------------------------

    def _ads(self, job_ids: Sequence[str]) -> Iterator[classad2.ClassAd]:
        for job, data in self.store.hashes(job_ids):
            try:
                yield from_dict(data)
            except AdError as exc:
                log.warning("job %s has an unreadable ad: %s", job, exc)

    # -- submitting ----------------------------------------------------------

    def next_cluster(self) -> int:
        """Allocate a cluster number (a person's comes from the leader)."""
        person = self.person()
        if person is not None:
            return person.next_cluster()
        return self._submitter.next_cluster()

    def submit(self, ads: Sequence[AdLike], owner: str | None = None,
               cluster_id: int | None = None) -> list[str]:
        """Queue `ads` as one cluster (ProcId 0..n-1), all or nothing; returns the job ids.
        `cluster_id` must come from next_cluster() and be used by one submission only."""
        return self.submit_cluster(ads, owner, cluster_id).job_ids

    def submit_cluster(self, ads: Sequence[AdLike], owner: str | None = None,
                       cluster_id: int | None = None) -> Submitted:
        """As submit(), and whether the jobs wait VALIDATING for the leader's
        submission filters (then `verdicts()` tells how they ended). A person's
        connection sends the ads to the leader, which gives them to that person
        (`owner` and the ads' Owner do not count)."""
        person = self.person()
        if person is not None:
            jobs, validating = person.submit([_as_dict(ad) for ad in ads], cluster_id)
            from fetchwork.broker.submission.submitter import Submitted

            return Submitted(jobs, validating)
        return self._submitter.submit(ads, owner, cluster_id)

    def pool_rules(self) -> poolrules.Published | None:
        """The rules the pool's leader published (what every submission is checked
        against), or None while it has published none: then new jobs wait for it."""
        return poolrules.read(self.store)

    def person(self) -> PersonClient | None:
        """The request path when this connection is a person's (`ACL WHOAMI` says
        fw-<pool>-u-<name>, broker/trust/people.py); None for a role or no ACL."""
        from fetchwork.broker.trust.client import PersonClient

        if self._person is None:
            name = person_of(self.client, self.pool)
            self._person = PersonClient(self.client, self.pool, name) if name else False
        return self._person if isinstance(self._person, PersonClient) else None

    def verdicts(self, job_ids: Sequence[str]) -> dict[str, str | None]:
        """For each job no longer VALIDATING: None when it was admitted, else the
        RemoveReason it failed with. Jobs still waiting are left out (a job that is
        gone altogether counts as decided)."""
        decided: dict[str, str | None] = dict.fromkeys(job_ids)
        for job, data in self.store.hashes(job_ids):
            state = data.get("FetchworkState")
            if state == "VALIDATING":
                del decided[job]
                continue
            reason = data.get("RemoveReason")
            decided[job] = reason if state == "FAILED" and isinstance(reason, str) else None
        return decided

    # -- reading ---------------------------------------------------------------

    def get(self, job_id: str) -> classad2.ClassAd | None:
        """The ad of a job in the queue or in history; None when unknown."""
        parse_job_id(job_id)
        for ad in self._ads([job_id]):
            return ad
        return None

    def job_data(self, job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The stored attributes (to_dict form) of the existing jobs among `job_ids`, in
        order, without building ClassAds: the cheap read for big tables."""
        return [data for _job, data in self.store.hashes(list(job_ids))]

    def job_fields(self, job_ids: Sequence[str], names: Sequence[str]) -> list[dict[str, Any]]:
        """Attributes `names` (None where absent) of the existing jobs among `job_ids`, in
        order: the cheapest read for big tables. `names` should include ClusterId."""
        wanted = list(dict.fromkeys(["ClusterId", *names]))
        return [dict(zip(wanted, values, strict=True))
                for values in self.store.fields(list(job_ids), wanted) if values[0] is not None]

    def cluster_job_ids(self, cluster: int, finished: bool = False) -> list[str]:
        """Ids of the queued (or, with `finished`, the finished) jobs of one cluster."""
        key = self.keys.history if finished else self.keys.queue
        found = self.store.ids(member for member, _score in
                               self.client.zscan_iter(key, match=f"{int(cluster)}.*", count=1000))
        return sorted(found, key=job_id_key)

    def history_ids(self, limit: int | None = None) -> list[str]:
        """Ids of finished jobs, newest first (at most `limit`)."""
        if limit is not None and limit <= 0:
            return []
        return self.store.members(self.keys.history, 0, -1 if limit is None else limit - 1,
                                  rev=True)

    def queued_ids(self) -> list[str]:
        """Ids of every unfinished job, in submission order."""
        return self.store.members(self.keys.queue)

    def query(self, constraint: str | None = None) -> list[classad2.ClassAd]:
        """Ads of the jobs in the queue (not finished) for which `constraint` is true."""
        test = _constraint(constraint)
        return [ad for ad in self._ads(self.queued_ids()) if test(ad)]

    def history(self, constraint: str | None = None,
                limit: int | None = None) -> list[classad2.ClassAd]:
        """Finished jobs (COMPLETED, REMOVED, FAILED), newest first."""
        test = _constraint(constraint)
        found: list[classad2.ClassAd] = []
        start = 0
        while limit is None or len(found) < limit:
            chunk = self.store.ids(self.client.zrevrange(self.keys.history, start,
                                                    start + READ_BATCH - 1))
            found += [ad for ad in self._ads(chunk) if test(ad)]
            if len(chunk) < READ_BATCH:
                break
            start += READ_BATCH
        return found if limit is None else found[:limit]

    def select(self, ids: Sequence[str] = (), constraint: str | None = None,
               all_jobs: bool = False) -> list[str]:
        """Unfinished jobs named by `ids` ("12.3" a job, "12" a cluster), or all of
        them with `all_jobs`, narrowed by `constraint`."""
        queued = self.queued_ids()
        if all_jobs:
            chosen = queued
        else:
            wanted = [parse_job_id(text) for text in ids]
            jobs = {(c, p) for c, p in wanted if p is not None}
            clusters = {c for c, p in wanted if p is None}
            chosen = [job for job in queued
                      if job_id_key(job) in jobs or job_id_key(job)[0] in clusters]
        if constraint is not None:
            test = _constraint(constraint)
            chosen = [job for job, data in self.store.hashes(chosen) if test(from_dict(data))]
        return sorted(chosen, key=job_id_key)

    def events(self, last_id: str = "$", block_ms: int = 0,
               count: int = 100) -> list[tuple[str, dict[str, str]]]:
        """Transition events after `last_id` (`$`: only new ones, so use it with block_ms).
        Each event has type, job, state (FetchworkState) and status (JobStatus)."""
        return self.store.events(last_id, block_ms, count)

    def last_event_id(self) -> str:
        """Id of the newest event ("0-0" when there is none)."""
        return self.store.last_event_id()

    # -- user actions ------------------------------------------------------------

    def apply(self, action: str, selected: Sequence[str], reason: str | None = None,
              hold_until: int | None = None) -> list[str]:
        """Remove, hold, release or requeue the jobs `select()` chose; the ones it changed.
        A hold with `hold_until` (epoch s) ends by itself then."""
        if action not in ACTIONS:
            raise BrokerError(f"no user action {action!r}: use one of {', '.join(ACTIONS)}")
        done: list[str] = []
        for start in range(0, len(selected), OP_BATCH):
            chunk = selected[start:start + OP_BATCH]
            done += self._apply_one(action, chunk, reason, hold_until)
        return done

    def _apply_one(self, action: str, job_ids: Sequence[str], reason: str | None,
                   hold_until: int | None) -> list[str]:
        """One batch of a user action: its script's ids changed."""
        person = self.person()
        if person is not None:  # the leader carries it out, if these are that person's
            return person.act(action, job_ids, reason, hold_until)
        store = self.store
        if action == "remove":
            return calls.remove(store, job_ids=job_ids, reason=reason or "removed by user")
        if action == "hold":
            return calls.hold(store, job_ids=job_ids, reason=reason or "held by user",
                              code=int(HoldCode.USER_REQUEST), hold_until_s=hold_until)
        if action == "release":
            return calls.release(store, job_ids=job_ids)
        return calls.requeue(store, job_ids=job_ids)

    def remove(self, job_ids: Sequence[str], reason: str | None = None) -> list[str]:
        """Remove jobs (ids or clusters); a running job is marked and removed when it stops."""
        return self.apply("remove", self.select(job_ids) if job_ids else [], reason)

    def hold(self, job_ids: Sequence[str], reason: str | None = None,
             hold_until: int | None = None) -> list[str]:
        """Hold idle jobs; a running job is marked and held when it stops. With
        `hold_until` (epoch s) the leader releases them by itself then."""
        return self.apply("hold", self.select(job_ids) if job_ids else [], reason, hold_until)

    def release(self, job_ids: Sequence[str]) -> list[str]:
        """Held jobs go back to IDLE; a pending hold on a running job is cancelled."""
        return self.apply("release", self.select(job_ids) if job_ids else [])

    def requeue(self, job_ids: Sequence[str]) -> list[str]:
        """Running jobs are stopped and go back to IDLE at the head of their priority
        group (whatever Rerunnable says); the ones marked. Other jobs stay as they are."""
        return self.apply("requeue", self.select(job_ids) if job_ids else [])

    def edit(self, job_ids: Sequence[str], attr: str,
             value: str | classad2.ExprTree) -> list[str]:
        """condor_qedit: set `attr` of the unfinished jobs among `job_ids` (ids `select()`
        chose) to `value`, ClassAd expression text or an ExprTree; the ids edited.
        Attributes a user may not change are refused (store/editable.py)."""
        why = editable.refusal(attr)
        if why is not None:
            raise EditError(why)
        person = self.person()
        if person is not None:  # the leader edits, if these are that person's jobs
            text = value if isinstance(value, str) else unparse(value)
            return person.edit(job_ids, attr, text) if job_ids else []
        try:
            stored = editable.stored_value(attr, value)
        except AdError as exc:
            raise EditError(str(exc)) from exc
        packed, group = codec.pack(stored), editable.priority_group(attr, stored)
        done: list[str] = []
        for start in range(0, len(job_ids), OP_BATCH):
            try:
                done += calls.qedit(self.store, job_ids=job_ids[start:start + OP_BATCH],
                                    attr=attr, value=packed, priority_group=group,
                                    significant=attr.lower() in _SIGNIFICANT,
                                    periodic=attr.lower() in _PERIODIC)
            except redis.ResponseError as exc:  # the pool's rules refused the value
                raise EditError(str(exc)) from exc
        return done

    # -- the execute side --------------------------------------------------------

    def claim(self, slot_ad: AdLike, wait_s: float = 0.0) -> classad2.ClassAd | None:
        """Claim the best idle job for `slot_ad` (see claim/claimer.py); None when there is none
        within `wait_s` seconds."""
        return self._claimer.claim(slot_ad, wait_s)

    def claim_attrs(self, slot_ad: AdLike, wait_s: float = 0.0) -> dict[str, Any] | None:
        """`claim`, the job given as its stored values rather than a ClassAd."""
        return self._claimer.claim_attrs(slot_ad, wait_s)

    def reject(self, job_id: str, token: str) -> bool:
        """The slot declined the job: back to IDLE at the head of its priority group."""
        return calls.reject(self.store, job_id=job_id, token=token) is not None

    def renew(self, job_id: str, token: str, attrs: AdLike | None = None,
              suspended: bool | None = None) -> str:
        """Extend the lease and store `attrs`: "ok", "gone", "removed" or "held".
        `suspended` True/False moves the job to SUSPENDED/RUNNING."""
        return calls.renew(self.store, job_id=job_id, token=token,
                           default_lease_s=self.default_lease_s, suspended=suspended,
                           fields=self._attr_fields(attrs))

    def finish(self, job_id: str, token: str, how: str, attrs: AdLike | None = None,
               reason: str | None = None) -> bool:
        """End the claim: exit -> COMPLETED, evict -> IDLE (FAILED if not Rerunnable),
        hold -> HELD, remove -> REMOVED. False when the claim is not (any longer) ours."""
        if how not in EXIT_HOWS:
            raise BrokerError(f"finish: how must be one of {', '.join(EXIT_HOWS)}, not {how!r}")
        given = self._attrs_given(attrs)
        fields = codec.fields_of(given) if attrs is not None else []
        if reason is None and attrs is not None:
            reason = _reason_in(attrs, "HoldReason" if how == HOLD else "RemoveReason")
        if how == EXIT:
            # One call, unless the job has an exit policy: finish.lua then refuses
            # and the job policy judges the exit.
            state = calls.finish(self.store, job_id=job_id, token=token, how=how,
                                 reason=reason or "", fields=fields, policy_attrs=POLICY_ATTRS)
            if state != POLICY:
                return finished(job_id, how, state)
            verdict = judge_exit(self.store, job_id, given)
            if verdict is not None:
                return self._finish_by_policy(job_id, token, verdict, fields)
        held = how == HOLD and attrs is not None
        state = calls.finish(self.store, job_id=job_id, token=token, how=how,
                             reason=reason or "",
                             hold_code=_code_in(attrs, "HoldReasonCode") if held else None,
                             hold_subcode=_code_in(attrs, "HoldReasonSubCode") if held else None,
                             fields=fields)
        return finished(job_id, how, state)

    def _finish_by_policy(self, job_id: str, token: str, verdict: Action,
                          fields: list[bytes | str]) -> bool:
        """An exit the job's policy expressions turn into a hold, a rerun or a removal."""
        state = calls.policy_exit(self.store, job_id=job_id, token=token, verdict=verdict.kind,
                                  reason=verdict.reason, hold_subcode=verdict.subcode,
                                  fields=fields)
        if state is None:
            return False
        log.info("job %s exited; its %s -> %s", job_id, verdict.attr, state)
        return True

    @staticmethod
    def _attrs_given(attrs: AdLike | None) -> dict[str, Any]:
        return {} if attrs is None else caller_attrs(codec.AdNormalizer().normalize(attrs))

    @classmethod
    def _attr_fields(cls, attrs: AdLike | None) -> list[bytes | str]:
        if attrs is None:
            return []
        return codec.fields_of(cls._attrs_given(attrs))

    def reap_expired(self, now: float | None = None) -> list[str]:
        """Claimed jobs whose lease lapsed go back to IDLE (FAILED when not Rerunnable)."""
        if now is None:
            seconds, micros = self.client.time()
            now_ms, override = seconds * 1000 + micros // 1000, None
        else:
            now_ms = override = int(now * 1000)
        reaped: list[str] = []
        while True:
            due = self.store.ids(self.client.zrangebyscore(self.keys.running, "-inf", now_ms,
                                                      start=0, num=OP_BATCH))
            if not due:
                break
            done = calls.reap(self.store, job_ids=due, now_ms=override)
            reaped += done
            if not done or len(due) < OP_BATCH:
                break
        if reaped:
            log.info("lease expired for %d job(s): %s", len(reaped), " ".join(reaped[:20]))
        return reaped

    def trim_history(self, keep: int) -> int:
        """Forget the oldest finished jobs beyond the newest `keep`; how many went."""
        forgotten = 0
        while True:
            excess = self.client.zcard(self.keys.history) - max(0, keep)
            if excess <= 0:
                return forgotten
            oldest = self.store.ids(self.client.zrange(self.keys.history, 0,
                                                  min(excess, OP_BATCH) - 1))
            if not oldest:
                return forgotten
            gone = calls.trim_history(self.store, job_ids=oldest)
            forgotten += gone
            if gone == 0:
                return forgotten

    # -- slots -------------------------------------------------------------------

    def publish_slot(self, slot_ad: AdLike, ttl_s: float) -> None:
        """Publish a slot ad for `fetchwork status`; it disappears after `ttl_s`."""
        data = codec.AdNormalizer().normalize(slot_ad)
        name = data.get("Name")
        if not isinstance(name, str) or not name:
            raise BrokerError("a published slot ad needs a Name")
        now_ms = int(time.time() * 1000)
        ttl_ms = max(1, int(ttl_s * 1000))
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self.keys.slot(name), codec.pack(data), px=ttl_ms)
        pipe.zadd(self.keys.slots, {name: now_ms + ttl_ms})
        pipe.zremrangebyscore(self.keys.slots, "-inf", now_ms)
        pipe.execute()

    def withdraw_slot(self, name: str) -> None:
        """Take a published slot ad away at once (its startd has exited, or a dynamic slot
        ended with its claim)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.keys.slot(name))
        pipe.zrem(self.keys.slots, name)
        pipe.execute()

    def slots(self) -> list[classad2.ClassAd]:
        """Slot ads published and not expired, by name."""
        now_ms = int(time.time() * 1000)
        names = self.store.ids(self.client.zrangebyscore(self.keys.slots, now_ms, "+inf"))
        if not names:
            return []
        raws = self.client.mget([self.keys.slot(name) for name in sorted(names)])
        return [from_dict(codec.unpack(raw)) for raw in raws if raw is not None]


def _as_dict(ad: AdLike) -> dict[str, Any]:
    """A job ad as the msgpack-friendly map a person's request carries."""
    return to_dict(ad) if isinstance(ad, classad2.ClassAd) else dict(ad)


def _given(attrs: AdLike, name: str) -> Any:
    """An attribute the execute side put in its attributes, though the broker owns it."""
    return attrs.get(name) if isinstance(attrs, classad2.ClassAd) else next(
        (v for k, v in attrs.items() if k.lower() == name.lower()), None)


def _reason_in(attrs: AdLike, name: str) -> str | None:
    """The execute side's HoldReason/RemoveReason, if it gave one."""
    value = _given(attrs, name)
    return value if isinstance(value, str) and value else None


def _code_in(attrs: AdLike | None, name: str) -> int | None:
    """The execute side's HoldReasonCode/HoldReasonSubCode, if it gave a whole number."""
    value = None if attrs is None else _given(attrs, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _constraint(text: str | None) -> Any:
    """A predicate over ads for a ClassAd constraint (None accepts everything)."""
    if text is None or not text.strip():
        return lambda ad: True
    expr = parse_expr(text, source="constraint")
    return lambda ad: as_bool(evaluate(expr, ad))

