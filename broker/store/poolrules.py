"""The pool's rules: what every submission is checked against, as the leader publishes them.

A pool's rules are the broker service's configuration, never a submitting
client's: the leader publishes them in the pool's `settings` hash
(keys.py), versioned, and the submit scripts (lua/stage.lua, lua/submit.lua)
check each submission against that hash. With no published rules (a pool
whose leader has not run yet) every new job waits VALIDATING until the
leader admits it against its own rules: the pool fails closed.

The rules, each with the knob it comes from (`KNOBS`):

- `filtered` (SUBMIT_FILTER_NAMES, JOB_TEMPLATE_NAMES): jobs wait VALIDATING
  for the leader's submission filters and templates;
- `max_walltime_s` / `default_walltime_s` (MAX_WALLTIME, DEFAULT_JOB_WALLTIME):
  a job asking for more wall-clock time than the cap is refused, nothing queued;
- `limits` (MAX_IDLE_JOBS_PER_USER, MAX_JOBS_PER_USER, MAXPS_..., any partition
  limit): jobs start BLOCKED until the leader's policy pass places them;
- `max_job_attrs` (SUBMIT_MAX_JOB_ATTRS): a job with more attributes of its
  own is refused;
- `events_maxlen` (BROKER_EVENTS_MAXLEN): the cap a submission trims the
  event stream to;
- `default_lease_s`, `default_exclusive` (JOB_DEFAULT_LEASE_DURATION,
  DEFAULT_JOB_EXCLUSIVE): what a job that does not say gets.

This module is the one place that spells the hash's fields and decides on a
job ad in Python (`refusal`): the leader's admission of a job that arrived
before any publication, and the submit command's early, line-naming errors.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from fetchwork.config.loader import Config
from fetchwork.errors import SubmitError

from . import calls, codec
from .states import MANAGED_ATTRS

if TYPE_CHECKING:
    from . import Store

# The knob each rule comes from (`fetchwork config` says these are the pool's).
KNOBS: dict[str, tuple[str, ...]] = {
    "filtered": ("SUBMIT_FILTER_NAMES", "JOB_TEMPLATE_NAMES"),
    "max_walltime_s": ("MAX_WALLTIME",),
    "default_walltime_s": ("DEFAULT_JOB_WALLTIME",),
    "limits": ("MAX_IDLE_JOBS_PER_USER", "MAX_IDLE_JOBS_PER_PROJECT", "MAX_JOBS_PER_USER",
               "MAXPS_SOFT", "MAXPS_HARD"),
    "max_job_attrs": ("SUBMIT_MAX_JOB_ATTRS",),
    "events_maxlen": ("BROKER_EVENTS_MAXLEN",),
    "default_lease_s": ("JOB_DEFAULT_LEASE_DURATION",),
    "default_exclusive": ("DEFAULT_JOB_EXCLUSIVE",),
}
# The knobs that are the pool's, published as written in the broker service's
# configuration (`fetchwork config` on a client shows these as the pool's): the
# rules' own, and the policy the leader applies (filters, holds, scheduling).
POOL_KNOBS = frozenset({name for names in KNOBS.values() for name in names} | {
    "ACTIVATION_FILTER_NAMES", "SUBMIT_FILTER_TIMEOUT", "ACTIVATION_FILTER_TIMEOUT",
    "ACTIVATION_FILTER_INTERVAL", "ACTIVATION_RESERVATION_TIMEOUT", "DEFAULT_HOLD_DURATION",
    "POLICY_INTERVAL", "QOS_NAMES", "FAIRSHARE_WINDOW", "FAIRSHARE_DEPTH",
    # File transfer: the pool's cap on stored files, and how long outputs wait.
    "TRANSFER_POOL_MAX_MB", "TRANSFER_OUTPUT_LIFETIME"})
# ... and the families (MAXPS_SOFT_<PROJECT>, a filter's definition, a template's knobs).
POOL_KNOB_PREFIXES = ("MAXPS_SOFT_", "MAXPS_HARD_", "SUBMIT_FILTER_", "ACTIVATION_FILTER_",
                      "JOB_TEMPLATE_", "PRIORITY_", "QOS_", "FAIRSHARE_TARGET_")

# Fields of the settings hash besides the rules.
# (The digest and the version are written by lua/publish_rules.lua.)
VERSION, PUBLISHED_BY, PUBLISHED_AT = "version", "published_by", "published_at"
# The pool's knobs as written (JSON object: name -> expanded value).
KNOBS_FIELD = "knobs"


def is_pool_knob(name: str) -> bool:
    """Whether knob `name` is the pool's (its broker service's), not a client's."""
    upper = name.upper()
    return upper in POOL_KNOBS or upper.startswith(POOL_KNOB_PREFIXES)
# The BlockedReason of a job the limits keep BLOCKED until the leader's first policy
# pass (the scheduling policy's own words, broker/scheduling/limits.py).
WAITING_REASON = "waiting for the scheduling policy's first look"
BLOCKED_REASON = "blocked_reason"

# Attributes a job's own count leaves out (SUBMIT_MAX_JOB_ATTRS counts what the
# submitter wrote): the ones the broker manages, and the ones it adds to every job.
ADDED_ATTRS = ("JobPrio", "JobLeaseDuration", "Rerunnable", "Exclusive", "TotalSubmitProcs",
               "FetchworkAutocluster", "BlockedReason", "FetchworkWaitingOn", "FetchworkHold")
UNCOUNTED_ATTRS = frozenset(MANAGED_ATTRS | {name.lower() for name in ADDED_ATTRS})


@dataclass(frozen=True)
class PoolRules:
    """Everything a submission is checked against; published by the pool's leader
    (no defaults here: the broker service's configuration gives every value)."""

    filtered: bool
    max_walltime_s: float
    default_walltime_s: float
    limits: bool
    max_job_attrs: int
    events_maxlen: int
    default_lease_s: float
    default_exclusive: bool

    def fields(self) -> dict[str, str]:
        """The settings hash's rule fields (what stage.lua and submit.lua read)."""
        out: dict[str, str] = {}
        for name, value in asdict(self).items():
            if isinstance(value, bool):
                out[name] = "1" if value else ""
            elif isinstance(value, float):
                out[name] = f"{value:g}" if value != int(value) else str(int(value))
            else:
                out[name] = str(value)
        out[BLOCKED_REASON] = WAITING_REASON
        return out

    def digest(self, knobs: Mapping[str, str] | None = None) -> str:
        """What tells two publications of the same rules (and `knobs`) from a change."""
        text = "\n".join(f"{name}={value}" for name, value in sorted(self.fields().items()))
        text += "\n" + json.dumps(dict(knobs or {}), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Published:
    """The rules as found in a pool's settings hash, with who published them."""

    rules: PoolRules
    version: int
    published_by: str
    published_at_s: float
    # The pool's knobs as its broker service's configuration writes them.
    knobs: dict[str, str] = field(default_factory=dict)


def _parse(kind: Any, text: str) -> Any:
    if kind is bool or kind == "bool":
        return text == "1"
    if kind is int or kind == "int":
        return int(text)
    return float(text)


def from_fields(raw: Mapping[Any, Any]) -> Published | None:
    """The published rules from HGETALL of the settings hash; None when nothing (or
    nothing readable, or a rule missing) was published: then the pool fails closed."""
    data = {codec.text(name): codec.text(value) for name, value in raw.items()}
    version = data.get(VERSION, "")
    if not version.isdigit():
        return None
    values: dict[str, Any] = {}
    try:
        for spec in fields(PoolRules):
            if spec.name not in data:
                return None
            values[spec.name] = _parse(spec.type, data[spec.name])
        published_at_s = float(data.get(PUBLISHED_AT) or 0)
        knobs = json.loads(data.get(KNOBS_FIELD) or "{}")
    except ValueError:
        return None
    if not isinstance(knobs, dict):
        knobs = {}
    return Published(PoolRules(**values), int(version), data.get(PUBLISHED_BY, ""),
                     published_at_s, {str(name): str(value) for name, value in knobs.items()})


# What a submission reads of the settings hash (HMGET): the rules, not the knobs.
RULE_FIELDS = (VERSION, PUBLISHED_BY, PUBLISHED_AT,
               *(spec.name for spec in fields(PoolRules)))


def from_rule_values(values: list[Any]) -> Published | None:
    """from_fields of an HMGET of RULE_FIELDS (None where absent)."""
    return from_fields({name: value for name, value in zip(RULE_FIELDS, values, strict=True)
                        if value is not None})


def read(store: Store) -> Published | None:
    """The pool's published rules, or None before its leader published any."""
    return from_fields(store.client.hgetall(store.keys.settings))


def published_knob(store: Store, name: str) -> str:
    """A pool knob's value as the leader published it, else the packaged default (never
    the reading client's own configuration)."""
    published = read(store)
    if published is not None and name in published.knobs:
        return published.knobs[name]
    return Config.load(environ={}, config_file=os.devnull).require(name)


TRANSFER_CAP_KNOB = "TRANSFER_POOL_MAX_MB"


def transfer_cap_bytes(store: Store) -> int:
    """The pool's cap on the bytes of transferred files it holds (0: none)."""
    return max(0, int(float(published_knob(store, TRANSFER_CAP_KNOB)))) * 1024 * 1024


def transfer_cap_refusal(held: int, new: int, cap_bytes: int) -> SubmitError:
    """The error of a submission whose files would take the pool past its cap."""
    return SubmitError(
        f"the pool holds {held / 1048576:.1f} MB of transferred files and these add "
        f"{new / 1048576:.1f} MB, more than {TRANSFER_CAP_KNOB} = {cap_bytes // 1048576} MB "
        "allows; nothing was queued (fetch or remove jobs' outputs, or ask the pool's "
        "administrator)")


def publish(store: Store, rules: PoolRules, knobs: Mapping[str, str],
            summary: Mapping[str, str], replica: str, now_s: float) -> tuple[int, bool]:
    """Publish `rules` and the pool's `knobs` (and the filter summary claims read,
    filters/gate.py) as the pool's, in one step; (version in force, whether this call
    changed it)."""
    fields = {**rules.fields(), KNOBS_FIELD: json.dumps(dict(knobs), sort_keys=True)}
    return calls.publish_rules(store, rules=fields, digest=rules.digest(knobs),
                               summary=summary, replica=replica, now_s=now_s)


# -- decisions on one job ad (the leader's admission, the submit command) ---------------

def _get(ad: Mapping[str, Any], name: str) -> Any:
    if name in ad:
        return ad[name]
    low = name.lower()
    return next((value for key, value in ad.items() if key.lower() == low), None)


def walltime_s(ad: Mapping[str, Any], rules: PoolRules) -> tuple[float, bool]:
    """(the job's walltime, whether it set AllowedJobDuration): a positive number of
    seconds, else DEFAULT_JOB_WALLTIME (lua/stage.lua decides the same)."""
    value = _get(ad, "AllowedJobDuration")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return rules.default_walltime_s, False
    return float(value), True


def counted_attrs(ad: Mapping[str, Any]) -> int:
    """The attributes of a job ad SUBMIT_MAX_JOB_ATTRS counts."""
    return sum(1 for name in ad if name.lower() not in UNCOUNTED_ATTRS and name[:1] != "#")


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def walltime_refusal(ad: Mapping[str, Any], rules: PoolRules) -> str | None:
    """Why the pool's MAX_WALLTIME refuses the job, or None (lua/stage.lua says the same)."""
    cap = rules.max_walltime_s
    asked, own = walltime_s(ad, rules)
    if not cap or asked <= cap:
        return None
    source = "AllowedJobDuration" if own else "the pool's DEFAULT_JOB_WALLTIME"
    return (f"the job asks for {_number(asked)} s of wall-clock time ({source}), more than "
            f"the pool's MAX_WALLTIME = {_number(cap)} s")


def attrs_refusal(count: int, rules: PoolRules) -> str | None:
    """Why a job with `count` attributes of its own is refused, or None."""
    if count <= rules.max_job_attrs:
        return None
    return (f"the job has {count} attributes, more than the pool's "
            f"SUBMIT_MAX_JOB_ATTRS = {rules.max_job_attrs}")


def refusal(ad: Mapping[str, Any], rules: PoolRules) -> str | None:
    """Why the pool's rules refuse a submitted job ad, or None when they accept it."""
    return walltime_refusal(ad, rules) or attrs_refusal(counted_attrs(ad), rules)
