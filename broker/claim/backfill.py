"""The claim's backfill check: may this candidate go to this slot now?

The quiet claim (claim_quiet.lua) takes a job at or before the reserved
one itself, with no read of its own. Otherwise a claim reads the leader's
reservation (the pool's `backfill` key, through read_backfill.lua: none once
its job is no longer idle, the rule both steps share in reservation.lua) in
its first round trip, with the head of the idle set; `reservation_of`
decodes it once per claim and `verdict` applies plan.decide to each
candidate: a
job at or before the reserved one in the idle order always may; a lower job
may when it does not delay the reservation (another machine, the window, or
what the reservation leaves spare), and never with BACKFILL off. A job the
claim offers from the soft set (BLOCKED by a soft PS limit) counts as lower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from fetchwork.broker.backfill.plan import Reservation, Verdict, decide, from_record
from fetchwork.broker.backfill.pool import machine_of, waiting_of
from fetchwork.broker.store import codec

if TYPE_CHECKING:
    from fetchwork.config.loader import Config

Row = TypeVar("Row", bound=tuple[Any, float])


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

    def offerable(self, rows: Sequence[Row], reservation: Reservation | None,
                  last_resort: bool = False) -> list[Row]:
        """The (member, idle score) rows worth reading: with BACKFILL off, none below the
        reserved job (nor any soft-set job) may start, so their ads are not read."""
        if self.backfill or reservation is None:
            return list(rows)
        if last_resort:
            return []
        return [row for row in rows if row[1] <= reservation.order]

    def all_held_back(self, order: float, raw: bytes | None) -> bool:
        """Whether every idle job after idle score `order` must wait (BACKFILL off and a
        reservation before it): the scan stops there."""
        if self.backfill:
            return False
        reservation = self.reservation_of(raw)
        return reservation is not None and order >= reservation.order

    def verdict(self, job_id: str, data: Mapping[str, Any], order: float | None, slot: str,
                reservation: Reservation | None, now: float) -> Verdict:
        """Whether job `job_id` (idle score `order`; None for a soft-set job) may go to
        the slot named `slot` now."""
        if reservation is None:
            return Verdict.AHEAD
        job = waiting_of(job_id, data, math.inf if order is None else order,
                         self.default_walltime_s)
        return decide(job, machine_of(slot), reservation, now, self.backfill)
