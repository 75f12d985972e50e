"""The starter: prepare, spawn, measure, control and report one job.

One loop in the main thread waits on the job's exit, control lines on
stdin, requests on a wake-up pipe (signals and in-process hooks) and the
next timer (sample, update, SIGKILL deadline). The decisions come from
`lifecycle`; every OS effect on the job goes through `JobProcess`.
"""

from __future__ import annotations

import functools
import logging
import os
import selectors
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any

import classad2

from fetchwork.config import keywords, latencytrace
from fetchwork.config.ads import AdText, format_ad, join_pair, join_texts, parse_ad
from fetchwork.config.loader import Config
from fetchwork.config.protocol import CONTROL_WORDS
from fetchwork.errors import AdError, StarterError
from fetchwork.hooks import control, handlers, mainthread
from fetchwork.hooks.runner import HookResult, HookSpec, resolve_hook, run_hook, start_hook
from fetchwork.starter import jobsignature, keepslot, lifecycle, limits
from fetchwork.starter.events import Events, LineReader
from fetchwork.starter.jobprocess import JobProcess, Sample, become_subreaper
from fetchwork.starter.jobspec import (
    JOB_AD_FILE,
    HookEnv,
    exit_attributes,
    hold_attributes,
    job_directory,
    launch_plan,
    remove_sandbox,
    replace_file,
)
from fetchwork.starter.lifecycle import Phase, Status
from fetchwork.starter.outcomes import new_outcome, report_exit
from fetchwork.starter.runas import give_tree, job_user
from fetchwork.starter.transferstep import TransferStep

log = logging.getLogger(__name__)

_MIN_INTERVAL_S = 0.05
# The first sample comes this long after the spawn, not at once: the job is
# still starting (exec, its loader), and a sample of its process tree would
# compete with it for the CPU (0.3 ms of its start here) and find it half made.
FIRST_SAMPLE_S = _MIN_INTERVAL_S
# The job's start is told (the `started` and Running events, the log line) once the
# job has run this long, ended, or a control word came, whichever is first: not
# at once. The spawn returns when the job has exec'd, but its loader still runs;
# the event wakes the startd (which logs, moves the slot, forks ahead) and the
# three would share the machine's cores just then.
START_NOTICE_S = 0.005

# SIGINT (a terminal's Ctrl-C reaching the startd's process group) vacates like SIGTERM; SIGHUP
# is caught and ignored (a handler, not SIG_IGN, so the job does not inherit an ignored SIGHUP).
_STOP_SIGNALS = {signal.SIGTERM: lifecycle.VACATE, signal.SIGINT: lifecycle.VACATE,
                 signal.SIGQUIT: lifecycle.KILL, signal.SIGHUP: None}


def asks_transfer(ad: classad2.ClassAd) -> bool:
    """Whether the job may ask for file transfer: ShouldTransferFiles YES or
    IF_NEEDED. Any other value (NO, HTCondor's default when it is absent) makes
    `transferstep.applies` false whatever the machine's FileSystemDomain, so the
    step is not even set up (no host name lookup, no copy of the environment)."""
    value = ad.get("ShouldTransferFiles") if "ShouldTransferFiles" in ad else None
    return isinstance(value, str) and value.strip().upper() in ("YES", "IF_NEEDED")


def remove_now(sandbox: str) -> None:
    """Remove a job's sandbox (`jobspec.remove_sandbox`), and note it in a trace."""
    remove_sandbox(sandbox)
    latencytrace.mark("starter.sandbox_removed")


class Starter:
    """Runs one job in `sandbox` for slot `slot`."""

    def __init__(self, config: Config, job_ad: classad2.ClassAd, slot_ad: classad2.ClassAd,
                 slot: int, sandbox: str, keyword: str | None = None,
                 events: IO[str] | None = None, control_fd: int | None = None,
                 ad_texts: tuple[str, str] | None = None):
        """`ad_texts`: the texts of `.job.ad` and `.machine.ad` the two ads were read from."""
        self.config = config
        self.ad = job_ad
        self.slot_ad = slot_ad
        self.slot = slot
        self.sandbox = os.path.abspath(sandbox)
        # STARTER_JOB_HOOK_KEYWORD wins, then the startd's word, then the ad's HookKeyword.
        self.keyword = keywords.starter_keyword(config, keyword or keywords.hook_keyword_of(job_ad))
        self.events = Events(events if events is not None else sys.stdout)
        self.control_fd = 0 if control_fd is None else control_fd
        # The job's signature decides whether it runs at all, and as its Owner.
        self.trust = jobsignature.verdict(config, job_ad)
        self.user = job_user(config, job_ad, slot, self.trust.owner_trusted)  # never root
        self.status = Status()
        self.job: JobProcess | None = None
        self.kill_sig: int = signal.SIGTERM
        self.started_at: float | None = None  # monotonic
        self.peak_rss_kb = 0
        self.cpu_s = (0.0, 0.0)
        self._update_running = threading.Event()
        self.transfer: TransferStep | None = None  # file transfer (transferstep.py)
        # Intervals of 0 would make the loop spin: 50 ms is the floor.
        self.sample_interval_s = max(_MIN_INTERVAL_S,
                                     config.get_duration_s("STARTER_SAMPLE_INTERVAL"))
        self.initial_update_s = config.get_duration_s("STARTER_INITIAL_UPDATE_INTERVAL")
        self.update_interval_s = max(_MIN_INTERVAL_S,
                                     config.get_duration_s("STARTER_UPDATE_INTERVAL"))
        self.memory_policy = limits.memory_policy(config)  # a bad value: the job never starts
        # What `.job.ad` holds (as read, then as last written here), and the texts the
        # prepare hook is given while the ads are still as read (not formatted again).
        self._written: str | None = ad_texts[0] if ad_texts else None
        self._as_read = ad_texts

    # Evaluated when first used (a stop request), not before the job starts, which
    # does not need it: HTCondor, too, evaluates MachineMaxVacateTime when it
    # vacates. The startd has read the knob at its start, so it is known to be good.

    @functools.cached_property
    def vacate_time_s(self) -> float:
        """Seconds a vacating job gets (`limits.vacate_time_s`)."""
        return limits.vacate_time_s(self.config, self.slot_ad, self.ad)

    # -- the whole run -----------------------------------------------------

    def run(self, leave_sandbox: Callable[[str], None] | None = None) -> str:
        """Prepare, run and report the job; returns how it ended. The sandbox is
        removed once the `exited` event is out, or handed to `leave_sandbox` (a
        starter kept for another job removes it after its `done`, while the startd
        fetches that job: on ext4 the removal is a few journalled writes)."""
        become_subreaper()
        give_tree(self.sandbox, self.user)
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        control.install(wake_write)
        previous = {number: handlers.swap(number, self._on_signal(wake_write))
                    for number in _STOP_SIGNALS}
        self._listen(wake_read)
        try:
            self._watch(self._selector)
            latencytrace.mark("starter.running")
            how = self._run()
            # The last word: the exit hook has run; only the sandbox's removal follows.
            self.events.emit("exited", how=how, ad=self.ad)
            latencytrace.mark("starter.exited_sent")
            return how
        except BaseException:
            if self.job is not None:  # the starter failed: its job must not outlive it
                self.job.hard_kill()
                self.job.cleanup()
            raise
        finally:
            for number, handler in previous.items():
                handlers.swap(number, handler)
            control.install(None)
            self._selector.close()
            os.close(wake_read)
            os.close(wake_write)
            (leave_sandbox or remove_now)(self.sandbox)

    def prepare_alone(self) -> str | None:
        """The prepare step on its own, with no job to follow: the prepare hook run
        while control words on `control_fd` are served, as `run` begins, with no
        signal handled, nothing spawned and no event but `prepared` (a rehearsal
        runs this); the failure reason or None."""
        wake_read, wake_write = os.pipe()
        try:
            self._listen(wake_read)
            try:
                self._watch(self._selector)
                return self._prepare()
            finally:
                self._selector.close()
        finally:
            os.close(wake_read)
            os.close(wake_write)

    def _listen(self, wake_read: int) -> None:
        """The readers of the wake-up pipe and of stdin, and one selector for the
        whole run: the prepare hook's pipe and then the job's pidfd join them in
        it while they are used."""
        self._wake = LineReader(wake_read)
        self._stdin = LineReader(self.control_fd)
        self._selector = selectors.DefaultSelector()

    def _run(self) -> str:
        if self.trust.refusal is not None:
            # Not run at all, not even its prepare hook: held on this machine's word.
            log.warning("job not run: %s", self.trust.refusal)
            self.ad.update(jobsignature.hold_attributes(self.slot_ad, self.slot,
                                                        self.trust.refusal))
            self.status = Status(Phase.DONE, lifecycle.HOLD)
            self._finish(None, self.ad["HoldReason"], 0.0)
            return lifecycle.HOLD
        reason = self._prepare()
        self._drain_requests()
        how = lifecycle.EVICT  # a failed prepare hook: the exit hook gets evict
        if self.status.how is not None:
            how = self.status.how
            reason = reason or f"{how} requested before the job started"
        if reason is None:
            how, reason = self._transfer_inputs(how)
        if reason is None:
            try:
                self._spawn()
            except StarterError as exc:
                # HTCondor puts a job it cannot start on hold, with the reason.
                log.warning("cannot start the job: %s", exc)
                self.ad.update(hold_attributes(self.slot_ad, self.slot, exc))
                how, reason = lifecycle.HOLD, self.ad["HoldReason"]
        if self.job is None:
            self.status = Status(Phase.DONE, how)
            self._finish(None, reason, 0.0)
            return how
        self._loop()
        latencytrace.mark("starter.job_exited")
        status = self.job.reap_main()
        duration_s = time.monotonic() - (self.started_at or time.monotonic())
        self.status = lifecycle.finished(self.status)
        left = self.job.cleanup()
        latencytrace.mark("starter.reaped")
        if left:
            log.info("killed %s process(es) the job left behind", left)
        self._finish(status, None, duration_s)
        assert self.status.how is not None
        return self.status.how

    # -- before the job: the prepare hook ----------------------------------
    #
    # HTCondor's starter runs `<Keyword>_HOOK_PREPARE_JOB` with the job ad and
    # the slot ad on stdin and waits for it: a non-zero exit means the job does
    # not run; what it prints is merged into the job ad. Control requests are
    # served meanwhile, so a stop request ends the wait (and kills a program
    # hook: no job will run, so there is nothing to prepare). An in-process
    # hook is called in this thread (`hooks.mainthread`): its timeout and a stop
    # request reach it as signals, and no hook thread is woken for it; where
    # that form cannot be used, in a hook thread whose timeout and cancellation
    # this loop watches.

    def _prepare(self) -> str | None:
        """Run the prepare hook and merge its output; the failure reason or None."""
        spec = resolve_hook(self.config, self.keyword, keywords.PREPARE_JOB)
        if spec is None:
            self.events.emit("prepared", held=True)  # goes out with the next event
            return None
        self._write_ads(spec)
        if spec.in_process and mainthread.usable():
            # Called in this thread with a watchdog: no hand-off to a hook thread and back.
            fds = [reader.fd for reader in (self._wake, self._stdin) if not reader.eof]
            result = run_hook(spec, self._prepare_input(), env=self._hook_env(),
                              cwd=self.sandbox, here=True, stop_asked=self._stop_now,
                              watch_fds=fds)
        else:
            result = self._prepare_in_thread(spec)
        if not result.ok:
            return f"the prepare hook failed: {result.outcome()}"
        if result.stdout.strip():
            try:
                self.ad.update(parse_ad(result.stdout, "prepare hook output"))
            except AdError as exc:
                return f"the prepare hook printed bad output: {exc}"
            self._write_ads()
        self.events.emit("prepared", held=True)  # goes out with the next event
        return None

    def _prepare_in_thread(self, spec: HookSpec) -> HookResult:
        """The prepare hook in a hook thread, while this loop serves control words."""
        done_read, done_write = os.pipe()
        cancel = threading.Event()
        box: list[HookResult] = []

        def finished(result: HookResult) -> None:
            box.append(result)
            os.write(done_write, b"x")  # the last use of the pipe: the loop below ends on it

        deadline = time.monotonic() + spec.timeout_s
        # An in-process hook's timeout and cancellation are watched by this loop
        # (no hook thread is woken for it); a program's by the thread running it.
        call = start_hook(spec, self._prepare_input(), env=self._hook_env(), cwd=self.sandbox,
                          user=self.user, on_done=finished, cancel=cancel, watched=False)
        if self.status.how is not None:  # asked to stop before the hook even started
            cancel.set()
        selector = self._selector
        selector.register(done_read, selectors.EVENT_READ, "done")
        try:
            # Blocked until the hook's thread wrote: a loop on `box` alone would
            # spin, holding the GIL that thread needs to finish.
            done = False
            while not done:
                wait_s = None if call is None else max(0.0, deadline - time.monotonic())
                for key, _ in selector.select(wait_s):
                    if isinstance(key.data, LineReader):
                        self._serve(selector, key.data)
                    done = done or key.data == "done"
                if self.status.how is not None:
                    cancel.set()
                if call is not None:
                    call.settle(deadline, cancel)
        finally:
            selector.unregister(done_read)
            os.close(done_read)
            os.close(done_write)
        return box[0]

    def _stop_now(self) -> bool:
        """Whether the job is to stop, after the control words waiting now."""
        self._drain_requests()
        return self.status.how is not None

    def _prepare_input(self) -> str:
        """Job ad, `-----`, slot ad. The prepare hook is the first to see the ads,
        before anything here changed them: the texts they were read from serve, and
        carry the job ad's values (`ads.AdText`), which an in-process hook takes
        rather than parse the job's text again."""
        if self._as_read is None:
            return join_pair(self.ad, self.slot_ad)
        job_text, slot_text = self._as_read
        self._as_read = None
        return AdText.carrying(join_texts(job_text, slot_text),
                               {name: self.ad[name] for name in self.ad.keys()})

    # -- before the job: its files and its spawn ---------------------------

    def _hook_env(self) -> HookEnv:
        return HookEnv(os.environ, self.sandbox, self.slot, job_directory(self.ad, self.sandbox))

    def _write_ads(self, spec: HookSpec | None = None) -> None:
        """Keep `.job.ad` (what `_CONDOR_JOB_AD` names) equal to the current ad, for the
        job and for program hooks (an in-process `spec` has the ad on stdin). The startd
        wrote both files; the machine ad does not change here."""
        if spec is not None and spec.in_process:
            return
        text = format_ad(self.ad)
        if text == self._written:
            return
        replace_file(os.path.join(self.sandbox, JOB_AD_FILE), text, self.user)
        self._written = text

    def _spawn(self) -> None:
        latencytrace.mark("starter.spawning")
        marker = (f"_CONDOR_ANCESTOR_{os.getpid()}", f"{os.getpid()}:{uuid.uuid4().hex}")
        plan = launch_plan(self.ad, self.sandbox, self.slot, marker)
        job = JobProcess(plan, self.user, marker, limits.cpu_affinity(self.slot_ad))
        pid = job.spawn()
        latencytrace.mark("starter.spawned")
        self.job = job
        self.kill_sig = plan.kill_sig
        self.started_at = time.monotonic()
        self.status = lifecycle.started(self.status)
        self.ad["JobPid"] = pid
        self.ad["JobStartDate"] = int(time.time())
        self.ad["JobState"] = "Running"

    def _tell_started(self) -> None:
        """The job's start, to the startd and the log (`START_NOTICE_S`)."""
        assert self.job is not None and self.job.pid is not None
        log.info("job %s started: pid %s, %s", self.ad.get("GlobalJobId", ""), self.job.pid,
                 " ".join(self.job.plan.argv))
        self.events.emit("started", held=True, pid=self.job.pid)
        self.events.emit("state", state="Running")

    # -- while the job runs ------------------------------------------------

    def _loop(self) -> None:
        assert self.job is not None
        selector = self._selector
        pidfd = self.job.pidfd
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ, "exit")
            selector.select(START_NOTICE_S)  # read nothing yet: told first, then served
        self._tell_started()
        now = time.monotonic()
        next_sample = now + min(FIRST_SAMPLE_S, self.sample_interval_s)
        next_update = now + self.initial_update_s
        try:
            while not self.job.main_exited():
                now = time.monotonic()
                if now >= next_sample:
                    self._sample()
                    next_sample = now + self.sample_interval_s
                if now >= next_update:
                    self._update()
                    next_update = now + self.update_interval_s
                self._apply(lifecycle.tick(self.status, now))
                deadlines = [next_sample, next_update, lifecycle.next_deadline(self.status)]
                wait_s = min(d for d in deadlines if d is not None) - now
                if self.job.pidfd is None:
                    wait_s = min(wait_s, 0.05)
                for key, _ in selector.select(max(0.0, wait_s)):
                    if isinstance(key.data, LineReader):
                        self._serve(selector, key.data)
        finally:
            if pidfd is not None:
                selector.unregister(pidfd)

    def _watch(self, selector: selectors.BaseSelector) -> None:
        selector.register(self._wake.fd, selectors.EVENT_READ, self._wake)
        if self._stdin.eof:
            return
        try:
            selector.register(self._stdin.fd, selectors.EVENT_READ, self._stdin)
        except PermissionError:  # a regular file or /dev/null: read it to its end now
            while not self._stdin.eof:
                self._requests(self._stdin.read())
            self._requests([lifecycle.VACATE])

    def _drain_requests(self) -> None:
        """Take requests that arrived while the prepare hook ran."""
        try:
            while True:
                ready = self._selector.select(0)
                if not ready:
                    return
                for key, _ in ready:
                    self._serve(self._selector, key.data)
        except (OSError, ValueError):
            return

    def _serve(self, selector: selectors.BaseSelector, reader: LineReader) -> None:
        """Read control words from a ready reader; EOF on stdin means the startd is gone."""
        self._requests(reader.read())
        if reader.eof:
            selector.unregister(reader.fd)
            if reader is self._stdin:
                self._requests([lifecycle.VACATE])

    def _requests(self, words: list[str]) -> None:
        for word in words:
            if word not in CONTROL_WORDS:
                log.warning("ignoring unknown control line %r", word)
                continue
            log.info("control request: %s", word)
            self._apply(lifecycle.handle(self.status, word, time.monotonic(),
                                         self.vacate_time_s))

    def _apply(self, step: lifecycle.Step) -> None:
        before = self.status.phase
        self.status = step.status
        job = self.job
        for effect in step.effects:
            if job is None:
                continue
            if effect == lifecycle.STOP:
                job.stop()
            elif effect == lifecycle.CONT:
                job.cont()
            elif effect == lifecycle.SOFT_KILL:
                job.signal_main(self.kill_sig)
            elif effect == lifecycle.HARD_KILL:
                job.hard_kill()
        state = {Phase.RUNNING: "Running", Phase.SUSPENDED: "Suspended"}
        if self.status.phase is not before and self.status.phase in state:
            self.ad["JobState"] = state[self.status.phase]
            self.events.emit("state", state=state[self.status.phase])

    def _sample(self) -> None:
        assert self.job is not None
        self._record(self.job.sample())
        limits.enforce_memory(self.ad, self.slot_ad, self.peak_rss_kb, self.memory_policy)

    def _record(self, sample: Sample, final: bool = False) -> None:
        """Put a sample into the ad: peak size and CPU never go down."""
        if not final:
            self.ad["NumPids"] = sample.num_pids
        self.peak_rss_kb = max(self.peak_rss_kb, sample.rss_kb)
        self.cpu_s = (max(self.cpu_s[0], sample.user_cpu_s), max(self.cpu_s[1], sample.sys_cpu_s))
        self.ad["ImageSize"] = self.peak_rss_kb
        self.ad["RemoteUserCpu"] = round(self.cpu_s[0], 3)
        self.ad["RemoteSysCpu"] = round(self.cpu_s[1], 3)

    def _update(self) -> None:
        self._sample()
        self.events.emit("update", ad=self.ad)
        spec = resolve_hook(self.config, self.keyword, keywords.UPDATE_JOB_INFO)
        if spec is None:
            return
        if self._update_running.is_set():
            log.info("the previous update hook still runs; skipping this update")
            return
        self._write_ads(spec)
        self._update_running.set()
        start_hook(spec, format_ad(self.ad), env=self._hook_env(), cwd=self.sandbox,
                   user=self.user, on_done=lambda _result: self._update_running.clear())

    # -- after the job -----------------------------------------------------

    def _finish(self, status: int | None, reason: str | None, duration_s: float) -> None:
        if self.job is not None:
            self._keep_slot()  # RunUntilCanceled; the exited children's CPU time arrives
            self._record(self.job.sample(), final=True)  # with their reaping
            latencytrace.mark("starter.measured")
        how = self.status.how or lifecycle.EXIT
        for name, value in exit_attributes(status, how, duration_s, reason).items():
            self.ad[name] = value
        log.info("job ended (%s): %s", how, self.ad["ExitReason"])
        how = self._transfer_outputs(how)
        spec = resolve_hook(self.config, self.keyword, keywords.JOB_EXIT)
        if spec is not None:
            self._write_ads(spec)
            outcome = new_outcome(self.ad, how, self.keyword or "", self.slot, self.user)
            report_exit(self.config, spec, outcome, env=self._hook_env(), cwd=self.sandbox)

    # -- file transfer (transferstep.py): after prepare, before the exit hook ---

    def _transfer_inputs(self, how: str) -> tuple[str, str | None]:
        """The job's input files into the sandbox; (how, None), or the hold's reason.
        A job that does not ask for file transfer skips the step and its set-up."""
        if not asks_transfer(self.ad):
            return how, None
        self.transfer = TransferStep(self.config, self.ad, self.slot_ad, self.sandbox,
                                     self.user, os.environ)
        held = self.transfer.inputs(self._stop_requested)
        if held is None:
            return how, None
        if self.status.how is not None:
            return self.status.how, held.reason
        return self.transfer.hold(held), held.reason

    def _transfer_outputs(self, how: str) -> str:
        """The job's outputs back to the pool; a failure turns the end into a hold."""
        if self.transfer is None:
            return how
        held = self.transfer.outputs(how, self._stop_requested)
        if held is None:
            return how
        how = self.transfer.hold(held)
        self.status = replace(self.status, how=how)
        return how

    def _stop_requested(self) -> bool:
        self._drain_requests()
        return self.status.how is not None and self.status.phase is not Phase.DONE

    # -- after the command: run until cancelled (keepslot.py) -----------------

    def _keep_slot(self) -> None:
        """Keep the slot after the command exited, while the job asks for it
        (`keepslot.keeps_slot`): updates go on, the slot's activity is Idle, until
        its run time is used up (then `exit`) or a stop request sets `how`."""
        if self.status.how != lifecycle.EXIT or not keepslot.keeps_slot(self.ad):
            return  # stopped by a request (removal, hold, vacate): nothing to keep
        deadline = keepslot.end_at(self.ad, time.time(), time.monotonic())
        log.info("the command ended; keeping the slot until %s", "the job is cancelled"
                 if deadline is None
                 else f"its run time ends in {deadline - time.monotonic():.0f}s")
        self.ad["JobState"] = keepslot.IDLE_STATE
        self.events.emit("state", state=keepslot.IDLE_STATE)
        selector = selectors.DefaultSelector()
        for reader in (self._wake, self._stdin):
            if not reader.eof:
                selector.register(reader.fd, selectors.EVENT_READ, reader)
        next_update = time.monotonic()
        try:
            while selector.get_map():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    log.info("the job's run time is used up; releasing the slot")
                    return
                if now >= next_update:
                    self._update()
                    next_update = now + self.update_interval_s
                wait_s = min(t for t in (next_update, deadline) if t is not None) - now
                for key, _ in selector.select(max(0.0, wait_s)):
                    how = self._cancelled_by(selector, key.data)
                    if how is not None:
                        log.info("the job was cancelled (%s); releasing the slot", how)
                        self.status = replace(self.status, how=how)
                        return
        finally:
            selector.close()
        self.status = replace(self.status, how=lifecycle.EVICT)  # both inputs gone

    def _cancelled_by(self, selector: selectors.BaseSelector, reader: LineReader) -> str | None:
        """The end a ready reader asks for while the slot is kept: its first stop
        word, or evict when the startd closed stdin."""
        for word in reader.read():
            how = keepslot.stop_how(word)
            if how is not None:
                return how
        if reader.eof:
            selector.unregister(reader.fd)
            if reader is self._stdin:
                return lifecycle.EVICT
        return None

    @staticmethod
    def _on_signal(wake_fd: int) -> Any:
        def handler(number: int, _frame: Any) -> None:
            word = _STOP_SIGNALS[signal.Signals(number)]
            if word is None:
                return
            try:
                os.write(wake_fd, word.encode() + b"\n")
            except OSError:
                pass

        return handler
