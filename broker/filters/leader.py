"""The leader's filter work: admissions, activations, timed holds, stale activations.

Level-triggered: each pass reads the pool's VALIDATING and ACTIVATING sets
and the due part of the holds set, hands every job not already in hand to a
small thread pool, and returns. As one of the leader's duties
(leader/duty.py), a pass runs on taking the lead, after every batch of
events and at least every `POLL_S`, so a new leader picks up whatever its
predecessor left: a job's chain runs again, and an activation whose claim
gave up returns to IDLE. With no filter and no template configured, no
job waits for a verdict (submissions and claims do not ask for one), so
events do not wake the filters: a pass every `POLL_S` releases the timed
holds and puts back what a former configuration left.
Each verdict is one Lua script (admit, admit_fail, activate_start,
activate_defer, activate_hold, activate_fail); reverts run after it, off the
claim's wait.

Admission (`admit_waiting`, the one step that moves a waiting job into the
queue) is also where the pool fails closed: a job submitted before the
leader published the pool's rules (store/poolrules.py) waits VALIDATING like
a filtered one, and is checked here against the pool's rules (MAX_WALLTIME,
SUBMIT_MAX_JOB_ATTRS; with scheduling limits it is admitted BLOCKED for the
policy's pass; DEFAULT_JOB_EXCLUSIVE), whatever the submitter's configuration
said, before its filters run.

A pool that signs its jobs (broker/trust/signer.py) makes every submission
wait here, and each admitted job gets its FetchworkSignature, after the
checks of filters/signing.py (its staged digest). With no submission filter
or template (and no DEFAULT_JOB_EXCLUSIVE to add), signing is the whole
admission: jobs are checked against the pool's rules, signed a batch at a
time (one signature per batch) and admitted in batches (admit_signed.lua,
which also applies the scheduling limits) on the pass's own thread. Such a
pass reads its first batch's ads with its own first read (read_waiting.lua,
in place of the ids alone), so a job that waits alone is admitted in the
pass's second round trip. A batch's signature and hash tree are stored once
(lua/sigbatch.lua), and each pass frees the stored batches whose jobs have
all left the queue (sig_sweep.lua).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from redis.exceptions import NoScriptError

from fetchwork.broker.autoclusters import Grouper, rep_entry, significant_names
from fetchwork.broker.store import Store, batchads, calls, codec, poolrules
from fetchwork.broker.store.acmembers import AUTOCLUSTER_ATTR
from fetchwork.broker.store.jobads import ad_prio
from fetchwork.broker.store.states import State, clamp_prio, is_managed
from fetchwork.config.ads import from_dict
from fetchwork.config.protocol import HoldCode
from fetchwork.config.signedjob import (
    SIGNATURE_ATTR,
    SharedTexts,
    SignedBatch,
    leaf_digest,
    signed_text_of,
)
from fetchwork.errors import AdError

from .admission import activate, admit
from .chain import Call, revert
from .codes import Activation, backfill_action
from .gate import Summary, summary_of
from .runner import Facts, FilterRun, FilterSpec, run_filter
from .settings import FilterSettings
from .signing import (
    BatchSigner,
    forget_staged,
    names_of,
    queue_staged,
    read_staged,
    refusal,
    rules_refusal,
    staged_of,
)

log = logging.getLogger(__name__)

# Seconds between passes when no event brings one.
POLL_S = 0.5
# Stored signed batches a pass looks at to free those whose jobs have all left the queue,
# at most once every SWEEP_INTERVAL_S (passes come back to back while jobs are admitted).
SWEEP_BATCHES = 32
SWEEP_INTERVAL_S = 0.5
# What the last filter call of a chain leaves for the verdict to reach the claim.
VERDICT_MARGIN_S = 0.3
# A claim's reply list outlives the claim's wait by far.
REPLY_TTL_MS = 60_000
# An activation past its deadline is the claim's to give back; the leader puts
# the job back itself only this long after (the claim died too).
EXPIRE_GRACE_MS = 2000
# Jobs read, signed and admitted at a time. 474 is the most whose signed batch string
# (config/signedjob.py: 160 bytes of header, 32 a node of the 16-wide tree: 474 leaves,
# 30 nodes, 2 nodes) with Redis's string header fits the allocator's 16 KiB class;
# 500 would take the 20 KiB one, 6 bytes more a job.
BATCH = 474
WORKERS = 8
# Jobs named by the events since the last pass that a signing pass admits before
# it reads the waiting set (more: it reads the set alone, in batches).
ARRIVED_MAX = 64
# Jobs one pass signs and admits when signing is all their admission (then it runs on
# the pass's thread, BATCH at a time): the pass ends, and another follows at once.
SIGNED_PER_PASS = 20_000


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]
                   ) -> tuple[list[str], dict[str, Any]]:
    """(names to delete, attributes to store) taking a stored ad to an admitted one;
    attributes the broker manages are left alone."""
    new_lower = {name.lower() for name in new}
    deleted = [name for name in old if not is_managed(name) and name.lower() not in new_lower]
    stored = {name: value for name, value in new.items()
              if not is_managed(name) and old.get(name, _MISSING) != value}
    return deleted, stored


_MISSING = object()
# The states of a job that waits for admission (lua/jobstates.lua awaits_admission).
_WAITING = frozenset(state.value for state in (State.VALIDATING, State.IDLE, State.BLOCKED,
                                               State.HELD))


class FilterLeader:
    """Runs the filters of one pool while this replica leads."""

    name = "filters"

    def __init__(self, store: Store, settings: FilterSettings, default_lease_s: float,
                 call: Call | None = None, workers: int = WORKERS,
                 rules: poolrules.PoolRules | None = None,
                 signer: BatchSigner | None = None):
        self.store = store
        self.settings = settings
        # The pool's job signer (broker/trust/signer.py): every new job waits for
        # admission, and each one admitted gets its SIGNATURE_ATTR.
        self.signer = signer
        # The pool's rules, checked at admission (None: the filters' verdict only).
        self.rules = rules
        self.default_lease_s = default_lease_s
        # What the broker gives a job that does not say (jobads.prepare_submitted):
        # a template's default replaces these.
        self.broker_defaults = {"JobPrio": 0, "JobLeaseDuration": int(default_lease_s),
                                "Rerunnable": True}
        self.call: Call = call or run_filter_call
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="filters")
        # Signed admission reads the next batch here while it signs and admits one.
        self._ahead = ThreadPoolExecutor(1, thread_name_prefix="admission-read")
        self._in_hand: set[str] = set()
        self._lock = threading.Lock()
        # Whether a job's start would be a backfill start (the leader's backfill pass
        # says; broker/backfill/leader.py): its chain sees FETCHWORK_BACKFILL=1.
        self.is_backfill_start: Callable[[str, float | None], bool] = lambda job, order: False
        # Events are worth a pass only when submissions or claims may ask for a verdict.
        summary = self.summary()
        self.reads_events = summary.submit or summary.activate or bool(summary.templates)
        # Only signing makes jobs wait (no filter, no template): a pass is worth it for
        # the events of new waiting jobs alone, not for every claim and exit.
        configured = summary_of(settings)
        self._every_event = (signer is None or configured.submit or configured.activate
                             or bool(configured.templates))
        # Then only a change of the validating set matters, which the leader may watch
        # instead of reading every transition (leader/watch.py).
        self.watch_keys: tuple[str, ...] = (
            (store.keys.validating,) if self.reads_events and not self._every_event else ())
        self._pass_due = True
        self._passed_at: float | None = None  # monotonic time of the last pass
        self._swept_at = 0.0  # when the stored signed batches were last swept
        self._signing_left = False
        # The jobs whose VALIDATING events came since the last pass (at most a batch):
        # a pass that only signs admits them before it reads the waiting set.
        self._arrived: list[str] = []

    # -- as a duty of the leader (leader/duty.py) ---------------------------------

    def on_lead(self, since: str) -> None:
        self._pass_due = True

    def on_lose(self) -> None:
        self._arrived = []  # another replica admits them

    def on_events(self, events: Sequence[tuple[str, dict[str, str]]]) -> None:
        arrived = [fields.get("job", "") for _id, fields in events
                   if fields.get("state") == State.VALIDATING.value]
        if self._every_event or arrived:
            self._pass_due = True
        if len(self._arrived) + len(arrived) <= ARRIVED_MAX:
            self._arrived.extend(job for job in arrived if job)
        else:  # a burst: the pass reads the waiting set in batches
            self._arrived = []

    def due_in_s(self, now_s: float) -> float:
        if self._pass_due or self._passed_at is None:
            return 0.0
        return max(0.0, self._passed_at + POLL_S - now_s)

    def run_due(self, now_s: float) -> None:
        arrived, self._arrived = list(dict.fromkeys(self._arrived)), []
        if arrived and self._signing_only():
            # The jobs the events named are admitted first, one round trip sooner
            # than after the pass's read; admit_signed.lua leaves alone any that no
            # longer waits, and the pass then finds whatever else waits.
            self._admit_signed(arrived)
        self.run_pass()
        # Jobs left to sign bring the next pass at once.
        self._pass_due, self._passed_at = self._signing_left, now_s

    # -- passes ---------------------------------------------------------------

    def summary(self) -> Summary:
        """What claims and submissions must know of this configuration (the leader
        publishes it with the pool's rules: leader/publish.py). With a signer, every
        submission waits for admission."""
        summary = summary_of(self.settings)
        return replace(summary, submit=True) if self.signer is not None else summary

    def run_pass(self, now_s: float | None = None) -> list[Future[None]]:
        """Hand out what waits for a verdict; release due holds. Returns the new work."""
        now_s = time.time() if now_s is None else now_s
        keys, client = self.store.keys, self.store.client
        sweep = self.signer is not None and abs(now_s - self._swept_at) >= SWEEP_INTERVAL_S
        if sweep:
            self._swept_at = now_s
        signing = self._signing_only()

        def read() -> list[Any]:
            pipe = client.pipeline(transaction=False)
            if signing:
                # The head's first batch with its ads and staged digests, which signing
                # would read next (lua/read_waiting.lua): one round trip less.
                calls.read_waiting(self.store, pipe, count=BATCH)
            else:
                pipe.zrange(keys.validating, 0, BATCH - 1)
            pipe.zrange(keys.activating, 0, BATCH - 1, withscores=True)
            pipe.zrangebyscore(keys.holds, "-inf", int(now_s), start=0, num=BATCH)
            pipe.hvals(keys.reservations)
            if sweep:
                # Signed batches whose jobs have all left the queue (lua/sig_sweep.lua).
                calls.sig_sweep(self.store, pipe, batches=SWEEP_BATCHES)
            return list(pipe.execute())

        validating, activating, due, reserved = self._once_more(read)[:4]
        if signing:
            self._signing_left = self._admit_signed(*_head_read(validating))
            validating = []
        work = [self._hand_out(job, self.admit_waiting) for job in Store.ids(validating)]
        expired = []
        for member, deadline_ms in activating:
            job = codec.text(member)
            if deadline_ms + EXPIRE_GRACE_MS <= now_s * 1000:
                expired.append(job)
            else:
                work.append(self._hand_out(job, self._activate))
        if expired:
            back = calls.activation_expire(self.store, job_ids=expired,
                                           grace_ms=EXPIRE_GRACE_MS)
            if back:
                log.info("activation outlived its claim for %s: back to IDLE", " ".join(back))
        if due:
            ids = Store.ids(due)
            released = calls.release_due(self.store, job_ids=ids)
            if released:
                log.info("hold time passed: released %s", " ".join(released))
        if reserved:
            self._expire_reservations(sorted(set(Store.ids(reserved))))
        return [future for future in work if future is not None]

    def _expire_reservations(self, jobs: list[str]) -> None:
        grace_ms = int(self.settings.reservation_timeout_s * 1000)
        lapsed = calls.reservation_expire(self.store, job_ids=jobs, grace_ms=grace_ms)
        if lapsed:
            log.info("reserved slot did not come back for %s: reservation dropped",
                     " ".join(lapsed))

    def _hand_out(self, job: str, step: Callable[[str], None]) -> Future[None] | None:
        with self._lock:
            if job in self._in_hand:
                return None
            self._in_hand.add(job)

        def body() -> None:
            try:
                step(job)
            except Exception:
                log.exception("filters for job %s failed; it is tried again", job)
            finally:
                with self._lock:
                    self._in_hand.discard(job)

        return self._pool.submit(body)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._ahead.shutdown(wait=False, cancel_futures=True)

    # -- admission --------------------------------------------------------------

    def _read(self, job: str) -> dict[str, Any] | None:
        return next((data for _job, data in self.store.hashes([job])), None)

    def admit_waiting(self, job: str) -> None:
        """Admit one job that waits for the leader (VALIDATING): the pool's rules, then
        its submission chains and template; admit.lua or admit_fail.lua settles it."""
        data = self._read(job)
        if data is None or data.get("FetchworkState") not in _WAITING:
            return
        why = poolrules.refusal(data, self.rules) if self.rules is not None else None
        if why is not None:
            log.info("job %s refused by the pool's rules: %s", job, why)
            calls.admit_fail(self.store, job_id=job, reason=f"refused: {why}")
            return
        if self.signer is not None:
            why = refusal(job, data, leaf_digest(signed_text_of(data)),
                          read_staged(self.store, [job])[0])
            if why is not None:
                log.warning("job %s refused at admission: %s", job, why)
                self._fail(job, why)
                return
        admission = admit(data, self.settings, self.call, self.broker_defaults)
        if not admission.ok:
            log.info("job %s failed at submission: %s", job, admission.reason)
            calls.admit_fail(self.store, job_id=job, reason=admission.reason or "failed")
            return
        deleted, stored = changed_fields(data, admission.ad)
        stored.update(self._rule_defaults(admission.ad))
        if deleted or stored:  # what a match reads of the job may have changed
            merged = {name: value for name, value in data.items() if name not in deleted}
            stored[AUTOCLUSTER_ATTR] = _assign_autocluster(self.store, {**merged, **stored})
        if self.signer is not None:
            kept = {name: value for name, value in data.items() if name not in deleted}
            stored[SIGNATURE_ATTR] = self.signer.sign_texts(
                [signed_text_of({**kept, **stored})])[0]
        try:
            prio = clamp_prio(ad_prio(from_dict(admission.ad)))
        except AdError:
            prio = 0
        calls.admit(self.store, job_id=job, prio=prio, deleted=deleted,
                    fields=codec.fields_of(stored))
        if self.signer is not None:
            self._forget([job])

    def _fail(self, job: str, why: str) -> None:
        calls.admit_fail(self.store, job_id=job, reason=why)
        self._forget([job])

    def _forget(self, jobs: list[str]) -> None:
        pipe = self.store.client.pipeline(transaction=False)
        forget_staged(pipe, self.store, jobs)
        pipe.execute()

    def _signing_only(self) -> bool:
        """Whether signing (with the pool's rules) is all of a waiting job's admission:
        no submission filter or template, and no DEFAULT_JOB_EXCLUSIVE to add (which
        changes the job's autocluster: admit_waiting does that)."""
        rules = self.rules
        return (self.signer is not None and not summary_of(self.settings).submit
                and not (rules is not None and rules.default_exclusive))

    def _admit_signed(self, first: list[str], read: _Read | None = None) -> bool:
        """Check, sign and admit waiting jobs in batches, from batch `first` (`read`:
        what `_read_waiting(first)` gives, when the caller read it already) until none
        is left or SIGNED_PER_PASS are done; whether any is left. A batch takes two
        round trips: one reads its ads and staged digests (for a pass's first batch,
        the pass's own read: lua/read_waiting.lua), one admits it (admit_signed.lua),
        with the autoclusters' representatives, the staged digests dropped and the
        head of the validating set. Its Python work is one leaf a job from a signed
        text whose shared part each cluster writes once, the rules and the grouping
        decided once for a cluster's jobs whose own values cannot change them, and one
        signature for the batch; the next batch is read on another thread meanwhile,
        so Redis works while this one is signed. A batch read short of BATCH had
        nothing after it: no other read, and no thread, for what the admission's own
        reply (the head of the set) brings next."""
        assert self.signer is not None
        store = self.store
        batch, done = first, 0
        # The head of the validating set the last admission read back (two batches:
        # the one read ahead and what follows it); None before the first admission.
        head: list[str] | None = None
        before: set[str] = set()
        if not batch:
            ahead = None
        else:
            ahead = _finished(read) if read is not None else self._read_now(batch)
        while batch and ahead is not None and done < SIGNED_PER_PASS:
            found, staged = ahead.result()
            ahead = None
            # The jobs after this batch (a job joins the set with a later sequence);
            # none when the set held less than a batch as it was read (one that joined
            # since is in the head the admission reads back). After an admission, its
            # reply names them, without a round trip of their own.
            inhand = set(batch)
            if len(batch) < BATCH:
                following = []
            elif head is not None:
                following = [job for job in head
                             if job not in inhand and job not in before][:BATCH]
            else:
                following = [job for job in Store.ids(store.client.zrange(
                    store.keys.validating, len(batch), len(batch) + BATCH - 1))
                    if job not in inhand]
            if following and done + len(batch) < SIGNED_PER_PASS:
                ahead = self._ahead.submit(self._read_waiting, following)
            grouper = Grouper()
            admitted: list[tuple[str, int, bool, str]] = []
            leaves: list[bytes] = []
            # Jobs of one cluster share most of their ad: each cluster's signed text is
            # written once and each job adds its own lines, and what the pool's rules and
            # the autoclusters decide of a job is decided once for the jobs whose own
            # values cannot change it (_decided).
            texts: dict[str, SharedTexts] = {}
            decided: dict[tuple[str, tuple[str, ...], tuple[str, ...]], _Decision | None] = {}
            for (job, data, own), digest in zip(found, staged, strict=True):
                if own is None:
                    leaf = leaf_digest(signed_text_of(data))
                    decision = self._decide(data, grouper)
                else:
                    cluster = job.partition(".")[0]
                    names = tuple(data)
                    shared = texts.get(cluster)
                    if shared is None:
                        shared = texts[cluster] = SharedTexts()
                    leaf = leaf_digest(shared.text(data, own, names))
                    shape = (cluster, names, own)
                    if shape in decided:
                        decision = decided[shape] or self._decide(data, grouper)
                    else:
                        decision = self._decide(data, grouper)
                        decided[shape] = decision if _shared_decision(data, own) else None
                why_rules, gid, blocked, prio = decision
                why = f"refused: {why_rules}" if why_rules else refusal(job, data, leaf, digest)
                if why is not None:
                    log.warning("job %s refused at admission: %s", job, why)
                    calls.admit_fail(self.store, job_id=job, reason=why)
                    continue
                # The pool's rules and the job's own attributes decide, never what the
                # submitting client passed beside them (its autocluster, its flags).
                admitted.append((job, prio, blocked,
                                 "" if data.get(AUTOCLUSTER_ATTR) == gid else gid))
                leaves.append(leaf)
            # One signed string for the batch, stored once; each job its place in it.
            signed_batch = self.signer.sign_batch(leaves) if leaves else None
            # Jobs gone or no longer waiting leave the validating set (admit.lua's rule).
            waiting = [job for job, _data, _own in found]
            kept = set(waiting)
            done += len(batch)
            head = self._admit_batch(admitted, signed_batch,
                                     [job for job in batch if job not in kept], waiting, grouper)
            before = inhand
            batch = following if ahead is not None else head[:BATCH]
            if ahead is None and batch and done < SIGNED_PER_PASS:
                ahead = self._read_now(batch)
        return bool(batch)

    def _decide(self, data: Mapping[str, Any], grouper: Grouper) -> _Decision:
        """What the pool's rules and the autoclusters decide of waiting job `data`: why
        the rules refuse it (None: they do not), its autocluster, whether it waits
        BLOCKED for the policy's pass, its priority. A refused job gets no autocluster."""
        rules = self.rules
        names = names_of(data)
        why = rules_refusal(data, names, rules) if rules is not None else None
        if why:
            return why, "", False, 0
        gid = grouper.gid(data)
        blocked = (rules is not None and rules.limits and not names.blocked_reason
                   and data.get("HoldReasonCode") != int(HoldCode.SUBMITTED_ON_HOLD))
        return None, gid, blocked, _prio_of(data, data[names.prio] if names.prio else 0)

    def _read_now(self, batch: list[str]) -> Future[_Read]:
        """`_read_waiting(batch)` on this thread (nothing to overlap it with), as a
        finished future."""
        return _finished(self._read_waiting(batch))

    def _read_waiting(self, batch: list[str]) -> _Read:
        """The ads of the jobs of `batch` that wait for admission (each with the names
        of its own values: batchads.split_ads_of), and their staged digests, in one
        round trip (store/batchads.py: each cluster's shared ad read and decoded once,
        not rebuilt for every job by the script)."""
        store = self.store

        def read() -> tuple[list[Any], int]:
            pipe = store.client.pipeline(transaction=False)
            reads = batchads.queue_reads(pipe, store, batch)
            queue_staged(pipe, store, batch)
            return pipe.execute(), reads

        replies, reads = self._once_more(read)
        return _waiting_of(batch, replies[:reads], replies[reads:])

    def _admit_batch(self, signed: list[tuple[str, int, bool, str]],
                     signed_batch: SignedBatch | None, strays: list[str],
                     decided: list[str], grouper: Grouper) -> list[str]:
        """admit_signed.lua for one batch, the autoclusters' representatives as the
        leader makes them (one a submission wrote differently, as a submit.lua call made
        by hand may, is replaced), the strays out of the validating set and the decided
        jobs' staged digests dropped, in one round trip; the ids of the next two
        batches (the head of the validating set)."""
        store = self.store
        reps = [value for gid, rep in grouper.reps.items() for value in (gid, rep_entry(rep))]

        def admit() -> Any:
            pipe = store.client.pipeline(transaction=False)
            if reps:
                pipe.hset(store.keys.ac_reps, items=reps)
            if signed and signed_batch is not None:
                calls.admit_signed(store, pipe, jobs=signed, batch=signed_batch.blob,
                                   blocked_reason=poolrules.WAITING_REASON)
            if strays:
                pipe.zrem(store.keys.validating, *strays)
            forget_staged(pipe, store, decided)
            pipe.zrange(store.keys.validating, 0, 2 * BATCH - 1)
            return pipe.execute()[-1]

        return Store.ids(self._once_more(admit))

    def _once_more(self, step: Callable[[], Any]) -> Any:
        """`step()`, run again once after NOSCRIPT (a restarted server lost its scripts:
        what the pipeline ran before it is run again, and a job no longer waiting is
        left alone)."""
        try:
            return step()
        except NoScriptError:
            self.store.scripts.forget()
            return step()

    def _rule_defaults(self, ad: Mapping[str, Any]) -> dict[str, Any]:
        """What the pool's rules add to an admitted job: the BlockedReason that keeps it
        for the policy's pass (scheduling limits), Exclusive (DEFAULT_JOB_EXCLUSIVE)."""
        rules, added = self.rules, dict[str, Any]()
        if rules is None:
            return {}
        names = {name.lower() for name in ad}
        if rules.limits and "blockedreason" not in names \
                and ad.get("HoldReasonCode") != int(HoldCode.SUBMITTED_ON_HOLD):
            added["BlockedReason"] = poolrules.WAITING_REASON
        if rules.default_exclusive and "exclusive" not in names:
            added["Exclusive"] = True
        return added

    # -- activation -------------------------------------------------------------

    def _activate(self, job: str) -> None:
        data = self._read(job)
        if data is None or data.get("FetchworkState") != State.ACTIVATING.value:
            return
        token = data.get("FetchworkClaim")
        if not isinstance(token, str):
            return
        request = self.store.client.hgetall(self.store.keys.activation(token))
        if not request:
            return  # the claim gave up; activation_expire puts the job back
        facts, deadline_s = request_facts(request)
        if time.time() >= deadline_s - VERDICT_MARGIN_S:
            return  # too late for the claim; it (or activation_expire) puts the job back
        order = data.get("FetchworkOrder")
        facts = replace(facts, backfill=self.is_backfill_start(
            job, float(order) if isinstance(order, int | float) else None))
        result = activate(data, self.settings, bounded(self.call, deadline_s), facts, time.time())
        action, reason = result.action, result.verdict.reason
        if facts.backfill and backfill_action(action) is not action:
            action, reason = Activation.RETRY, f"{reason} (a backfill start needs code 0)"
        applied = self._settle(job, token, action, reason, result.verdict.hold_until)
        undo = result.passed if (result.action is Activation.START and not applied) \
            else result.to_revert
        revert(undo, self.call, facts)

    def _settle(self, job: str, token: str, action: Activation, reason: str | None,
                hold_until: int | None) -> bool:
        store, ttl_ms = self.store, REPLY_TTL_MS
        if action is Activation.START:
            done = calls.activate_start(store, job_id=job, token=token,
                                        default_lease_s=self.default_lease_s,
                                        reply_ttl_ms=ttl_ms)
        elif action in (Activation.BLOCK, Activation.RESERVE, Activation.RETRY):
            interval_ms = int(self.settings.activation_interval_s * 1000)
            done = calls.activate_defer(store, job_id=job, token=token, action=action.value,
                                        reason=reason or "", interval_ms=interval_ms,
                                        reply_ttl_ms=ttl_ms)
        elif action is Activation.HOLD:
            done = calls.activate_hold(store, job_id=job, token=token,
                                       reason=reason or "held by an activation filter",
                                       hold_until_s=hold_until or 0, reply_ttl_ms=ttl_ms)
        else:
            done = calls.activate_fail(store, job_id=job, token=token,
                                       reason=reason or "failed by an activation filter",
                                       reply_ttl_ms=ttl_ms)
        log.info("job %s activation: %s%s", job, action.value, f" ({reason})" if reason else "")
        return done


def run_filter_call(spec: FilterSpec, action: str, ad: Mapping[str, Any],
                    facts: Facts | None) -> FilterRun:
    return run_filter(spec, action, ad, facts)


def bounded(call: Call, deadline_s: float) -> Call:
    """`call` with each filter's timeout cut to what is left before the claim's deadline."""
    def limited(spec: FilterSpec, action: str, ad: Mapping[str, Any],
                facts: Facts | None) -> FilterRun:
        left_s = deadline_s - VERDICT_MARGIN_S - time.time()
        if left_s < spec.timeout_s:
            return run_filter(spec, action, ad, facts, timeout_s=max(0.0, left_s))
        return call(spec, action, ad, facts)
    return limited


def request_facts(request: Mapping[Any, Any]) -> tuple[Facts, float]:
    """Facts for the chain from a claim's activation request hash (a Redis reply: bytes
    names and values), and its deadline (s)."""
    def field(name: str, default: str = "0") -> str:
        return codec.text(request.get(name.encode(), default.encode()))

    slot_ad = codec.unpack(request[b"slot_ad"]) if b"slot_ad" in request else None
    cpus = slot_ad.get("Cpus", 1) if isinstance(slot_ad, dict) else 1
    facts = Facts(scheduler_pass=int(field("pass")), job_index=int(field("index")),
                  backfill=False, resource_count=int(cpus) if isinstance(cpus, int) else 1,
                  slot_ad=slot_ad)
    return facts, int(field("deadline")) / 1000.0


# A batch's waiting jobs as read: (id, ad, the names of its own values or None), and
# their staged digests.
_Read = tuple[list[tuple[str, dict[str, Any], tuple[str, ...] | None]], list[bytes | None]]


def _waiting_of(batch: list[str], reads: Sequence[Any], staged: Sequence[Any]) -> _Read:
    """The jobs of `batch` that wait for admission and their staged digests, from the
    replies of batchads.queue_reads (`reads`) and signing.queue_staged (`staged`)."""
    digests = dict(zip(batch, staged_of(batch, staged), strict=True))
    found = [(job, data, own) for job, (data, own)
             in zip(batch, batchads.split_ads_of(batch, reads), strict=True)
             if data and data.get("FetchworkState") in _WAITING]
    return found, [digests[job] for job, _data, _own in found]


def _head_read(reply: Sequence[Any]) -> tuple[list[str], _Read | None]:
    """read_waiting.lua's reply: the ids it took from the head of the validating set,
    and what `_read_waiting` would give for them (None for no id)."""
    batch = Store.ids(reply[0])
    if not batch:
        return [], None
    reads = 1 + batchads.READS
    return batch, _waiting_of(batch, reply[1:reads], reply[reads:])


def _finished(read: _Read) -> Future[_Read]:
    """`read` as a finished future (what the admission's loop waits on)."""
    done: Future[_Read] = Future()
    done.set_result(read)
    return done


# FilterLeader._decide: (why the pool's rules refuse the job, its autocluster, whether
# it waits BLOCKED, its priority).
_Decision = tuple[str | None, str, bool, int]
# What, besides the autoclusters' significant attributes, decides a job's _Decision.
_DECIDING = frozenset(("allowedjobduration", "jobprio", "holdreasoncode", "blockedreason"))


def _shared_decision(data: Mapping[str, Any], own: tuple[str, ...]) -> bool:
    """Whether waiting job `data`'s _Decision holds for every job of its cluster with its
    names and own names (`own`): none of those decides it, and its priority and run time
    limit are literals (an expression may read an own value)."""
    names = names_of(data)
    for name in (names.prio, names.walltime):
        if name is not None and type(data[name]) is not int:
            return False
    deciding = _DECIDING | {name.lower() for name in significant_names(data)}
    return not any(name.lower() in deciding for name in own)


def _prio_of(data: Mapping[str, Any], prio: Any) -> int:
    """A stored job's JobPrio `prio`, clamped (a literal read as is; else evaluated)."""
    if isinstance(prio, int) and not isinstance(prio, bool):
        return clamp_prio(prio)
    try:
        return clamp_prio(ad_prio(from_dict(data)))
    except AdError:
        return 0


def _assign_autocluster(store: Store, attrs: dict[str, Any]) -> str:
    """A job's autocluster after its attributes changed (admission): its representative
    is written when new; FetchworkAutocluster is set in `attrs`."""
    grouper = Grouper()
    gid = attrs[AUTOCLUSTER_ATTR] = grouper.gid(attrs)
    store.client.hsetnx(store.keys.ac_reps, gid, rep_entry(grouper.reps[gid]))
    return gid
