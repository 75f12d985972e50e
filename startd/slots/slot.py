"""One slot at run time: its status, fetch clock, claim (ClaimId) and starter.

A `Slot` holds what the daemon loop needs to remember about a slot; every
status change goes through `move`, which takes the guarded edge and logs one
line (`move_untold` leaves the line for its caller to write a moment later).
"""

from __future__ import annotations

import functools
import itertools
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.config.keptad import KeptAd
from fetchwork.config.matching import is_exclusive
from fetchwork.errors import AdError
from fetchwork.startd.fetchdelay import FetchClock
from fetchwork.startd.settings import SlotHooks
from fetchwork.startd.starters.eviction import Deadlines
from fetchwork.startd.starters.process import StarterProcess
from fetchwork.startd.states import Activity, SlotStatus, State, initial_status, transition

from .partitionable import Carve
from .slotad import ClaimView, job_id_of, job_label

log = logging.getLogger(__name__)

_claim_numbers = itertools.count(1)


@dataclass
class Claim:
    """The startd's claim on a slot (HTCondor's ClaimId) for an accepted job, and the job's RANK.

    Not the broker's token (`FetchworkClaim` in the job ad): that one belongs
    to whatever the hooks speak to; the startd only passes the ad along.
    """

    claim_id: str
    job_ad: classad2.ClassAd
    rank: float
    job_started_at: float | None = None   # wall clock, from the starter's "started" event
    ended: bool = False                    # its job ran and ended (the claim may fetch again)
    # What the loop asks of the job ad several times a round (its id, label and
    # Exclusive), read once per ad: (the ad they were read from, id, label, exclusive).
    _read: tuple[classad2.ClassAd, str | None, str, bool] | None = field(
        default=None, repr=False, compare=False)
    _text: tuple[classad2.ClassAd, int, str] | None = field(default=None, repr=False,
                                                            compare=False)
    # The last ad the starter reported, as it came (a dict), until something reads it:
    # a job's exit report is seldom read. It is loaded into the claim's own ad in
    # place (a kept ad, startd/slots/jobads.py): each ClassAd made costs classad2 memory.
    _reported: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    job_exited: bool = False               # the starter reported the job's exit

    def report(self, attrs: Mapping[str, Any], exited: bool = False) -> None:
        """The starter's ad of the job (an update or its exit), made a ClassAd when read."""
        self._reported = attrs
        self.job_exited = self.job_exited or exited

    def current_ad(self) -> classad2.ClassAd:
        """The job ad as last reported (the fetched one until the starter reports)."""
        reported, self._reported = self._reported, None
        if reported is not None:
            try:
                values = ads.values_of(reported)
                if isinstance(self.job_ad, KeptAd):
                    self.job_ad.load(values)
                else:
                    self.job_ad = KeptAd(values)
            except AdError as exc:
                log.warning("job %s: the starter sent an unreadable ad: %s", self.job_id, exc)
        return self.job_ad

    def _facts(self) -> tuple[classad2.ClassAd, str | None, str, bool]:
        read = self._read
        # The job's id, label and Exclusive are the same in every ad the starter reports:
        # they are read from the last ad made, never a reason to make one.
        if read is None or read[0] is not self.job_ad:
            ad = self.job_ad
            read = self._read = (ad, job_id_of(ad), job_label(ad), is_exclusive(ad))
        return read

    @property
    def job_id(self) -> str:
        return self._facts()[2]

    def job_ad_text(self) -> str:
        """The job ad as the starter and the hooks read it, formatted once per change."""
        ad = self.current_ad()
        version = ad.version if isinstance(ad, KeptAd) else 0
        if self._text is None or self._text[0] is not ad or self._text[1] != version:
            self._text = (ad, version, ads.format_ad(ad))
        return self._text[2]

    @property
    def exclusive(self) -> bool:
        """The job's Exclusive is true (it runs alone on its machine)."""
        return self._facts()[3]

    def view(self) -> ClaimView:
        return ClaimView(job_id=self._facts()[1], rank=self.rank,
                         job_started_at=self.job_started_at)


def new_claim_id(slot_name: str, started_at: float) -> str:
    """Opaque and unique, in the spirit of HTCondor's `<addr>#<birth>#<seq>#<secret>`."""
    return f"<{slot_name}>#{int(started_at)}#{next(_claim_numbers)}#{secrets.token_hex(8)}"


@dataclass
class Slot:
    slot_id: int
    name: str
    hooks: SlotHooks
    status: SlotStatus = field(default_factory=lambda: initial_status(0.0))
    clock: FetchClock = field(default_factory=FetchClock)
    claim: Claim | None = None
    pending: Claim | None = None        # a preempting claim waiting for the slot
    starter: StarterProcess | None = None
    deadlines: Deadlines = field(default_factory=Deadlines)  # of an eviction under way
    control_sent: str | None = None        # suspend/continue sent, until the starter reports
    carve: Carve | None = None             # a dynamic slot: what it took of its p-slot

    @property
    def label(self) -> str:
        return f"slot{self.slot_id}" if self.carve is None else \
            f"slot{self.slot_id}_{self.carve.index}"

    @property
    def can_fetch(self) -> bool:
        """A fetch hook is set, this is not a dynamic slot (its p-slot fetches), and no
        starter keeps it Claimed/Idle for a job run until cancelled."""
        return (self.hooks.fetch is not None and self.carve is None
                and not (self.starter is not None and self.status.activity is Activity.IDLE))

    @property
    def running_job_ad(self) -> classad2.ClassAd | None:
        """The job ad of the job running now (FetchWorkDelay's TARGET), or None: a job
        whose exit its starter reported runs no more (a kept starter waits for the next)."""
        if self.claim is not None and self.starter is not None and not self.claim.job_exited:
            return self.claim.current_ad()
        return None

    def is_in(self, state: State, *activities: Activity) -> bool:
        return self.status.state is state and (not activities
                                               or self.status.activity in activities)

    def move(self, state: State, activity: Activity, now: float, why: str) -> None:
        """Take the edge to (state, activity); SlotStateError when it does not exist."""
        self.move_untold(state, activity, now, why)()

    def move_untold(self, state: State, activity: Activity, now: float,
                    why: str) -> Callable[[], None]:
        """`move`, with its log line written when the returned call is made (a job's
        start tells it once the starter has the job, off the start's path)."""
        before = self.status
        self.status = transition(before, state, activity, now)
        return functools.partial(log.info, "%s: %s -> %s (%s)", self.label, before,
                                 self.status, why)
