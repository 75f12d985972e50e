"""The claim's backfill check: may this candidate go to this slot now?

A claim reads the leader's reservation (the pool's `backfill` key) in its
first round trip, with the head of the idle set; `reservation_of` decodes
it once per claim and `verdict` applies plan.decide to each candidate: a
job at or before the reserved one in the idle order always may; a lower job
may when it does not delay the reservation (another machine, the window, or
what the reservation leaves spare), and never with BACKFILL off. A job the
claim offers from the soft set (BLOCKED by a soft PS limit) counts as lower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import codec
from .plan import Reservation, Verdict, decide, from_record
from .pool import machine_of, waiting_of

if TYPE_CHECKING:
    from fetchwork.config.loader import Config


class BackfillCheck:
    """The per-candidate check of one claimer (BACKFILL, DEFAULT_JOB_WALLTIME)."""

    def __init__(self, backfill: bool = True, default_walltime_s: float = 3600.0):
        self.backfill = backfill
        self.default_walltime_s = default_walltime_s

    @classmethod
    def from_config(cls, config: Config) -> BackfillCheck:
        return cls(config.get_bool("BACKFILL"), config.get_duration_s("DEFAULT_JOB_WALLTIME"))

    @staticmethod
    def reservation_of(raw: bytes | None) -> Reservation | None:
        """The reservation from the raw `backfill` key (None: there is none)."""
        if not raw:
            return None
        try:
            return from_record(codec.unpack(raw))
        except ValueError:
            return None

    def verdict(self, job_id: str, data: Mapping[str, Any], order: float | None, slot: str,
                reservation: Reservation | None, now: float) -> Verdict:
        """Whether job `job_id` (idle score `order`; None for a soft-set job) may go to
        the slot named `slot` now."""
        if reservation is None:
            return Verdict.AHEAD
        job = waiting_of(job_id, data, math.inf if order is None else order,
                         self.default_walltime_s)
        return decide(job, machine_of(slot), reservation, now, self.backfill)
