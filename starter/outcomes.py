"""Finished jobs' outcomes, kept on local disk until the exit hook has reported them.

Before it runs the exit hook, the starter writes one small file per job into
STARTER_OUTCOME_DIR, atomically (a fresh temporary name, then a rename; with
STARTER_OUTCOME_FSYNC, fsync of the file and of the folder too): the ad the
hook gets on stdin, how the job left (`exit`, `evict`, ...), the hook
keyword and the starter's identity. The file goes once the hook has
succeeded. A file that outlives its starter (the hook kept failing while the
broker was out of reach, or the starter was killed) is reported again by the
startd (startd/starters/outcomes.py) until a hook succeeds, so a job that finished is
not run again because its report was lost.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import classad2

from fetchwork.config import latencytrace
from fetchwork.config.ads import AdText
from fetchwork.config.loader import Config
from fetchwork.config.protocol import ad_job_id
from fetchwork.hooks.runner import HookResult, HookSpec, run_hook
from fetchwork.starter import proctree

log = logging.getLogger(__name__)

SUFFIX = ".outcome"


@dataclass(frozen=True)
class Outcome:
    """What the exit hook must hear about one finished job."""

    job: str
    how: str
    keyword: str
    slot: int
    ad_text: str
    user: tuple[int, int] | None
    writer_pid: int
    # When the writer started, in seconds since the machine booted (proctree.py).
    writer_started_at: float
    written_at: float
    # Set when its writer gave up reporting it (the exit hook failed) and went on:
    # a starter that runs further jobs is alive, yet no longer reports this one.
    released: bool = False


def outcome_dir(config: Config) -> str:
    return config.require("STARTER_OUTCOME_DIR")


_started_at: dict[int, float] = {}
# Outcome folders this process has made (or found): not made again for each job.
_made: set[str] = set()


def _process_started_at(pid: int) -> float:
    """When process `pid` started (`_state_and_start`), remembered for this process."""
    if pid not in _started_at:
        found = _state_and_start(pid)
        if found is None:
            return 0.0
        _started_at[pid] = found[1]
    return _started_at[pid]


def new_outcome(ad: classad2.ClassAd, how: str, keyword: str, slot: int,
                user: tuple[int, int] | None) -> Outcome:
    """The outcome of this process's job, written by this process. Its text carries
    the ad's values (`ads.AdText`): an in-process exit hook takes them rather than
    parse the text back."""
    pid = os.getpid()
    job = ad_job_id(ad) or str(ad.get("GlobalJobId") or uuid.uuid4().hex)
    return Outcome(job=job, how=how, keyword=keyword, slot=slot, ad_text=AdText(ad),
                   user=user, writer_pid=pid, writer_started_at=_process_started_at(pid),
                   written_at=time.time())


def _safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in ".-" else "_" for ch in text)[:100]


def write_outcome(folder: str, outcome: Outcome, durable: bool = False) -> str:
    """Write `outcome` atomically into `folder`; its path. Raises OSError. With
    `durable`, fsync the file and the folder (survives a power loss, at the cost of
    tens of milliseconds per job on some disks); without, it survives any process
    being killed, as the page cache outlives them."""
    if folder not in _made:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        _made.add(folder)
    path = os.path.join(folder, f"{_safe_name(outcome.job)}.{outcome.writer_pid}{SUFFIX}")
    temporary = os.path.join(folder, f".{uuid.uuid4().hex}.tmp")
    # One write of the whole text (json.dump writes piece by piece); the fields as
    # they are (asdict would copy each one deeply first).
    data = json.dumps({field.name: getattr(outcome, field.name)
                       for field in fields(outcome)}).encode("utf-8")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(temporary, flags, 0o600)
    except FileNotFoundError:  # the folder went away since this process made it
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(temporary, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with _quiet():
            os.unlink(temporary)
        raise
    if durable:
        _sync_folder(folder)
    return path


def _sync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _quiet:
    """Ignore OSError in a block (cleanup that may find nothing to clean)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, traceback: object) -> bool:
        return isinstance(value, OSError)


def read_outcome(path: str) -> Outcome | None:
    """The outcome in `path`; None when it cannot be read (it is logged)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        user = data.get("user")
        data["user"] = tuple(user) if isinstance(user, list) else None
        return Outcome(**data)
    except (OSError, ValueError, TypeError) as exc:
        log.warning("cannot read the kept job outcome %s: %s", path, exc)
        return None


def pending_outcomes(folder: str) -> list[tuple[str, Outcome]]:
    """The readable outcome files in `folder`, oldest first."""
    try:
        names = sorted(name for name in os.listdir(folder) if name.endswith(SUFFIX))
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(folder, name)
        outcome = read_outcome(path)
        if outcome is not None:
            found.append((path, outcome))
    return sorted(found, key=lambda item: item[1].written_at)


def forget_outcome(path: str) -> None:
    """Remove a reported outcome (nothing when it is gone already)."""
    with _quiet():
        os.unlink(path)


def writer_alive(outcome: Outcome) -> bool:
    """Whether the starter that wrote `outcome` still runs (it is still reporting it)."""
    if outcome.released:
        return False
    if outcome.writer_pid == os.getpid():
        return True
    found = _state_and_start(outcome.writer_pid)
    if found is None:
        return False
    state, started_s = found
    # The same start: not another process that got the pid since (a start a clock
    # tick or more apart; an outcome of an older release kept a wall-clock time,
    # which never matches: it is reported again, which the exit hook allows).
    return abs(started_s - outcome.writer_started_at) < 0.005 and state != "Z"


def _state_and_start(pid: int) -> tuple[str, float] | None:
    """`proctree.state_and_start`; None too when /proc cannot be read."""
    try:
        return proctree.state_and_start(pid)
    except OSError:
        return None


def report_exit(config: Config, spec: HookSpec, outcome: Outcome, env: Mapping[str, str],
                cwd: str) -> HookResult:
    """Keep `outcome` on disk, run the exit hook with it, and forget it once the hook
    succeeded; a failed hook leaves the file for the startd to report. An in-process
    hook is called in this thread when it can be (`run_hook`'s `here`)."""
    path = None
    try:
        path = write_outcome(outcome_dir(config), outcome,
                             durable=config.get_bool("STARTER_OUTCOME_FSYNC"))
    except OSError as exc:
        log.warning("job %s: cannot keep its outcome in %s: %s", outcome.job,
                    outcome_dir(config), exc)
    latencytrace.mark("starter.exit_hook_called")
    result = run_hook(spec, outcome.ad_text, extra_args=[outcome.how], env=env,
                      cwd=cwd, user=outcome.user, here=True)
    latencytrace.mark("starter.exit_hook_returned")
    if result.ok:
        if path is not None:
            forget_outcome(path)
    else:
        log.warning("the exit hook failed: %s%s", result.outcome(),
                    f"; the outcome stays in {path} for the startd to report" if path else "")
        if path is not None:
            try:  # the startd's now, even while this starter goes on to another job
                write_outcome(outcome_dir(config), replace(outcome, released=True))
            except OSError as exc:
                log.warning("job %s: cannot hand its outcome over: %s", outcome.job, exc)
    return result
