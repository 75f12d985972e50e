"""A waiting starter's rehearsal: the start path run once on a sample job, with no effect.

A starter forked from the zygote shares the zygote's memory until it writes
to it, and a Python process writes wherever it runs code (reference counts,
the interpreter's inline caches, the allocator's free lists): the first run
of each step copies a few hundred pages, a few microseconds each. A starter
forked ahead that has waited IDLE_S for its job has time to spare, so it runs the
steps of a job's start on a sample job: parse and format the ads, build a
`Starter`, plan the launch, open its streams and make the id and folder
switches of the spawn (to this process's own ids), run the starter's prepare
step with an in-process hook that does nothing while it reads a control
word, emit an event and log a line. Nothing is written anywhere, no hook of the site runs
and nothing is logged; the real job then finds those pages copied already
(about two milliseconds less from fetch to start, in `bench/startd_bench.py`
runs taken in turn with and without it).

A starter given its job at once (a busy slot, jobs back to back) does not
rehearse: the rehearsal costs more CPU than it saves on the path, and a job
that arrives meanwhile is not kept waiting for more than the step under way.
"""

from __future__ import annotations

import io
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

import classad2

from fetchwork.config import keywords
from fetchwork.config.ads import first_of_pair, format_ad, join_pair, parse_ad
from fetchwork.config.loader import Config
from fetchwork.hooks.runner import resolve_hook
from fetchwork.starter import launch, limits
from fetchwork.starter.events import Events
from fetchwork.starter.jobprocess import JobProcess, file_identity
from fetchwork.starter.jobspec import exit_attributes, launch_plan
from fetchwork.starter.starter import Starter

# Seconds a starter forked ahead waits for its job before it rehearses.
IDLE_S = 0.05

# A job ad and a slot ad as the startd writes them (the reference hooks' and
# a static slot's attributes), with the kinds of value real ones have.
SAMPLE_JOB_AD = """\
Cmd = "/bin/true"
Iwd = "/"
Owner = "nobody"
QDate = 1700000000
ProcId = 0
ClaimId = "<slot1@rehearsal>#1700000000#1#0123456789abcdef"
JobPrio = 0
Arguments = "a 'b c'"
Environment = "A=1 B=2"
In = "/dev/null"
Out = "/dev/null"
Err = "/dev/null"
ClusterId = 1
JobStatus = 2
RemoteHost = "slot1@rehearsal"
Rerunnable = true
GlobalJobId = "rehearsal#1.0#1700000000"
HookKeyword = "FETCHWORK"
JobRunCount = 1
JobStartDate = 1700000000
NumJobStarts = 1
NumJobMatches = 1
RequestCpus = 1
RequestMemory = 128
Requirements = TARGET.Memory >= RequestMemory && TARGET.Cpus >= RequestCpus
Rank = 0.0
FetchworkClaim = "0123456789abcdef0123456789abcdef"
FetchworkOrder = 1
FetchworkState = "RUNNING"
JobLeaseDuration = 2400
JobCurrentStartDate = 1700000000
EnteredCurrentStatus = 1700000000
FetchworkAutocluster = "rehearsal00"
FetchworkLeaseExpiry = 1700002400.5
"""

SAMPLE_SLOT_AD = """\
Arch = "X86_64"
Cpus = 1
Disk = 1000000
Mips = 1000
Name = "slot1@rehearsal"
Rank = 0
JobId = "1.0"
OpSys = "LINUX"
Start = true
State = "Claimed"
Memory = 1024
MyType = "Machine"
SlotID = 1
LoadAvg = 0.25
Machine = "rehearsal"
Activity = "Idle"
SlotType = "Static"
TotalCpus = 1
TotalDisk = 1000000
TotalSlots = 1
CurrentRank = 0.0
DynamicSlot = false
TotalMemory = 1024
Requirements = true
TotalLoadAvg = 0.25
MyCurrentTime = 1700000000
TotalSlotCpus = 1
TotalSlotDisk = 1000000
TotalSlotMemory = 1024
PartitionableSlot = false
FetchworkExclusive = false
EnteredCurrentState = 1700000000
FetchworkRunningJobs = 1
EnteredCurrentActivity = 1700000000
"""

# The loggers of the modules whose code the steps run.
_LOGGERS = tuple(f"fetchwork.{name}" for name in (
    "hooks.runner", "hooks.inprocess", "hooks.workers", "starter.runas", "starter.starter",
    "starter.events", "starter.jobprocess", "starter.limits"))

# The hook keyword of the rehearsal's prepare step (its only hook: `nothing`).
_KEYWORD = "FETCHWORK_REHEARSAL"

# The sandbox named in the rehearsal: never created, never written.
_SANDBOX = os.path.join(os.sep, "nonexistent-fetchwork-rehearsal")


def nothing(args: list[str], stdin_text: str) -> None:
    """The in-process hook the rehearsal calls: it does nothing."""
    return None


def rehearse(config: Config, interrupted: Callable[[], bool] = lambda: False) -> int:
    """Run the start path's steps on the sample job until `interrupted()` (asked
    before each step); the number of steps run. Never raises, writes nothing."""
    state: dict[str, Any] = {"config": config}
    done = 0
    # The modules the steps run log as they go (the hook's call, the job's
    # user): their loggers are silenced for the rehearsal, no other.
    silenced = [logger for logger in map(logging.getLogger, _LOGGERS) if not logger.disabled]
    for logger in silenced:
        logger.disabled = True
    try:
        for step in _STEPS:
            if interrupted():
                break
            step(state)
            done += 1
    except Exception:  # noqa: BLE001 - a rehearsal that fails changes nothing for the job
        pass
    finally:
        for logger in silenced:
            logger.disabled = False
    if done == len(_STEPS) and not interrupted():
        _log_a_line()
        done += 1
    return done


def step_count() -> int:
    """How many steps a whole rehearsal has."""
    return len(_STEPS) + 1


def sample_ads() -> tuple[classad2.ClassAd, classad2.ClassAd]:
    """The sample job ad and slot ad, parsed (the zygote warms the parser with them)."""
    return (parse_ad(SAMPLE_JOB_AD, "sample job ad"), parse_ad(SAMPLE_SLOT_AD, "sample slot ad"))


def _ads(state: dict[str, Any]) -> None:
    job_ad, slot_ad = sample_ads()
    first_of_pair(join_pair(job_ad, slot_ad))
    format_ad(job_ad)
    state.update(job_ad=job_ad, slot_ad=slot_ad)


def _starter(state: dict[str, Any]) -> None:
    """A `Starter` of the sample job whose only hook is `nothing` (its prepare
    hook, under a keyword of the rehearsal's): no hook of the site's is called."""
    config = state["config"].with_values(STARTER_JOB_HOOK_KEYWORD=_KEYWORD,
                                         **{f"{_KEYWORD}_HOOK_{keywords.PREPARE_JOB}":
                                            f"python:{__name__}:nothing"})
    state["starter"] = Starter(config, state["job_ad"], state["slot_ad"], 1, _SANDBOX,
                               events=io.StringIO())
    logging.FileHandler(os.devnull, encoding="utf-8").close()  # as StarterLog.slotN is opened


def _launch(state: dict[str, Any]) -> None:
    marker = (f"_CONDOR_ANCESTOR_{os.getpid()}", f"{os.getpid()}:{uuid.uuid4().hex}")
    plan = launch_plan(state["job_ad"], _SANDBOX, 1, marker)
    # This process's own ids stand for the job user's: each switch below is
    # made, with no change, as the job's spawn makes it.
    own = (os.getuid(), os.getgid()) if os.geteuid() == 0 else None
    job = JobProcess(plan, own, marker, limits.cpu_affinity(state["slot_ad"]))
    with file_identity(own):
        streams = job.open_streams()  # /dev/null
    for fd in set(streams):
        os.close(fd)
    launch.inheritable_fds()
    with launch.ids_switched(own, os.sep):
        pass


def _hook(state: dict[str, Any]) -> None:
    """The starter's own prepare step (`Starter.prepare_alone`) with its hook
    `nothing`, a control word (one that changes nothing before a job) waiting
    on the sample starter's stdin; the site's starter hooks only resolved."""
    config = state["config"]
    for keyword, hook in keywords.starter_hooks(config):
        resolve_hook(config, keyword, hook)
    starter = state["starter"]
    starter.control_fd, control_write = os.pipe()
    try:
        os.write(control_write, b"continue\n")
        starter.prepare_alone()
    finally:
        for fd in (starter.control_fd, control_write):
            os.close(fd)


def _event(state: dict[str, Any]) -> None:
    job_ad = state["job_ad"]
    job_ad.update(exit_attributes(0, "exit", 0.0, None))
    Events(io.StringIO()).emit("exited", how="exit", ad=job_ad)


_STEPS: tuple[Callable[[dict[str, Any]], None], ...] = (
    _ads, _starter, _launch, _hook, _event)


def _log_a_line() -> None:
    """Log a line as the job's first will be logged, through each of the root
    handlers' formatters, into memory (a logger of its own, not propagating)."""
    logger = logging.getLogger(f"{__name__}.quiet")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    for formatter in [handler.formatter for handler in logging.getLogger().handlers]:
        handler = logging.StreamHandler(io.StringIO())
        handler.setFormatter(formatter)
        logger.addHandler(handler)
        try:
            logger.info("job %s started: pid %s, %s", "rehearsal#1.0#0", 1, "/bin/true")
        finally:
            logger.removeHandler(handler)
