"""The policy knobs, read once from the configuration into `SchedulingSettings`.

`scheduling_settings(config)` is the one converter. Fixed knobs are read without
repeating their defaults (config/defaults.conf has them all, every limit and
weight 0 = off); the families named after a project, user or QOS
(`MAXPS_SOFT_<PROJECT>`, `MAXPS_HARD_<PROJECT>`, `FAIRSHARE_TARGET_<NAME>`,
`QOS_<NAME>_PRIORITY`, `QOS_<NAME>_TARGET_QUEUETIME`) are found among the
definitions in force. Names compare case-insensitively, as knob names do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from fetchwork.config import convert
from fetchwork.errors import ConfigError

if TYPE_CHECKING:
    from fetchwork.config.loader import Config

T = TypeVar("T")

SOFT_PREFIX = "MAXPS_SOFT_"
HARD_PREFIX = "MAXPS_HARD_"
FAIRSHARE_PREFIX = "FAIRSHARE_TARGET_"
# A project's hard PS limit when only its soft one is set (the SNAC row of the text).
PROJECT_HARD_FACTOR = 3.0


@dataclass(frozen=True)
class Budget:
    """The soft and hard processor-second limits of one budget (0 = no limit)."""

    soft: float
    hard: float


@dataclass(frozen=True)
class QosClass:
    """One quality of service: a base priority and a target queue time (0 = none)."""

    name: str
    priority: float
    target_queuetime_s: float


@dataclass(frozen=True)
class Weights:
    """Maui's priority weights; all 0 leaves the order to JobPrio groups and FCFS."""

    queuetime: float = 0.0
    xfactor: float = 0.0
    resource: float = 0.0
    resource_cpu: float = 0.0
    resource_memory: float = 0.0
    resource_disk: float = 0.0
    bypass: float = 0.0
    qos: float = 0.0
    fairshare: float = 0.0

    def any(self) -> bool:
        return any((self.queuetime, self.xfactor, self.resource, self.bypass, self.qos,
                    self.fairshare))


@dataclass(frozen=True)
class SchedulingSettings:
    """Every policy knob, typed. Counts and PS limits of 0 mean no limit."""

    max_idle_per_user: int = 0
    max_idle_per_project: int = 0
    max_jobs_per_user: int = 0
    maxps: Budget = Budget(0.0, 0.0)
    # Lower-case project name -> its own budget (MAXPS_SOFT_<PROJECT>).
    project_maxps: dict[str, Budget] = field(default_factory=dict)
    default_walltime_s: float = 3600.0
    max_walltime_s: float = 0.0
    interval_s: float = 5.0
    weights: Weights = Weights()
    # Lower-case QOS name -> its class.
    qos: dict[str, QosClass] = field(default_factory=dict)
    # Lower-case user or project name -> percent of the pool's CPU time.
    fairshare_targets: dict[str, float] = field(default_factory=dict)
    fairshare_window_s: float = 7 * 86400.0
    fairshare_depth: int = 7

    def limits_on(self) -> bool:
        """True when any partition limit is set (else every queued job is IDLE)."""
        return bool(self.max_idle_per_user or self.max_idle_per_project
                    or self.max_jobs_per_user or self.maxps.soft or self.maxps.hard
                    or self.project_maxps)

    def priority_on(self) -> bool:
        """True when any priority weight is set (else the order is JobPrio, then FCFS)."""
        return self.weights.any()

    def budget_of_project(self, project: str | None) -> Budget | None:
        """The project's own budget, or None when it has none (the default budget applies)."""
        if project is None:
            return None
        return self.project_maxps.get(project.lower())


def scheduling_settings(config: Config) -> SchedulingSettings:
    """The policy knobs of `config`; ConfigError naming the knob when one is malformed."""
    weights = Weights(
        queuetime=config.get_float("PRIORITY_QUEUETIME_WEIGHT"),
        xfactor=config.get_float("PRIORITY_XFACTOR_WEIGHT"),
        resource=config.get_float("PRIORITY_RESOURCE_WEIGHT"),
        resource_cpu=config.get_float("PRIORITY_RESOURCE_CPU_WEIGHT"),
        resource_memory=config.get_float("PRIORITY_RESOURCE_MEMORY_WEIGHT"),
        resource_disk=config.get_float("PRIORITY_RESOURCE_DISK_WEIGHT"),
        bypass=config.get_float("PRIORITY_BYPASS_WEIGHT"),
        qos=config.get_float("PRIORITY_QOS_WEIGHT"),
        fairshare=config.get_float("PRIORITY_FAIRSHARE_WEIGHT"),
    )
    settings = SchedulingSettings(
        max_idle_per_user=_count(config, "MAX_IDLE_JOBS_PER_USER"),
        max_idle_per_project=_count(config, "MAX_IDLE_JOBS_PER_PROJECT"),
        max_jobs_per_user=_count(config, "MAX_JOBS_PER_USER"),
        maxps=Budget(_limit(config, "MAXPS_SOFT"), _limit(config, "MAXPS_HARD")),
        project_maxps=_project_budgets(config),
        default_walltime_s=config.get_duration_s("DEFAULT_JOB_WALLTIME"),
        max_walltime_s=config.get_duration_s("MAX_WALLTIME"),
        interval_s=config.get_duration_s("POLICY_INTERVAL"),
        weights=weights,
        qos=_qos_classes(config),
        fairshare_targets=_fairshare_targets(config),
        fairshare_window_s=config.get_duration_s("FAIRSHARE_WINDOW"),
        fairshare_depth=config.get_int("FAIRSHARE_DEPTH"),
    )
    if settings.default_walltime_s <= 0:
        _fail(config, "DEFAULT_JOB_WALLTIME", problem="must be more than 0 seconds")
    if settings.fairshare_depth < 1:
        _fail(config, "FAIRSHARE_DEPTH", problem="must be at least 1")
    if settings.fairshare_window_s <= 0:
        _fail(config, "FAIRSHARE_WINDOW", problem="must be more than 0 seconds")
    return settings


def _fail(config: Config, name: str, problem: str) -> None:
    where = config.where(name)
    raise ConfigError(f"{name} {problem}", where.source if where else None,
                      where.line if where else None)


def _count(config: Config, name: str) -> int:
    value = config.get_int(name)
    if value < 0:
        _fail(config, name, problem="must be 0 (no limit) or more")
    return value


def _limit(config: Config, name: str) -> float:
    value = config.get_float(name)
    if value < 0:
        _fail(config, name, problem="must be 0 (no limit) or more")
    return value


def _optional(config: Config, name: str, convert_fn: Callable[[str], T]) -> T | None:
    """A knob of a family (its name built from a project, user or QOS), or None."""
    text = config.get(name)
    if text is None or not text.strip():
        return None
    try:
        return convert_fn(text)
    except ValueError as exc:
        where = config.where(name)
        raise ConfigError(f"{name}: {exc}", where.source if where else None,
                          where.line if where else None) from exc


def _family(config: Config, prefix: str) -> list[str]:
    """Suffixes of the knobs in force named `prefix` + something."""
    found = []
    for definition, _value in config.items():
        name = definition.name
        if name.upper().startswith(prefix) and len(name) > len(prefix):
            found.append(name[len(prefix):])
    return found


def _project_budgets(config: Config) -> dict[str, Budget]:
    budgets: dict[str, Budget] = {}
    for project in _family(config, SOFT_PREFIX):
        soft = _optional(config, SOFT_PREFIX + project, convert.to_float)
        if soft is None or soft <= 0:
            continue
        hard = _optional(config, HARD_PREFIX + project, convert.to_float)
        budgets[project.lower()] = Budget(soft, hard if hard else soft * PROJECT_HARD_FACTOR)
    for project in _family(config, HARD_PREFIX):
        hard = _optional(config, HARD_PREFIX + project, convert.to_float)
        if project.lower() not in budgets and hard:
            budgets[project.lower()] = Budget(0.0, hard)
    return budgets


def _qos_classes(config: Config) -> dict[str, QosClass]:
    classes: dict[str, QosClass] = {}
    for name in config.get_list("QOS_NAMES"):
        priority = _optional(config, f"QOS_{name}_PRIORITY", convert.to_float)
        target = _optional(config, f"QOS_{name}_TARGET_QUEUETIME", convert.to_duration_s)
        classes[name.lower()] = QosClass(name, priority or 0.0, target or 0.0)
    return classes


def _fairshare_targets(config: Config) -> dict[str, float]:
    targets: dict[str, float] = {}
    for name in _family(config, FAIRSHARE_PREFIX):
        percent = _optional(config, FAIRSHARE_PREFIX + name, convert.to_float)
        if percent is not None:
            if not 0 <= percent <= 100:
                _fail(config, FAIRSHARE_PREFIX + name, problem="must be a percentage (0 to 100)")
            targets[name.lower()] = percent
    return targets


def scheduling_in_force(config: Config) -> SchedulingSettings | None:
    """The policy of `config`, or None when every policy knob is 0 (nothing to enforce)."""
    settings = scheduling_settings(config)
    if settings.limits_on() or settings.priority_on() or settings.max_walltime_s:
        return settings
    return None
