"""The claim side of activation: what a claim reads and decides, as pure functions.

The leader publishes a summary of its filter configuration in the pool's
`filters` hash; a claim reads it in the same round trip as its first idle
batch, with the reservation of its slot and the lowest entries of the
blocks set. From these it decides which idle jobs it may offer to
claim.lua (which checks the same again, atomically), and whether a picked
job needs its activation chain (then the claim waits for the leader's
verdict, at most the summary's `wait_ms`).

Blocks (activation code 1) are kept by priority group: the idle score is
-JobPrio * PRIO_SCALE + sequence, so a job's group is round(score /
PRIO_SCALE) = -JobPrio, and "equal or lower JobPrio" is "group at or above".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fetchwork.broker.store.states import PRIO_SCALE

from .settings import FilterSettings
from .templates import TEMPLATE_ATTR

# Fields of the pool's filters hash.
SUBMIT_FIELD, ACTIVATE_FIELD = "submit", "activate"
TEMPLATES_FIELD, WAIT_FIELD = "templates", "wait_ms"
SUMMARY_FIELDS = (SUBMIT_FIELD, ACTIVATE_FIELD, TEMPLATES_FIELD, WAIT_FIELD)
# Beyond the chain's own timeouts, what a claim allows for the round trips.
WAIT_MARGIN_S = 1.0
# Blocks a claim reads (the lowest groups first).
BLOCKS_READ = 16
# Job attributes of activation.
ACTIVATE_AFTER = "FetchworkActivateAfter"  # ms; the job is not re-evaluated before
RESERVED_SLOT = "FetchworkReservedSlot"


@dataclass(frozen=True)
class Summary:
    """What claims and submissions need to know of the leader's filter configuration."""

    submit: bool = False
    activate: bool = False
    templates: frozenset[str] = frozenset()
    wait_ms: int = 0

    @property
    def any_activation(self) -> bool:
        return self.activate or bool(self.templates)

    def fields(self) -> dict[str, str]:
        return {SUBMIT_FIELD: "1" if self.submit else "",
                ACTIVATE_FIELD: "1" if self.activate else "",
                TEMPLATES_FIELD: " ".join(sorted(self.templates)),
                WAIT_FIELD: str(self.wait_ms)}

    @classmethod
    def from_fields(cls, values: Sequence[bytes | str | None]) -> Summary:
        """From HMGET of SUMMARY_FIELDS (missing fields: nothing configured)."""
        text = [v.decode() if isinstance(v, bytes) else (v or "") for v in values]
        submit, activate, templates, wait = (text + ["", "", "", ""])[:4]
        return cls(submit == "1", activate == "1", frozenset(templates.split()),
                   int(wait) if wait.isdigit() else 0)


def summary_of(settings: FilterSettings) -> Summary:
    chain = settings.longest_activation_chain()
    wait_s = settings.activation_timeout_s * chain + WAIT_MARGIN_S if chain else 0.0
    return Summary(submit=settings.submission_on, activate=bool(settings.activation_chain),
                   templates=frozenset(settings.activation_templates()),
                   wait_ms=int(math.ceil(wait_s * 1000)))


def _get(data: Mapping[str, Any], name: str) -> Any:
    if name in data:
        return data[name]
    low = name.lower()
    return next((v for k, v in data.items() if k.lower() == low), None)


def needs_activation(data: Mapping[str, Any], summary: Summary) -> bool:
    """Whether a job has an activation chain (the cluster-wide one, or its template's)."""
    if summary.activate:
        return True
    template = _get(data, TEMPLATE_ATTR)
    return isinstance(template, str) and template.lower() in summary.templates


def group_of(order: float) -> int:
    """The priority group of an idle score (-JobPrio)."""
    return math.floor(order / PRIO_SCALE + 0.5)


@dataclass(frozen=True)
class ClaimView:
    """What one claim read about activation for its slot."""

    summary: Summary = Summary()
    reserved_job: str | None = None
    # (job id, group), lowest groups first.
    blocks: tuple[tuple[str, int], ...] = ()
    # The leader's backfill reservation, as stored (broker/claim/backfill.py reads it).
    backfill: bytes | None = None

    @property
    def quiet(self) -> bool:
        """Nothing of activation can stop this slot's claim (no activation configured,
        no reservation, no block)."""
        return (self.reserved_job is None and not self.blocks
                and not self.summary.any_activation)


def view_of(summary_values: Sequence[bytes | str | None], reserved: bytes | str | None,
            blocks: Sequence[tuple[bytes | str, float]], backfill: bytes | None = None
            ) -> ClaimView:
    """A ClaimView from the raw replies of HMGET filters, HGET reservations, ZRANGE blocks
    (and GET backfill)."""
    reserved_text = reserved.decode() if isinstance(reserved, bytes) else reserved
    return ClaimView(Summary.from_fields(summary_values), reserved_text or None,
                     tuple((m.decode() if isinstance(m, bytes) else m, int(s))
                           for m, s in blocks), backfill)


def blocked(job_id: str, order: float, view: ClaimView) -> bool:
    """Whether a block by another job of equal or higher JobPrio keeps this job back."""
    group = group_of(order)
    return any(other != job_id and other_group <= group for other, other_group in view.blocks)


def block_floor(view: ClaimView) -> int | None:
    """The lowest blocked group: from there on only blockers may still be offered."""
    return view.blocks[0][1] if view.blocks else None


def may_offer(job_id: str, data: Mapping[str, Any], order: float, view: ClaimView,
              slot: str, now_ms: float) -> bool:
    """Whether a claim by `slot` may offer this idle job to claim.lua."""
    if view.reserved_job is not None and job_id != view.reserved_job:
        return False
    reserved_for = _get(data, RESERVED_SLOT)
    if isinstance(reserved_for, str) and reserved_for and reserved_for != slot:
        return False
    after = _get(data, ACTIVATE_AFTER)
    if isinstance(after, int | float) and not isinstance(after, bool) and after > now_ms:
        return False
    return not blocked(job_id, order, view)
