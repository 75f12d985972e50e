"""The filter and template knobs, read once into `FilterSettings`.

`SUBMIT_FILTER_NAMES` / `ACTIVATION_FILTER_NAMES` list the cluster-wide
chains; each name N is defined by `<KIND>_FILTER_<N>` (a program or
`python:package.module:function`), with optional `_ARGS` (split as hook
`_ARGS` are). Template chains name filters defined the same way, and run
before the cluster-wide chain. A name without its definition, or a
DEFAULT_HOLD_DURATION outside 60..604800, is a ConfigError: the broker
refuses to start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fetchwork.broker.store.holdtime import check_default_hold_s
from fetchwork.config.argsyntax import parse_hook_args
from fetchwork.config.loader import Config
from fetchwork.errors import ArgSyntaxError, ConfigError

from .codes import ACTIVATION, SUBMISSION
from .runner import FilterSpec
from .templates import JobTemplate, load_templates

_PREFIX = {SUBMISSION: "SUBMIT_FILTER", ACTIVATION: "ACTIVATION_FILTER"}


@dataclass(frozen=True)
class FilterSettings:
    # Knob values (no defaults here: defaults.conf has them).
    default_hold_s: int
    activation_interval_s: float
    activation_timeout_s: float
    reservation_timeout_s: float
    submission: dict[str, FilterSpec] = field(default_factory=dict)
    activation: dict[str, FilterSpec] = field(default_factory=dict)
    submit_chain: tuple[str, ...] = ()
    activation_chain: tuple[str, ...] = ()
    templates: dict[str, JobTemplate] = field(default_factory=dict)

    @property
    def submission_on(self) -> bool:
        """Whether submissions go through the leader (a chain or a template exists)."""
        return bool(self.submit_chain or self.templates)

    def submission_specs(self, template: JobTemplate | None) -> list[FilterSpec]:
        """The template's submission chain, then the cluster-wide one."""
        names = (template.submit_filters if template else ()) + self.submit_chain
        return [self.submission[name.upper()] for name in names]

    def activation_specs(self, template: JobTemplate | None) -> list[FilterSpec]:
        """The template's activation chain, then the cluster-wide one."""
        names = (template.activation_filters if template else ()) + self.activation_chain
        return [self.activation[name.upper()] for name in names]

    def activation_templates(self) -> list[str]:
        """Lower-case names of the templates with an activation chain."""
        return sorted(key for key, t in self.templates.items() if t.activation_filters)

    def longest_activation_chain(self) -> int:
        extra = max((len(t.activation_filters) for t in self.templates.values()), default=0)
        return len(self.activation_chain) + extra


def _located(config: Config, name: str, message: str) -> ConfigError:
    where = config.where(name)
    return ConfigError(message, where.source if where else None, where.line if where else None)


def load_spec(config: Config, kind: str, name: str, used_by: str,
              timeout_s: float) -> FilterSpec:
    """`<KIND>_FILTER_<NAME>` with its args; ConfigError naming `used_by` when undefined."""
    knob = f"{_PREFIX[kind]}_{name.upper()}"
    value = (config.get(knob) or "").strip()
    if not value:
        raise _located(config, used_by, f"{used_by} names {kind} filter {name}, but {knob} "
                       "is not defined (a program path or python:package.module:function)")
    args_knob = knob + "_ARGS"
    try:
        args = tuple(parse_hook_args(config.get(args_knob)))
    except ArgSyntaxError as exc:
        raise _located(config, args_knob, f"{args_knob}: {exc}") from exc
    return FilterSpec(name=name.upper(), kind=kind, value=value, args=args,
                      timeout_s=timeout_s)


def load_settings(config: Config) -> FilterSettings:
    """Read and check every filter and template knob."""
    templates = load_templates(config)
    timeouts_s = {SUBMISSION: config.get_duration_s("SUBMIT_FILTER_TIMEOUT"),
                  ACTIVATION: config.get_duration_s("ACTIVATION_FILTER_TIMEOUT")}
    specs: dict[str, dict[str, FilterSpec]] = {SUBMISSION: {}, ACTIVATION: {}}
    chains: dict[str, tuple[str, ...]] = {}
    for kind, prefix in _PREFIX.items():
        names_knob = f"{prefix}_NAMES"
        chains[kind] = tuple(name.upper() for name in config.get_list(names_knob))
        wanted = [(name, names_knob) for name in chains[kind]]
        for template in templates.values():
            chain = template.submit_filters if kind == SUBMISSION else template.activation_filters
            wanted += [(name, f"JOB_TEMPLATE_{template.name}_{names_knob}") for name in chain]
        for name, used_by in wanted:
            if name.upper() not in specs[kind]:
                specs[kind][name.upper()] = load_spec(config, kind, name, used_by,
                                                      timeouts_s[kind])
    hold = config.where("DEFAULT_HOLD_DURATION")
    default_hold_s = check_default_hold_s(config.get_float("DEFAULT_HOLD_DURATION"),
                                          hold.source if hold else None,
                                          hold.line if hold else None)
    return FilterSettings(
        submission=specs[SUBMISSION], activation=specs[ACTIVATION],
        submit_chain=chains[SUBMISSION], activation_chain=chains[ACTIVATION],
        templates=templates, default_hold_s=default_hold_s,
        activation_interval_s=config.get_duration_s("ACTIVATION_FILTER_INTERVAL"),
        activation_timeout_s=timeouts_s[ACTIVATION],
        reservation_timeout_s=config.get_duration_s("ACTIVATION_RESERVATION_TIMEOUT"))
