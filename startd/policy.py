"""The startd's decisions, as pure functions of ads, slot status and `now`.

- what a fetch hook's output means (no work, a job, or bad output);
- whether a fetched job is accepted, preempts the running one, or is rejected;
- what the policy expressions say about a running job (suspend, continue, vacate);
- when a slot fetches next (FetchWorkDelay, FETCH_WORK_MIN_INTERVAL, one
  outstanding fetch, a fetch at once when a job ends on a claim).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import classad2

from fetchwork.config import ads
from fetchwork.config.matching import mismatch
from fetchwork.errors import AdError
from fetchwork.startd.states import Activity, SlotStatus, State

# HTCondor's delay when FetchWorkDelay is undefined or not a number.
DEFAULT_FETCH_DELAY_S = 300.0


# -- fetch hook output -----------------------------------------------------

@dataclass(frozen=True)
class Fetched:
    """What one fetch produced: nothing, a job ad, or output that must be rejected."""

    job_ad: classad2.ClassAd | None = None
    bad_reason: str | None = None

    @property
    def found_work(self) -> bool:
        return self.job_ad is not None and self.bad_reason is None

    @property
    def empty(self) -> bool:
        return self.job_ad is None and self.bad_reason is None


def read_fetch_output(stdout: str, *, failure: str | None = None,
                      output_too_large: bool = False) -> Fetched:
    """Interpret a fetch hook's stdout. Its exit status is ignored, as the text says.

    `failure` says why the hook did not run to its end (refused, timed out,
    crashed in-process): no work, unless it printed something, which is then
    bad output.
    """
    if output_too_large:
        return Fetched(bad_reason="output over the hook output limit")
    if not stdout.strip():
        return Fetched()
    if failure is not None:
        return Fetched(bad_reason=f"hook did not finish ({failure})")
    try:
        job_ad = ads.parse_ad(stdout, "fetch hook output")
    except AdError as exc:
        return Fetched(bad_reason=f"not a ClassAd: {exc}")
    if "Cmd" not in job_ad:
        return Fetched(job_ad=job_ad, bad_reason="the job ad has no Cmd")
    return Fetched(job_ad=job_ad)


# -- accept, preempt or reject ---------------------------------------------

class Verdict(enum.Enum):
    ACCEPT = "accept"      # a new claim, or the slot's idle claim reused
    PREEMPT = "preempt"    # accepted; the running job is evicted first
    REJECT = "reject"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    rank: float = 0.0

    @property
    def reply(self) -> str:
        """The reply hook's argument."""
        return "reject" if self.verdict is Verdict.REJECT else "accept"


def job_rank(slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd) -> float:
    """The slot's RANK of the job (MY = slot, TARGET = job); not a number counts as 0."""
    try:
        value = ads.evaluate_attr(slot_ad, "Rank", job_ad)
    except AdError:
        return 0.0
    number = ads.as_number(value, 0.0)
    return 0.0 if number is None or math.isnan(number) else number


def decide(status: SlotStatus, slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd,
           current_rank: float | None) -> Decision:
    """What the slot does with a fetched job (`current_rank`: the running job's RANK)."""
    pair = status.pair
    idle_claim = pair == (State.CLAIMED, Activity.IDLE)
    running = pair in ((State.CLAIMED, Activity.BUSY), (State.CLAIMED, Activity.SUSPENDED))
    if pair != (State.UNCLAIMED, Activity.IDLE) and not idle_claim and not running:
        return Decision(Verdict.REJECT, f"slot is unavailable ({status})")
    reason = mismatch(slot_ad, job_ad)
    rank = job_rank(slot_ad, job_ad)
    if reason is not None:
        return Decision(Verdict.REJECT, reason, rank)
    if not running:
        # Unclaimed: a new claim. Claimed/Idle: the claim is reused for the next
        # job, as HTCondor does after a fetched job completes.
        return Decision(Verdict.ACCEPT, "slot is available", rank)
    current = current_rank if current_rank is not None else 0.0
    if rank > current:
        return Decision(Verdict.PREEMPT, f"RANK {rank:g} beats the running job's {current:g}",
                        rank)
    return Decision(Verdict.REJECT, f"RANK {rank:g} does not beat the running job's {current:g}",
                    rank)


def start_is_false(slot_ad: classad2.ClassAd) -> bool:
    """HTCondor's IS_OWNER: START evaluates to false without any job (`START =?= false`)."""
    try:
        value = ads.evaluate_attr(slot_ad, "Start", None)
    except AdError:
        return False
    return value is False


# -- a running job: SUSPEND, CONTINUE, PREEMPT -------------------------------

@dataclass(frozen=True)
class RunningPolicy:
    """HTCondor's policy expressions for a claimed slot (MY = slot, TARGET = job)."""

    want_suspend: str = "false"
    suspend: str = "false"
    continue_: str = "true"
    preempt: str = "false"


class RunAction(enum.Enum):
    SUSPEND = "suspend"
    CONTINUE = "continue"
    VACATE = "vacate"


def _true(text: str, slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd) -> bool:
    try:
        return ads.as_bool(ads.evaluate(text, slot_ad, job_ad))
    except AdError:
        return False


def running_action(status: SlotStatus, slot_ad: classad2.ClassAd, job_ad: classad2.ClassAd,
                   rules: RunningPolicy) -> RunAction | None:
    """What HTCondor's startd does with the running job now, or None.

    Claimed/Busy: SUSPEND (only when WANT_SUSPEND) suspends, else PREEMPT
    vacates. Claimed/Suspended: CONTINUE resumes, else PREEMPT vacates.
    Undefined counts as false.
    """
    if status.state is not State.CLAIMED:
        return None
    if status.activity is Activity.BUSY:
        if _true(rules.want_suspend, slot_ad, job_ad) and _true(rules.suspend, slot_ad, job_ad):
            return RunAction.SUSPEND
    elif status.activity is Activity.SUSPENDED:
        if _true(rules.continue_, slot_ad, job_ad):
            return RunAction.CONTINUE
    else:
        return None
    return RunAction.VACATE if _true(rules.preempt, slot_ad, job_ad) else None


# -- when to fetch ---------------------------------------------------------

def fetch_delay_s(expr: str | classad2.ExprTree, slot_ad: classad2.ClassAd,
                  job_ad: classad2.ClassAd | None) -> tuple[float, str | None]:
    """FetchWorkDelay with MY = slot, TARGET = current job; (seconds, problem or None).

    Anything but a number gives HTCondor's default of 300 s and a problem text.
    """
    try:
        value = ads.evaluate(expr, slot_ad, job_ad)
    except AdError as exc:
        return DEFAULT_FETCH_DELAY_S, str(exc)
    number = ads.as_number(value)
    if isinstance(value, bool) or number is None or math.isnan(number):
        return DEFAULT_FETCH_DELAY_S, f"FetchWorkDelay is not a number ({value!r})"
    return number, None


@dataclass
class FetchClock:
    """The fetch bookkeeping of one slot (monotonic seconds)."""

    outstanding: bool = False
    last_end_at: float | None = None
    last_found_work: bool = False   # the last fetch brought a job that was accepted
    last_empty: bool = False        # the last fetch printed nothing at all
    due_now: bool = False           # a job just ended on a claim

    def started(self) -> None:
        self.outstanding = True
        self.due_now = False

    def finished(self, now: float, found_work: bool, empty: bool = False) -> None:
        self.outstanding = False
        self.last_end_at = now
        self.last_found_work = found_work
        self.last_empty = empty


def may_fetch(status: SlotStatus, start_false: bool) -> bool:
    """Unclaimed or Claimed (not Preempting, not Owner), and START not false."""
    return status.state in (State.UNCLAIMED, State.CLAIMED) and not start_false


def fetch_due_at(clock: FetchClock, delay_s: float, min_interval_s: float) -> float | None:
    """When the next fetch is due (monotonic), or None while one is outstanding.

    The delay counts from the end of the previous fetch; a slot that never
    fetched, or whose job just ended on a claim, is due at once. After a fetch
    that found nothing the gap is at least `min_interval_s`, so a hook that
    answers "no work" instantly cannot make the slot spin.
    """
    if clock.outstanding:
        return None
    if clock.last_end_at is None or clock.due_now:
        return -math.inf
    gap = delay_s if clock.last_found_work else max(delay_s, min_interval_s)
    return clock.last_end_at + max(gap, 0.0)
