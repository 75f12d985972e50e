"""The startd daemon: one selector loop drives every slot.

Hooks run in the runner's threads and post their results to a queue that
wakes the loop through a pipe; starters are child processes whose stdout
(JSON-line events) and pidfd sit in the same selector; signals wake it through
`signal.set_wakeup_fd`. All slot state is touched by one thread at a time,
holding the loop's lock: the loop's own thread, which lets go of it only
while it waits in select, or a fetch hook's thread whose answer comes then
and is handled there at once (the loop's step for it, without the hand-over
to the loop: about 0.2 ms of every start on an idle machine).
Decisions come from the pure modules (`fetchoutput`, `acceptance`,
`fetchdelay`, `running`, `shutdown`); this module and `starters` (which
follows `eviction`) do the I/O they call for.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import selectors
import signal
import threading
import time
from collections.abc import Callable

import classad2

from fetchwork.config import ads, latencytrace
from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError
from fetchwork.hooks.pipes import drain
from fetchwork.hooks.runner import HookResult, HookSpec, ignores, start_hook
from fetchwork.startd import fetchdelay
from fetchwork.startd.acceptance import Decision, Verdict, decide, start_is_false
from fetchwork.startd.fetchoutput import describe, log_level, note, read_fetch_output
from fetchwork.startd.hookcalls import HookCalls
from fetchwork.startd.mallocheap import HeapTrim
from fetchwork.startd.metricsswitch import serve_startd_metrics
from fetchwork.startd.settings import StartdSettings, keep_slots, slot_hooks
from fetchwork.startd.shutdown import ShutdownPlan
from fetchwork.startd.signals import SignalInbox
from fetchwork.startd.signingnotice import startup_notice
from fetchwork.startd.slots.carving import new_carving
from fetchwork.startd.slots.localid import name_if_anonymous
from fetchwork.startd.slots.slot import Claim, Slot, new_claim_id
from fetchwork.startd.slots.slotad import gather_facts, job_label, slot_ad_attrs, slot_name
from fetchwork.startd.slots.slotadcache import SlotAdCache
from fetchwork.startd.starters.outcomes import OutcomeReporter
from fetchwork.startd.starters.sandboxes import remove_stale_sandboxes
from fetchwork.startd.starters.supervisor import StarterSupervisor
from fetchwork.startd.states import Activity, State, initial_status
from fetchwork.startd.withdrawal import Withdrawer

log = logging.getLogger(__name__)

_FETCH, _ADVISORY = "fetch", "advisory"
# Longest the loop sleeps while a starter whose pidfd is unavailable is being reaped.
_REAP_POLL_S = 0.05


class Startd:
    """The per-machine agent. `run()` returns the exit status."""

    def __init__(self, config: Config, name: str | None = None, once: bool = False):
        self.config = config
        self.settings = StartdSettings.from_config(config)
        self.name = name or config.get("FULL_HOSTNAME") or config.get("HOSTNAME") or "localhost"
        self.once = once
        self.started_at = time.time()
        self.facts = gather_facts(config, self.settings.execute_dir)
        self._facts_at = time.monotonic()
        self.carving = new_carving(config, self.settings, self.facts, self.name)
        self._slot_ads = SlotAdCache()
        self.slots = [Slot(n, slot_name(n, self.name), slot_hooks(config, n),
                           status=initial_status(self.started_at))
                      for n in range(1, self.settings.num_slots + 1)]
        self._results: queue.SimpleQueue[tuple[str, int, str, HookResult]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", None, None))
        self._signals = SignalInbox(self._wake_w)
        self._advisory = 0
        self._calls = HookCalls()  # in-process hook calls whose timeouts the loop settles
        self._shutdown: ShutdownPlan | None = None
        self._withdrawer = Withdrawer(self, self._wake_w)
        self.starters = StarterSupervisor(self, self._selector)
        self._delay_problem: dict[int, str | None] = {}
        self._delay_memo = fetchdelay.DelayMemo(self.settings.fetch_delay)
        self._due: dict[int, float | None] = {}  # each slot's next fetch, as this round found it
        self._next_policy_at = 0.0
        self.metrics = serve_startd_metrics(self, config)
        self.outcomes = OutcomeReporter(config, self.settings.execute_dir)
        self._heap = HeapTrim()  # the C heap's free pages go back every so many jobs
        # Held by the loop's thread except while it waits in select: a fetch hook's
        # thread that takes it handles its answer itself (`_poster`).
        self._loop_lock = threading.Lock()
        # What such a thread's handling raised, raised again by the loop.
        self._failed_aside: BaseException | None = None

    # -- the loop --------------------------------------------------------------

    def run(self) -> int:
        self._signals.install()
        self._loop_lock.acquire()
        try:
            os.makedirs(self.settings.execute_dir, exist_ok=True)
            for path in remove_stale_sandboxes(self.settings.execute_dir):
                log.info("removed %s, left behind by a startd that is gone", path)
            self.starters.sandboxes.refill()
            self._announce()
            for slot in self.slots:
                self.update_owner(slot)
            while True:
                now = time.monotonic()
                self._handle_signals(now)
                self._calls.settle()
                self._drain_results()
                if self._finished(now) and self._withdrawer.done(now):
                    break
                self._tick(now)
                self._wait(max(self._next_wake(now) - time.monotonic(), 0.0))
        finally:
            # The loop's lock stays taken: an answer that comes after the loop ended
            # (a fetch still out at shutdown) goes to the queue, which nobody reads.
            self._signals.restore()
            self._close()
        log.info("startd %s exits", self.name)
        return 0

    def _announce(self) -> None:
        log.info("startd %s starts with %d slot(s); execute dir %s", self.name,
                 len(self.slots), self.settings.execute_dir)
        warn, notice = startup_notice(self.config)
        log.log(logging.WARNING if warn else logging.INFO, "%s", notice)
        for slot in self.slots:
            if slot.hooks.fetch is None:
                log.info("%s: no fetch hook (keyword %s); it never fetches work", slot.label,
                         slot.hooks.keyword or "unset")
            else:
                log.info("%s: keyword %s, fetch hook %s", slot.label, slot.hooks.keyword,
                         slot.hooks.fetch.value)
        if all(slot.hooks.fetch is None for slot in self.slots):
            log.warning("no slot has a fetch hook, so this startd will run nothing: set "
                        "STARTD_JOB_HOOK_KEYWORD (FETCHWORK for the reference hooks) and "
                        "<KEYWORD>_HOOK_FETCH_WORK, or start a pool with 'fetchwork up'")

    def _wait(self, timeout_s: float) -> None:
        self._loop_lock.release()
        try:
            ready = self._selector.select(timeout_s)
        finally:
            self._loop_lock.acquire()
        for key, _mask in ready:
            kind, slot, starter = key.data
            if kind == "wake":
                drain(self._wake_r)
            elif slot.starter is not starter:
                continue  # that starter was reaped earlier in this round
            elif kind == "stdout":
                self.starters.read_events(slot)
            elif kind == "exit":
                self.starters.reap(slot)

    def _next_wake(self, now: float) -> float:
        wake = min(now + self.settings.polling_interval_s, self._next_policy_at)
        for slot in self.slots:
            # As `_tick` found it this round (a fetch it started is outstanding: None).
            due = self._due.get(slot.slot_id) if self._shutdown is None else None
            for when in (due, slot.deadlines.next_at()):
                if when is not None:
                    wake = min(wake, when)
            if slot.starter is not None and slot.starter.pidfd is None:
                wake = min(wake, now + _REAP_POLL_S)
        if self._shutdown is not None:
            wake = min(wake, self._shutdown.next_deadline())
        if self._waits_for_advisory() and not self._results.empty():
            wake = now  # a hook ended before the loop began to wait for hooks

        call_due = self._calls.next_at()
        if call_due is not None:
            wake = min(wake, call_due)
        return min(wake, self._withdrawer.wake_at())

    def _tick(self, now: float) -> None:
        if now - self._facts_at >= self.settings.polling_interval_s:
            self.facts = gather_facts(self.config, self.settings.execute_dir)
            self._facts_at = now
        self.outcomes.tick(now)  # outcomes starters left unreported
        policy_due = now >= self._next_policy_at
        if policy_due:
            self._next_policy_at = now + self.settings.polling_interval_s
        self.carving.wake_after_exclusive(self.slots)
        for slot in list(self.slots):  # a reaped dynamic slot leaves the list
            self.update_owner(slot)
            if policy_due and self._shutdown is None:
                self.starters.apply_policy(slot)
            self.starters.check_timers(slot, now)
            if slot.starter is not None and slot.starter.pidfd is None:
                self.starters.reap(slot)
            if self._shutdown is None:
                due = self._due[slot.slot_id] = self._fetch_due_at(slot)
                if due is not None and due <= now:
                    self._start_fetch(slot)
                    self._due[slot.slot_id] = None

    # -- slot ads and START ------------------------------------------------

    def slot_ad(self, slot: Slot) -> classad2.ClassAd:
        now, view = time.time(), slot.claim.view() if slot.claim is not None else None
        inputs = (slot.status, view, self.facts, int(now), self.carving.signature(slot, self.slots))
        return self._slot_ads.ad(slot.name, inputs, lambda: self.carving.decorate(
            slot, slot_ad_attrs(slot.slot_id, self.name, self.settings.num_slots, self.facts,
                                slot.status, self.settings.policies[slot.slot_id], now, view),
            self.slots))

    def slot_ad_text(self, slot: Slot) -> str:
        """The slot's current ad as its hooks read it (formatted once per change)."""
        return self._slot_ads.text(slot.name, self.slot_ad(slot))

    def slot_gone(self, slot: Slot) -> None:
        self._slot_ads.forget(slot.name)

    def _start_is_false(self, slot: Slot, slot_ad: classad2.ClassAd) -> bool:
        """start_is_false, evaluated once per change of the slot's ad (twice a round)."""
        return bool(self._slot_ads.derived(
            slot.name, slot_ad, "start_is_false",
            lambda ad, attrs: start_is_false(ad, attrs.get("Start"))))

    def update_owner(self, slot: Slot) -> None:
        """Owner <-> Unclaimed as START (without a job) is false or not (HTCondor's IS_OWNER)."""
        if slot.is_in(State.UNCLAIMED) or slot.is_in(State.OWNER):
            start_false = self._start_is_false(slot, self.slot_ad(slot))
            if slot.is_in(State.UNCLAIMED) and start_false:
                slot.move(State.OWNER, Activity.IDLE, time.time(), "START is false")
            elif slot.is_in(State.OWNER) and not start_false and self._shutdown is None:
                slot.move(State.UNCLAIMED, Activity.IDLE, time.time(), "START is not false")

    # -- fetching -----------------------------------------------------------

    def _fetch_due_at(self, slot: Slot) -> float | None:
        if slot.clock.outstanding or not self.carving.may_fetch(slot, self.slots):
            return None
        slot_ad = self.slot_ad(slot)
        if not fetchdelay.may_fetch(slot.status, self._start_is_false(slot, slot_ad)):
            return None
        delay_s, problem = self._fetch_delay_s(slot, slot_ad)
        if problem != self._delay_problem.get(slot.slot_id):
            self._delay_problem[slot.slot_id] = problem
            if problem:
                log.warning("%s: %s; using %gs", slot.label, problem, delay_s)
        return fetchdelay.fetch_due_at(slot.clock, delay_s, self.settings.fetch_min_interval_s)

    def _fetch_delay_s(self, slot: Slot, slot_ad: classad2.ClassAd) -> tuple[float, str | None]:
        """FetchWorkDelay against the slot's ad and its running job's, evaluated again
        only when what it reads changed (the loop asks at every wake, several times a
        job); a reloaded expression starts a new memo."""
        if self._delay_memo.expr is not self.settings.fetch_delay:
            self._delay_memo = fetchdelay.DelayMemo(self.settings.fetch_delay)
        return self._delay_memo.delay_s(slot_ad, slot.running_job_ad)

    def _start_fetch(self, slot: Slot) -> None:
        spec = slot.hooks.fetch
        assert spec is not None
        slot.clock.started(time.monotonic())
        latencytrace.mark("startd.fetch_started")
        log.debug("%s: running fetch hook %s", slot.label, spec.value)
        # The result's own line says how long the hook took (`_on_fetched`).
        self._calls.add(start_hook(spec, self.slot_ad_text(slot),
                                   on_done=self._poster(_FETCH, slot.slot_id, ""),
                                   watched=False, caller_logs=True), spec.timeout_s)

    def _poster(self, kind: str, slot_id: int, job_id: str) -> Callable[[HookResult], None]:
        def post(result: HookResult) -> None:
            if kind == _FETCH and self._loop_lock.acquire(blocking=False):
                # The loop waits in select: its step for the answer is taken here, with
                # no hand-over to it (about 0.2 ms of a job's start).
                try:
                    self._fetched_aside(slot_id, result)
                finally:
                    self._loop_lock.release()
                _poke(self._wake_w)  # the loop looks at its slots and timers again
                return
            self._results.put((kind, slot_id, job_id, result))
            if kind == _ADVISORY and not self._waits_for_advisory():
                # A reply or evict hook's end changes nothing in the loop: it is read
                # at the next wake (one a job fewer), unless the loop waits for it.
                return
            _poke(self._wake_w)
        return post

    def _fetched_aside(self, slot_id: int, result: HookResult) -> None:
        """A fetch's answer handled on its hook's thread, the loop's lock held; what it
        raises is raised again in the loop (`_drain_results`), as if it had been there."""
        try:
            self.metrics.hook_done(result)
            self._on_fetched(self.slots[slot_id - 1], result)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread
            self._failed_aside = exc

    def _drain_results(self) -> None:
        failed, self._failed_aside = self._failed_aside, None
        if failed is not None:
            raise failed
        while True:
            try:
                kind, slot_id, job_id, result = self._results.get_nowait()
            except queue.Empty:
                return
            self.metrics.hook_done(result)
            if kind == _ADVISORY:
                self._advisory -= 1
                # A reply or evict hook that did its work is a debug line (one a job
                # otherwise; HTCondor logs hook runs at D_FULLDEBUG); a failure warns.
                log.log(logging.DEBUG if result.ok else logging.WARNING,
                        "slot%d: %s hook [%s] for job %s took %.3fs: %s", slot_id,
                        result.spec.hook, " ".join(result.argv[1:]), job_id, result.duration_s,
                        result.outcome())
            else:
                self._on_fetched(self.slots[slot_id - 1], result)

    def _on_fetched(self, slot: Slot, result: HookResult) -> None:
        latencytrace.mark("startd.fetched")
        now = time.monotonic()
        failure = result.error or (result.outcome() if result.timed_out else None)
        fetched = read_fetch_output(result.stdout, failure=failure,
                                           output_too_large=result.output_too_large)
        if fetched.empty:
            slot.clock.finished(now, found_work=False, empty=True)
            log.log(log_level(result, fetched), "%s: fetch hook %s took %.3fs: %s; no work",
                    slot.label, result.spec.value, result.duration_s, describe(result))
            self._no_more_work(slot)
            return
        self._heap.job()
        # Output that is not an ad still gets a `reject` reply, with an empty
        # job ad, so the site's system hears of it (HTCondor only logs it).
        job_ad = fetched.job_ad if fetched.job_ad is not None else classad2.ClassAd()
        # As the text says: the keyword that fetched the job goes into its ad.
        job_ad["HookKeyword"] = result.spec.keyword
        name_if_anonymous(fetched.job_ad, slot.label)  # not output that is no ad
        slot_ad = self.slot_ad(slot)
        if fetched.bad_reason is not None:
            decision = Decision(Verdict.REJECT, f"bad fetch hook output: {fetched.bad_reason}")
        elif self._shutdown is not None:
            decision = Decision(Verdict.REJECT, "the startd is shutting down")
        else:
            running = slot.claim.rank if slot.claim and slot.starter else None
            decision = decide(slot.status, slot_ad, job_ad, running,
                              self._slot_ads.value(slot.name, slot_ad, "Rank"))
        slot.clock.finished(now, found_work=decision.verdict is not Verdict.REJECT)
        told = functools.partial(
            log.log, log_level(result, fetched), "%s: fetch hook took %.3fs: job %s %sed (%s)%s",
            slot.label, result.duration_s, job_label(job_ad), decision.reply,
            decision.reason, note(result, fetched))
        if decision.verdict is Verdict.REJECT:
            told()
            if slot.hooks.reply is not None:
                self.advise(slot, slot.hooks.reply, job_label(job_ad), ads.format_ad(job_ad),
                            self._slot_ads.text(slot.name, slot_ad), ("reject",))
            self._no_more_work(slot)
            return
        self._accept(slot, job_ad, slot_ad, decision, told)

    def _accept(self, slot: Slot, job_ad: classad2.ClassAd, slot_ad: classad2.ClassAd,
                decision: Decision, told: Callable[[], None]) -> None:
        """Claim the slot for the job and hand it to a starter. The lines that say so
        (`told`, the fetch's, and the claim's move) are written once the starter has
        the job, or has failed to take it: on an idle machine they cost the start a
        fifth of a millisecond, the caches being cold."""
        tell = [told]
        try:
            self._hand_over(slot, job_ad, slot_ad, decision, tell)
        finally:
            _write(tell)  # when the hand-over did not come to it

    def _hand_over(self, slot: Slot, job_ad: classad2.ClassAd, slot_ad: classad2.ClassAd,
                   decision: Decision, tell: list[Callable[[], None]]) -> None:
        slot = self.carving.take(slot, job_ad, slot_ad, self.slots)  # a p-slot carves a d-slot
        reuse = slot.claim is not None and slot.is_in(State.CLAIMED, Activity.IDLE)
        claim_id = slot.claim.claim_id if reuse and slot.claim else new_claim_id(
            slot.name, self.started_at)
        job_ad["ClaimId"] = claim_id
        claim = Claim(claim_id=claim_id, job_ad=job_ad, rank=decision.rank)

        # The reply hook reads the slot ad as it was when the job was accepted (the
        # slot's one ad changes in place as the starter starts).
        replies = slot.hooks.reply is not None and not ignores(slot.hooks.reply, "accept")
        accepted_text = self._slot_ads.text(slot.name, slot_ad) if replies else ""

        def reply() -> None:
            _write(tell)
            if replies:
                self.advise(slot, slot.hooks.reply, claim.job_id, claim.job_ad_text(),
                            accepted_text, ("accept",))

        if decision.verdict is Verdict.PREEMPT:
            reply()
            slot.pending = claim
            self.starters.evict(slot, f"preempted by job {job_label(job_ad)} ({decision.reason})")
            return
        if slot.is_in(State.UNCLAIMED):
            tell.append(slot.move_untold(State.CLAIMED, Activity.IDLE, time.time(),
                                         f"claimed for job {job_label(job_ad)}"))
        slot.claim = claim
        # The reply is advisory: it goes out once the starter has the job, off its path.
        latencytrace.mark("startd.handover")
        self.starters.spawn(slot, reply)

    def _no_more_work(self, slot: Slot) -> None:
        """A claim with nothing to run is evicted (the text: no more work -> evict the claim).
        Not on the answer of a fetch that began while the job ran and ended after it: the
        fetch due on the idle claim has not been made yet (`due_now`), and decides."""
        if slot.is_in(State.CLAIMED, Activity.IDLE) and slot.starter is None \
                and slot.pending is None and not slot.clock.due_now:
            self.starters.evict(slot, "no more work")

    def advise(self, slot: Slot, spec: HookSpec | None, job: str, job_ad_text: str,
               slot_ad_text: str, args: tuple[str, ...]) -> None:
        """Start a reply or evict hook (job ad, `-----`, slot ad); the startd never waits."""
        if spec is None or (args and ignores(spec, args[-1])):
            return
        self._advisory += 1
        self._calls.add(start_hook(spec, ads.join_texts(job_ad_text, slot_ad_text), args,
                                   on_done=self._poster(_ADVISORY, slot.slot_id, job),
                                   watched=False, caller_logs=True), spec.timeout_s)

    @property
    def shutdown_plan(self) -> ShutdownPlan | None:
        return self._shutdown

    # -- signals and shutdown ---------------------------------------------------

    def _handle_signals(self, now: float) -> None:
        for signum in self._signals.take():
            if signum == signal.SIGHUP:
                self.reload()
            else:
                self.shutdown(fast=signum == signal.SIGQUIT, now=now,
                              why=signal.Signals(signum).name)

    def reload(self) -> None:
        """Read the configuration again (SIGHUP); on error keep the previous one."""
        try:
            config = Config.load()
            settings = StartdSettings.from_config(config)
            hooks = [slot_hooks(config, slot.slot_id) for slot in self.slots]
        except FetchworkError as exc:
            log.error("configuration not reloaded, keeping the previous one: %s", exc)
            return
        settings = keep_slots(settings, self.settings, config)
        self.config, self.settings = config, settings
        self.starters.sandboxes.use(settings.execute_dir)
        for slot, slot_hook in zip(self.slots, hooks, strict=True):
            slot.hooks = slot_hook
        self._delay_problem.clear()
        log.info("configuration reloaded")

    def shutdown(self, fast: bool, now: float, why: str) -> None:
        """Begin a graceful (vacate, exit hooks run) or fast (kill) shutdown."""
        plan = self._shutdown
        if plan is not None and (plan.fast or not fast):
            return
        grace = self.settings.fast_shutdown_grace_s if fast else self.settings.shutdown_grace_s
        self._shutdown = ShutdownPlan.begin(fast, now, grace, previous=plan)
        log.info("%s: %s shutdown, at most %gs", why, "fast" if fast else "graceful",
                 self._shutdown.deadline - now)
        for slot in list(self.slots):
            if slot.is_in(State.CLAIMED) or (fast and slot.is_in(State.PREEMPTING)):
                self.starters.evict(slot, "the startd is shutting down", fast=fast)
            if slot.pending is not None and slot.starter is None:
                self.starters.release(slot)

    def _waits_for_advisory(self) -> bool:
        """Whether the end of a reply or evict hook may end the loop (a shutdown, --once)."""
        return self._shutdown is not None or self.once

    def _busy(self) -> bool:
        return (any(s.starter is not None or s.clock.outstanding for s in self.slots)
                or self._advisory > 0)

    def _finished(self, now: float) -> bool:
        plan = self._shutdown
        if plan is not None:
            return not self._busy() or self.starters.press_shutdown(plan, self.slots, now)
        return self.once and self._once_done()

    def _once_done(self) -> bool:
        """`--once`: no claim anywhere, and every slot that can fetch got no output last time."""
        if self._busy() or not self._results.empty():
            return False
        for slot in self.slots:
            if slot.claim is not None or slot.pending is not None:
                return False
            if not slot.can_fetch or slot.is_in(State.OWNER):
                continue
            if slot.clock.last_end_at is None or not slot.clock.last_empty:
                return False
        return True

    def _close(self) -> None:
        self.starters.close()
        self._selector.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


def _write(lines: list[Callable[[], None]]) -> None:
    """Write the log lines held back, in order, each once."""
    if lines:
        latencytrace.mark("startd.told")
    while lines:
        lines.pop(0)()


def _poke(wake_w: int) -> None:
    """Wake the loop from its select."""
    try:
        os.write(wake_w, b"h")
    except (BlockingIOError, OSError):
        pass  # the loop is awake already (pipe full) or closing

