"""The decisions around one job's chains: admission at submission, activation at a claim.

Admission: the template the job names runs its submission chain, then the
cluster-wide chain runs, then the template the job names *now* (the filters
may have changed `JobTemplate`) applies its defaults and requirements. A
failure anywhere reverts every filter that ran, in reverse order. Activation:
the template's chain, then the cluster-wide one, for one candidate slot.
Filters are called through a `Call`, so these are tested with real programs
and with plain functions alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .chain import ActivationResult, Call, revert, run_activation_chain, run_submission_chain
from .runner import Facts
from .settings import FilterSettings
from .templates import apply_template, chosen_template


@dataclass
class Admission:
    ok: bool
    ad: dict[str, Any]
    reason: str | None = None  # RemoveReason when not ok


def admit(ad: Mapping[str, Any], settings: FilterSettings, call: Call,
          broker_defaults: Mapping[str, Any] | None = None) -> Admission:
    """Run the submission chains and the template over one submitted job ad
    (`broker_defaults`: see templates.apply_template)."""
    first, _unknown = chosen_template(ad, settings.templates)
    result = run_submission_chain(settings.submission_specs(first), ad, call)
    if not result.ok:
        revert(result.ran, call)
        return Admission(False, result.ad, result.reason)
    template, why = chosen_template(result.ad, settings.templates)
    new_ad = result.ad
    if why is None and template is not None:
        new_ad, why = apply_template(result.ad, template, broker_defaults)
    if why is not None:
        revert(result.ran, call)
        return Admission(False, new_ad, why)
    return Admission(True, new_ad)


def activation_chain_for(ad: Mapping[str, Any], settings: FilterSettings) -> list[Any]:
    """The activation filters of a job: its template's chain, then the cluster-wide one."""
    template, _why = chosen_template(ad, settings.templates)
    return settings.activation_specs(template)


def activate(ad: Mapping[str, Any], settings: FilterSettings, call: Call, facts: Facts,
             now_s: float) -> ActivationResult:
    """Decide whether the job may start on the slot `facts` describes; the caller settles
    the job, then reverts `result.to_revert`."""
    return run_activation_chain(activation_chain_for(ad, settings), ad, call, facts, now_s,
                                settings.default_hold_s)
