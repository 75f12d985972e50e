"""Job templates: defaults, a requirement with its reason, and template chains.

A job names its template with `JobTemplate`; a job with none uses `Default`
when JOB_TEMPLATE_NAMES defines it; an unknown name fails the job. After the
submission filters, the template (as the job then names it) gives each
attribute the job did not set its `JOB_TEMPLATE_<T>_DEFAULT_<Attr>` value,
then its `JOB_TEMPLATE_<T>_REQUIREMENTS` must be true over the job ad, else
the job fails with `JOB_TEMPLATE_<T>_REQUIREMENTS_REASON`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import classad2

from fetchwork.config.ads import EXPR_KEY, as_bool, evaluate, from_dict, parse_expr, unparse
from fetchwork.config.convert import to_list
from fetchwork.config.loader import Config
from fetchwork.errors import AdError, ConfigError

TEMPLATE_ATTR = "JobTemplate"
DEFAULT_TEMPLATE = "Default"


@dataclass(frozen=True)
class JobTemplate:
    name: str
    # (attribute, value in to_dict form) pairs
    defaults: tuple[tuple[str, Any], ...] = ()
    requirements: str | None = None
    reason: str | None = None
    submit_filters: tuple[str, ...] = ()
    activation_filters: tuple[str, ...] = ()


def knob(template: str, suffix: str) -> str:
    return f"JOB_TEMPLATE_{template}_{suffix}"


def _stored(value: Any) -> Any:
    """A parsed expression in to_dict form (literals stay plain values)."""
    if isinstance(value, classad2.ExprTree):
        return {EXPR_KEY: unparse(value)}
    return value


def _located(config: Config, name: str, message: str) -> ConfigError:
    where = config.where(name)
    return ConfigError(message, where.source if where else None, where.line if where else None)


def _defaults(config: Config, template: str) -> tuple[tuple[str, Any], ...]:
    prefix = knob(template, "DEFAULT_").lower()
    found = []
    for definition, value in config.items():
        if definition.name.lower().startswith(prefix) and len(definition.name) > len(prefix):
            attr = definition.name[len(prefix):]
            try:
                found.append((attr, _stored(parse_expr(value, source=definition.name))))
            except AdError as exc:
                raise _located(config, definition.name, f"{definition.name}: {exc}") from exc
    return tuple(found)


def _reason(config: Config, template: str) -> str | None:
    text = (config.get(knob(template, "REQUIREMENTS_REASON")) or "").strip()
    if not text:
        return None
    try:
        value = parse_expr(text)
    except AdError:
        return text
    return value if isinstance(value, str) else text


def load_template(config: Config, name: str) -> JobTemplate:
    """Template `name` as the configuration defines it (ConfigError naming the knob)."""
    requirements = (config.get(knob(name, "REQUIREMENTS")) or "").strip() or None
    if requirements is not None:
        try:
            parse_expr(requirements)
        except AdError as exc:
            raise _located(config, knob(name, "REQUIREMENTS"),
                           f"{knob(name, 'REQUIREMENTS')}: {exc}") from exc
    return JobTemplate(
        name=name,
        defaults=_defaults(config, name),
        requirements=requirements,
        reason=_reason(config, name),
        submit_filters=tuple(to_list(config.get(knob(name, "SUBMIT_FILTER_NAMES")) or "")),
        activation_filters=tuple(
            to_list(config.get(knob(name, "ACTIVATION_FILTER_NAMES")) or "")),
    )


def load_templates(config: Config) -> dict[str, JobTemplate]:
    """Every template of JOB_TEMPLATE_NAMES, by lower-case name."""
    return {name.lower(): load_template(config, name)
            for name in config.get_list("JOB_TEMPLATE_NAMES")}


def _get(ad: Mapping[str, Any], name: str) -> Any:
    low = name.lower()
    return next((value for key, value in ad.items() if key.lower() == low), None)


def chosen_template(ad: Mapping[str, Any], templates: Mapping[str, JobTemplate]
                    ) -> tuple[JobTemplate | None, str | None]:
    """(the job's template or None, None) or (None, why the job fails)."""
    named = _get(ad, TEMPLATE_ATTR)
    if named is None:
        return templates.get(DEFAULT_TEMPLATE.lower()), None
    if not isinstance(named, str) or named.lower() not in templates:
        known = ", ".join(t.name for t in templates.values()) or "none"
        return None, f"unknown job template {named!r} (JOB_TEMPLATE_NAMES: {known})"
    return templates[named.lower()], None


def apply_template(ad: Mapping[str, Any], template: JobTemplate,
                   broker_defaults: Mapping[str, Any] | None = None
                   ) -> tuple[dict[str, Any], str | None]:
    """The ad with the template's defaults, and None, or the reason its requirements fail.
    An attribute holding the value the broker itself gives a job that did not set it
    (`broker_defaults`: JobPrio 0, ...) counts as not set."""
    new = dict(ad)
    defaulted = {name.lower(): value for name, value in (broker_defaults or {}).items()}
    present = {name.lower() for name, value in new.items()
               if name.lower() not in defaulted or defaulted[name.lower()] != value}
    for attr, value in template.defaults:
        if attr.lower() not in present:
            for name in [name for name in new if name.lower() == attr.lower()]:
                del new[name]
            new[attr] = value
            present.add(attr.lower())
    # JobTemplate in its canonical spelling (claim.lua reads it by that name).
    named = _get(new, TEMPLATE_ATTR)
    for name in [name for name in new if name.lower() == TEMPLATE_ATTR.lower()]:
        del new[name]
    new[TEMPLATE_ATTR] = named if named is not None else template.name
    if template.requirements is None:
        return new, None
    try:
        job = from_dict(new)
        met = as_bool(evaluate(template.requirements, job))
    except AdError:
        met = False
    if met:
        return new, None
    why = template.reason or f"its requirements ({template.requirements}) are not met"
    return new, f"job template {template.name} refused the job: {why}"
