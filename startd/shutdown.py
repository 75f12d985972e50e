"""The startd's shutdown timeline, as a small pure object (times are monotonic seconds).

Graceful (SIGTERM, SIGINT): claims are evicted and jobs vacated, so exit hooks
run; when STARTD_SHUTDOWN_GRACE is over, starters still alive are told to kill
their jobs, and `KILL_WAIT_S` later they get SIGKILL and the startd exits.
Fast (SIGQUIT): the same with kill at once and STARTD_FAST_SHUTDOWN_GRACE.
A fast request during a graceful shutdown shortens it; never the reverse.
Then, its claims gone, the startd withdraws its slots (`Withdrawal`) and exits.
"""

from __future__ import annotations

from dataclasses import dataclass

# Seconds between telling late starters to kill their jobs and SIGKILL.
KILL_WAIT_S = 2.0


@dataclass
class ShutdownPlan:
    fast: bool
    deadline: float
    hard_stop_at: float | None = None

    @classmethod
    def begin(cls, fast: bool, now: float, grace_s: float,
              previous: ShutdownPlan | None = None) -> ShutdownPlan:
        deadline = now + max(grace_s, 0.0)
        if previous is not None:
            deadline = min(deadline, previous.deadline)
        return cls(fast=fast or (previous is not None and previous.fast), deadline=deadline)

    def hard_stop_due(self, now: float) -> bool:
        return self.hard_stop_at is None and now >= self.deadline

    def hard_stop_sent(self, now: float) -> None:
        self.hard_stop_at = now

    def give_up_due(self, now: float) -> bool:
        return self.hard_stop_at is not None and now >= self.hard_stop_at + KILL_WAIT_S

    def next_deadline(self) -> float:
        if self.hard_stop_at is None:
            return self.deadline
        return self.hard_stop_at + KILL_WAIT_S


@dataclass
class Withdrawal:
    """The slots' withdraw hooks as the startd exits: how many are out, and the
    latest time to wait for them (their longest timeout, the runner kills them then)."""

    pending: int
    until: float

    @classmethod
    def begin(cls, now: float, timeouts_s: list[float]) -> Withdrawal:
        return cls(pending=len(timeouts_s), until=now + max(timeouts_s, default=0.0) + KILL_WAIT_S)

    def one_done(self) -> None:
        self.pending -= 1

    def over(self, now: float) -> bool:
        return self.pending <= 0 or now >= self.until
