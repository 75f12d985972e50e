"""The starters of claimed slots: spawn, evict (vacate or kill), reap, starter events.

`StarterSupervisor` does what the daemon loop decides for a slot that holds a
claim (the startd's ClaimId, `slot.Claim`). It registers each starter's stdout
and pidfd in the loop's selector and turns the starter's JSON-line events into
slot changes.
"""

from __future__ import annotations

import logging
import selectors
import subprocess
import time
from collections.abc import Callable
from typing import Any, Protocol

import classad2

from fetchwork.config import keywords, latencytrace
from fetchwork.config.loader import Config
from fetchwork.errors import StarterError
from fetchwork.hooks.runner import HookSpec
from fetchwork.startd.running import RunAction, running_action
from fetchwork.startd.settings import StartdSettings
from fetchwork.startd.shutdown import ShutdownPlan
from fetchwork.startd.slots.carving import Carving
from fetchwork.startd.slots.slot import Claim, Slot
from fetchwork.startd.states import Activity, State

from . import eviction
from .eviction import Effect
from .ledger import RunLedger
from .process import StarterProcess
from .sandboxes import Sandboxes
from .zygoteclient import ZygoteClient

log = logging.getLogger(__name__)


class SupervisorHost(Protocol):
    """What `StarterSupervisor` needs from the daemon."""

    config: Config
    settings: StartdSettings
    slots: list[Slot]
    carving: Carving

    @property
    def shutdown_plan(self) -> ShutdownPlan | None: ...

    def slot_ad(self, slot: Slot) -> classad2.ClassAd: ...

    def slot_ad_text(self, slot: Slot) -> str: ...

    def slot_gone(self, slot: Slot) -> None: ...

    def advise(self, slot: Slot, spec: HookSpec | None, job: str, job_ad_text: str,
               slot_ad_text: str, args: tuple[str, ...]) -> None: ...

    def update_owner(self, slot: Slot) -> None: ...


class StarterSupervisor:
    """The starters of every slot: spawned, told to vacate or kill, read, reaped."""

    def __init__(self, host: SupervisorHost, selector: selectors.BaseSelector):
        self.host = host
        self.selector = selector
        self.sandboxes = Sandboxes(host.settings.execute_dir)  # the first made once it exists
        # Every starter is a fork of the zygote; STARTER_STANDBY of them are forked ahead.
        self.zygote = ZygoteClient()
        self.zygote.jobs_per_process = host.settings.starter_jobs_per_process
        self.zygote.keep_ahead(host.settings.starter_standby)
        self.ledger = RunLedger()  # jobs run and their slot time

    def refill(self) -> None:
        """Have starters forked ahead and a sandbox ready for the next job (off its path)."""
        self.zygote.keep_ahead(self.host.settings.starter_standby)
        self.sandboxes.refill()

    def close(self) -> None:
        """Stop the zygote (with the starters waiting for a job) and drop the sandbox
        made ahead; starters running jobs are not touched."""
        self.zygote.close()
        self.sandboxes.close()

    def spawn(self, slot: Slot, accepted: Callable[[], None] = lambda: None) -> None:
        """Start the claim's job; `accepted()` (the accept's log lines, the reply hook)
        is called once the starter has it, or before the claim is evicted when no
        starter could start."""
        claim = slot.claim
        assert claim is not None and slot.is_in(State.CLAIMED, Activity.IDLE)
        keyword = keywords.starter_keyword(self.host.config,
                                           keywords.hook_keyword_of(claim.current_ad()))
        try:
            starter = StarterProcess.spawn(slot.slot_id, claim.job_ad_text(),
                                           self.host.slot_ad_text(slot), self.sandboxes, keyword,
                                           self.zygote)
        except StarterError as exc:
            accepted()
            log.error("%s: job %s not started: %s; the claim is given back", slot.label,
                      claim.job_id, exc)
            # Not at once again: a failing fork must not run through the queue.
            slot.clock.last_found_work = False
            self.evict(slot, "the starter could not be started")
            return
        slot.starter = starter
        self.selector.register(starter.fileno(), selectors.EVENT_READ, ("stdout", slot, starter))
        if starter.pidfd is not None:
            self.selector.register(starter.pidfd, selectors.EVENT_READ, ("exit", slot, starter))
        if starter.done_fd is not None:  # its `done` wakes the loop as an exit would
            self.selector.register(starter.done_fd, selectors.EVENT_READ, ("exit", slot, starter))
        accepted()
        slot.move(State.CLAIMED, Activity.BUSY, time.time(),
                  f"starter {starter.pid} runs job {claim.job_id}")

    def evict(self, slot: Slot, why: str, fast: bool = False) -> None:
        """Evict the slot's claim: evict hook, then vacate (or kill) its job."""
        now = time.monotonic()
        if slot.claim is not None and slot.is_in(State.CLAIMED):
            self._evict_hook(slot, slot.claim)
        activity = Activity.KILLING if fast else Activity.VACATING
        if slot.is_in(State.CLAIMED):
            slot.move(State.PREEMPTING, activity, time.time(), why)
        elif fast and slot.is_in(State.PREEMPTING, Activity.VACATING):
            slot.move(State.PREEMPTING, Activity.KILLING, time.time(), why)
        if slot.starter is None:
            self.release(slot)
        elif slot.is_in(State.PREEMPTING, Activity.KILLING):
            self._step(slot, eviction.Kill(self._killing_timeout_s()), now)
        else:
            self._step(slot, eviction.Vacate(self.host.settings.max_vacate_s), now)

    def _evict_hook(self, slot: Slot, claim: Claim) -> None:
        """The evict-claim hook: job ad, `-----`, slot ad; never waited for."""
        if slot.hooks.evict is not None:
            self.host.advise(slot, slot.hooks.evict, claim.job_id, claim.job_ad_text(),
                             self.host.slot_ad_text(slot), ())

    def _killing_timeout_s(self) -> float:
        if self.host.shutdown_plan is not None and self.host.shutdown_plan.fast:
            return self.host.settings.fast_shutdown_grace_s
        return self.host.settings.killing_timeout_s

    def check_timers(self, slot: Slot, now: float) -> None:
        """Carry out the eviction deadlines that are due."""
        self._step(slot, eviction.Tick(
            has_starter=slot.starter is not None,
            vacating=slot.is_in(State.PREEMPTING, Activity.VACATING),
            killing_timeout_s=self._killing_timeout_s()), now)

    def _step(self, slot: Slot, event: eviction.Event, now: float) -> None:
        slot.deadlines, effects = eviction.step(slot.deadlines, event, now)
        for effect in effects:
            self._carry_out(slot, effect)

    def _carry_out(self, slot: Slot, effect: eviction.Effect) -> None:
        starter = slot.starter
        if starter is None:
            return
        if effect is Effect.SEND_VACATE:
            starter.send("vacate")
        elif effect is Effect.SEND_KILL:
            starter.send("kill")
        elif effect is Effect.VACATE_TIMED_OUT:
            slot.move(State.PREEMPTING, Activity.KILLING, time.time(),
                      "vacating took longer than MachineMaxVacateTime")
        elif effect is Effect.KILL_STARTER:
            log.warning("%s: starter %s did not exit in time; killing it", slot.label,
                        starter.pid)
            starter.kill_hard()

    def release(self, slot: Slot) -> None:
        """The Preempting slot's starter is gone: hand it to a waiting claim, or to Owner."""
        slot.claim = None
        slot.deadlines, _ = eviction.step(slot.deadlines, eviction.Released(), time.monotonic())
        if slot.carve is not None and slot.pending is None:
            # A dynamic slot is gone with its claim; its resources go back to its p-slot.
            self.zygote.let_go_kept(slot.slot_id)
            self.host.carving.drop(slot, self.host.slots)
            self.host.slot_gone(slot)
            return
        if slot.pending is not None and self.host.shutdown_plan is None:
            slot.claim, slot.pending = slot.pending, None
            slot.move(State.CLAIMED, Activity.IDLE, time.time(),
                      f"preempting job {slot.claim.job_id} takes the slot")
            self.spawn(slot)
            return
        if slot.pending is not None:
            self._evict_hook(slot, slot.pending)
            slot.pending = None
        slot.move(State.OWNER, Activity.IDLE, time.time(), "claim released")
        self.host.update_owner(slot)

    def apply_policy(self, slot: Slot) -> None:
        """SUSPEND / CONTINUE / PREEMPT for the slot's running job (HTCondor's policy)."""
        if slot.starter is None or slot.claim is None or slot.claim.job_exited:
            return  # a job that exited is past suspending or preempting
        action = running_action(slot.status, self.host.slot_ad(slot), slot.claim.current_ad(),
                                       self.host.settings.running)
        if action is RunAction.VACATE:
            self.evict(slot, "PREEMPT is true")
        elif action is not None and slot.control_sent != action.value:
            log.info("%s: %s job %s (%s is true)", slot.label, action.value, slot.claim.job_id,
                     action.name)
            slot.starter.send(action.value)
            slot.control_sent = action.value

    def read_events(self, slot: Slot) -> None:
        starter = slot.starter
        if starter is None:
            return
        for event in starter.read_events():
            self._on_event(slot, event)
        if starter.stdout_closed:
            unregister(self.selector, starter.fileno())
            if starter.proc.sock is not None:  # it may say `done` rather than exit
                self.reap(slot)

    def _on_event(self, slot: Slot, event: dict[str, Any]) -> None:
        claim, kind = slot.claim, event.get("event")
        if claim is None:
            return
        if kind == "started":
            claim.job_started_at = time.time()
            self.ledger.started(slot.slot_id, time.monotonic())
            log.info("%s: job %s started, pid %s", slot.label, claim.job_id, event.get("pid"))
            # Fork the next starter ahead now, not while this job was starting.
            if self.host.shutdown_plan is None:
                self.refill()
        elif kind == "state" and slot.is_in(State.CLAIMED):
            target = {"Running": Activity.BUSY, "Suspended": Activity.SUSPENDED,
                      "Idle": Activity.IDLE}.get(  # Idle: run until cancelled
                str(event.get("state")))
            slot.control_sent = None
            if target is not None and target is not slot.status.activity:
                slot.move(State.CLAIMED, target, time.time(), f"job {claim.job_id} {target.value}")
        elif kind in ("update", "exited"):
            ad = event.get("ad")
            if isinstance(ad, dict):
                claim.report(ad, exited=kind == "exited")
            if kind == "exited":
                latencytrace.mark("startd.exited_read")
                # The slot's move to Idle (or the starter's end) says it at INFO.
                log.debug("%s: job %s exited (%s)", slot.label, claim.job_id, event.get("how"))

    def reap(self, slot: Slot) -> None:
        """If the slot's starter has exited: clean up, then fetch again or finish the eviction."""
        starter = slot.starter
        if starter is None:
            return
        status = starter.poll()
        if status is None:
            return
        latencytrace.mark("startd.reaped")
        if not starter.stdout_closed:
            self.read_events(slot)
        self.ledger.ended(slot.slot_id, time.monotonic())
        unregister(self.selector, starter.fileno())
        if starter.pidfd is not None:
            unregister(self.selector, starter.pidfd)
        if starter.done_fd is not None:  # before its socket is kept or closed
            unregister(self.selector, starter.done_fd)
            starter.done_fd = None
        # A starter that finished its job and may run another waits for the slot's
        # next one (STARTER_JOBS_PER_PROCESS), unless the slot goes away with its claim.
        kept = (starter.between_jobs and slot.carve is None and self.host.shutdown_plan is None
                and self.zygote.take_back(slot.slot_id, starter.proc))
        if kept:  # it removes the job's sandbox now, while the slot fetches again
            self.sandboxes.left_by(slot.slot_id, starter.sandbox)
        starter.close(remove_sandbox=not kept)
        slot.starter = None
        if self.host.shutdown_plan is None:
            self.refill()  # in case the job never started
        ended = (f"starter {starter.pid} {'finished its job' if kept else 'exited'} with "
                 f"status {status} (job {starter.exit_how or 'ended without an exit event'})")
        # A job that ended as it should is one line, the slot's move back to Idle
        # (HTCondor's StartLog: a line a state change); otherwise the starter's own.
        quiet_end = (status == 0 and starter.exit_how is not None and slot.carve is None
                     and self.host.shutdown_plan is None
                     and slot.is_in(State.CLAIMED, Activity.BUSY, Activity.SUSPENDED))
        if not quiet_end:
            log.log(logging.INFO if status == 0 else logging.WARNING, "%s: %s", slot.label, ended)
        if slot.claim is not None:
            slot.claim.job_started_at = None
            slot.claim.ended = True
        slot.clock.last_empty = False  # a job ran since that fetch (`--once` fetches again)
        if slot.is_in(State.CLAIMED):
            if self.host.shutdown_plan is not None:
                self.evict(slot, "the startd is shutting down")
                return
            if starter.exit_how is None:
                # The starter failed before reporting an end: give the claim
                # back, and do not fetch sooner than after an empty fetch, so a
                # broken starter cannot run through the whole queue.
                slot.clock.last_found_work = False
                self.evict(slot, "the starter failed")
                return
            if not slot.is_in(State.CLAIMED, Activity.IDLE):  # a job kept it idle
                job = slot.claim.job_id if slot.claim is not None else "?"
                slot.move(State.CLAIMED, Activity.IDLE, time.time(),
                          f"job {job} ended; {ended}" if quiet_end else "job ended")
            if slot.carve is not None:
                self.evict(slot, "job ended; the dynamic slot is given back")
                return
            # As the text says: after a job ends, fetch at once on the same claim.
            slot.clock.due_now = True
        elif slot.is_in(State.PREEMPTING):
            self.release(slot)

    def press_shutdown(self, plan: ShutdownPlan, slots: list[Slot], now: float) -> bool:
        """A shutdown with starters still running: past its grace each is told to kill
        its job; past its last limit each is killed and abandoned, and True: stop now."""
        if plan.hard_stop_due(now):
            for slot in slots:
                if slot.starter is not None:
                    log.warning("%s: shutdown grace over; killing starter %s", slot.label,
                                slot.starter.pid)
                    slot.starter.send("kill")
            plan.hard_stop_sent(now)
        if not plan.give_up_due(now):
            return False
        for slot in slots:
            if slot.starter is not None:
                slot.starter.kill_hard()
                self.abandon(slot)
        return True

    def abandon(self, slot: Slot) -> None:
        """At the end of a shutdown: the starter was SIGKILLed; reap it and clean up."""
        starter = slot.starter
        if starter is None:
            return
        try:
            starter.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("%s: starter %s survived SIGKILL", slot.label, starter.pid)
        self.ledger.ended(slot.slot_id, time.monotonic())
        starter.close()
        slot.starter = None


def unregister(selector: selectors.BaseSelector, fd: int) -> None:
    try:
        selector.unregister(fd)
    except (KeyError, ValueError):
        pass
