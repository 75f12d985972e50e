"""What the rq bridge's knobs say, and the job ad a dequeued rq job becomes (pure).

Knobs (config/defaults.conf, config/examples/rq.conf):

- RQ_URL: rq's Redis, in any form FETCHWORK_BROKER takes (redis://, rediss://,
  unix://, redis+sentinel://); RQ_CA, RQ_CERT, RQ_KEY, RQ_USERNAME and
  RQ_PASSWORD_FILE play the parts of FETCHWORK_BROKER_CA, ... for it.
- RQ_QUEUES: queue names in priority order, as `rq worker high default low`
  takes them (commas or spaces between names).
- RQ_PYTHONPATH: more folders the job's process imports from, before the
  startd's own PYTHONPATH.
- RQ_FETCH_LONG_POLL: seconds an idle slot's fetch blocks on the queues.
- RQ_PYTHON: the interpreter of the job's process (default: the startd's).
- RQ_WITH_SCHEDULER: the slots also enqueue scheduled jobs that are due, as
  `rq worker --with-scheduler` does.

The job's process is `python -m fetchwork.hooks.rqbridge.horse` with the
startd's interpreter (or RQ_PYTHON), in the startd's working folder (`Iwd`), with the
startd's environment (`Environment`) and RQ_PYTHONPATH in front of its
PYTHONPATH: the function is imported as an rq worker started where the
startd was started would import it (`rq worker` puts its working folder
first on the path, as `python -m` does).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fetchwork.config.argsyntax import format_arguments_raw
from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError

HORSE_MODULE = "fetchwork.hooks.rqbridge.horse"
# The job ad's attributes that name the rq job, its execution and the slot's worker.
JOB_ID_ATTR, QUEUE_ATTR, WORKER_ATTR, EXECUTION_ATTR = (
    "RqJobId", "RqQueue", "RqWorker", "RqExecutionId")
DESCRIPTION_ATTR = "RqDescription"
# rq's description shows the call's arguments: the ad keeps its start only.
DESCRIPTION_CHARS = 200
# The file in the sandbox that takes the job process's standard error.
HORSE_ERR = "rq-job.err"
# Variables of the startd's environment the job does not get: the slot's own
# scratch folder is the job's TMPDIR (as HTCondor gives it), and the
# starter's markers are the starter's to set.
_NOT_CARRIED = ("TMPDIR", "TMP", "TEMP")
_NOT_CARRIED_PREFIXES = ("_CONDOR_",)
# rq's queue names: what `Queue(name)` accepts in a key without surprises.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:@-]+")
# rq's default job timeout (Queue.DEFAULT_TIMEOUT), when a job has none.
RQ_DEFAULT_TIMEOUT_S = 180


@dataclass(frozen=True)
class RqSettings:
    """The bridge's knobs, checked."""

    url: str
    queues: tuple[str, ...]
    pythonpath: tuple[str, ...]
    long_poll_s: int
    python: str | None = None  # RQ_PYTHON; None: the startd's own interpreter
    with_scheduler: bool = False  # RQ_WITH_SCHEDULER, as `rq worker --with-scheduler`


def queue_names(text: str) -> tuple[str, ...]:
    """RQ_QUEUES as names in priority order; ValueError naming a bad one."""
    names = tuple(word for word in re.split(r"[\s,]+", text.strip()) if word)
    if not names:
        raise ValueError("names no queue")
    for name in names:
        if not _QUEUE_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a queue name (letters, digits, _ . : @ -)")
    if len(set(names)) != len(names):
        raise ValueError("names a queue twice")
    return names


def python_path(text: str) -> tuple[str, ...]:
    """RQ_PYTHONPATH: folders separated by ':' (or commas or spaces)."""
    return tuple(word for word in re.split(r"[\s,:]+", text.strip()) if word)


def read_settings(config: Config) -> RqSettings:
    """The knobs, each checked; ConfigError naming the knob, its file and line."""
    url = (config.get("RQ_URL") or "").strip()
    if not url:
        raise _bad("RQ_URL", config, "is empty: set it to rq's Redis (redis://host:6379/0)")
    try:
        queues = queue_names(config.get("RQ_QUEUES") or "")
    except ValueError as exc:
        raise _bad("RQ_QUEUES", config, str(exc)) from None
    long_poll_s = config.get_duration_s("RQ_FETCH_LONG_POLL")
    if long_poll_s < 0:
        raise _bad("RQ_FETCH_LONG_POLL", config, "must not be negative")
    python = (config.get("RQ_PYTHON") or "").strip() or None
    if python is not None and not os.path.isabs(python):
        raise _bad("RQ_PYTHON", config, f"must be an absolute path, not {python!r}")
    return RqSettings(url=url, queues=queues,
                      pythonpath=python_path(config.get("RQ_PYTHONPATH") or ""),
                      long_poll_s=math.ceil(long_poll_s), python=python,
                      with_scheduler=config.get_bool("RQ_WITH_SCHEDULER"))


def _bad(knob: str, config: Config, why: str) -> ConfigError:
    where = config.where(knob)
    return ConfigError(f"{knob} {why}", where.source if where else None,
                       where.line if where else None)


def block_s(settings: RqSettings, slot_busy: bool) -> int | None:
    """How long a fetch blocks on the queues: None (a look, no wait) for a busy
    slot or RQ_FETCH_LONG_POLL = 0, else whole seconds (rq's BLPOP takes no less)."""
    if slot_busy or settings.long_poll_s <= 0:
        return None
    return max(1, settings.long_poll_s)


def job_environment(environ: Mapping[str, str], extra_path: Sequence[str],
                    rq_ids: Mapping[str, str]) -> dict[str, str]:
    """The job's environment: the startd's, RQ_PYTHONPATH in front of its PYTHONPATH,
    and the variables an rq work horse has (RQ_WORKER_ID, RQ_JOB_ID, RQ_EXECUTION_ID)."""
    env = {name: value for name, value in environ.items()
           if name not in _NOT_CARRIED and not name.startswith(_NOT_CARRIED_PREFIXES)}
    paths = [*extra_path, *(part for part in environ.get("PYTHONPATH", "").split(":") if part)]
    if paths:
        env["PYTHONPATH"] = ":".join(dict.fromkeys(paths))
    env.update(rq_ids)
    return env


def format_environment(env: Mapping[str, str]) -> str:
    """An `Environment` attribute in HTCondor's new syntax; variables whose name
    is not a plain name (or whose value has a NUL) are left out."""
    words = [f"{name}={value}" for name, value in sorted(env.items())
             if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and "\0" not in value]
    return format_arguments_raw(words)


@dataclass(frozen=True)
class DequeuedJob:
    """What the fetch hook knows of a job it dequeued."""

    job_id: str
    queue: str
    worker: str
    execution_id: str
    description: str | None  # rq's description of the call: `app.tasks.add(1, 2)`
    timeout_s: float | None  # rq's job timeout; -1: none; None or 0: rq's default


def walltime_s(timeout_s: float | None) -> int | None:
    """The job's AllowedJobDuration: rq's timeout (its default when unset); None when -1."""
    if not timeout_s:  # rq's worker: `job.timeout or Queue.DEFAULT_TIMEOUT`
        return RQ_DEFAULT_TIMEOUT_S
    if timeout_s < 0:
        return None
    return math.ceil(timeout_s)


def job_ad(job: DequeuedJob, python: str, cwd: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The job ad the fetch hook prints for `job`."""
    ad: dict[str, Any] = {
        "Cmd": python,
        "Arguments": format_arguments_raw(["-m", HORSE_MODULE, job.worker, job.job_id,
                                           job.execution_id, job.queue]),
        "Iwd": cwd,
        "Environment": format_environment(env),
        "GlobalJobId": f"rq:{job.queue}:{job.job_id}",
        JOB_ID_ATTR: job.job_id,
        QUEUE_ATTR: job.queue,
        WORKER_ATTR: job.worker,
        EXECUTION_ATTR: job.execution_id,
        # As HTCondor's vanilla jobs: the job process ends on SIGTERM when vacated.
        "JobUniverse": 5,
    }
    if job.description:
        ad[DESCRIPTION_ATTR] = job.description[:DESCRIPTION_CHARS]
    walltime = walltime_s(job.timeout_s)
    if walltime is not None:
        ad["AllowedJobDuration"] = walltime
    return ad


def worker_name(slot_name: str, pid: int) -> str:
    """The rq worker name of a slot of the startd with process id `pid`: the slot's
    name, and the pid, so a restarted startd never meets its dead self's name."""
    safe = re.sub(r"[^A-Za-z0-9_.@-]", "_", slot_name) or "slot"
    return f"{safe}.{pid}"
