"""The lease keepers of one process: one thread renews each job's lease on time,
acts on a claim that is no longer ours, and is never woken for a job that ends
before its first check."""

from __future__ import annotations

import itertools
import threading
import time

from fetchwork.hooks.leasekeepers import FIRST_CHECK_S, LeaseKeeper, LeaseKeepers
from tests.support.waiting import wait_until


class Broker:
    """What the keepers call: renewals answered from a script, and the actions."""

    def __init__(self, answers: dict[str, list[str]] | None = None):
        self.answers = answers or {}
        self.renewed: list[tuple[str, float]] = []
        self.acted: list[tuple[str, str, int | None]] = []
        self.lock = threading.Lock()

    def renew(self, job_id: str, token: str) -> str:
        assert token == f"token-{job_id}"
        with self.lock:
            self.renewed.append((job_id, time.monotonic()))
            queue = self.answers.get(job_id, [])
            return queue.pop(0) if queue else "ok"

    def act(self, job_id: str, status: str, run: int | None) -> None:
        with self.lock:
            self.acted.append((job_id, status, run))

    def renewals(self, job_id: str) -> list[float]:
        with self.lock:
            return [at for renewed, at in self.renewed if renewed == job_id]


def keeper(job_id: str, interval_s: float = 0.1) -> LeaseKeeper:
    made = LeaseKeeper(job_id, f"token-{job_id}", lease_s=interval_s * 3, renew_s=interval_s)
    made.control_run = 7
    return made


def test_a_lease_is_renewed_at_its_interval_until_stopped():
    broker = Broker()
    keepers = LeaseKeepers(broker.renew, broker.act)
    started = time.monotonic()
    keepers.start(keeper("1.0"))
    wait_until(lambda: len(broker.renewals("1.0")) >= 3, timeout_s=30, what="three renewals")
    keepers.stop("1.0")
    times = broker.renewals("1.0")
    assert times[0] - started >= 0.1 - 0.01  # the first check comes after an interval
    assert all(later - earlier >= 0.09 for earlier, later in itertools.pairwise(times))
    count = len(broker.renewals("1.0"))
    # Stopped: the next due check finds it gone (the thread is still serving).
    keepers.start(keeper("2.0"))
    wait_until(lambda: len(broker.renewals("2.0")) >= 2, timeout_s=30, what="the next job's")
    assert len(broker.renewals("1.0")) <= count + 1  # at most one check already under way
    keepers.stop("2.0")
    assert broker.acted == []


def test_a_job_that_ends_before_its_first_check_costs_no_renewal():
    broker = Broker()
    keepers = LeaseKeepers(broker.renew, broker.act)
    long = LeaseKeeper("3.0", "token-3.0", lease_s=1200, renew_s=60)
    keepers.start(long)
    assert long.next_at - time.monotonic() <= FIRST_CHECK_S
    keepers.stop("3.0")
    # A short job after it, on the same thread, is renewed: the thread was serving.
    keepers.start(keeper("4.0"))
    wait_until(lambda: broker.renewals("4.0"), timeout_s=30, what="the short job's renewal")
    keepers.stop("4.0")
    assert broker.renewals("3.0") == []


def test_a_claim_no_longer_ours_is_acted_on_and_gone_ends_the_renewals():
    broker = Broker({"5.0": ["ok", "held", "ok", "gone"]})
    keepers = LeaseKeepers(broker.renew, broker.act)
    keepers.start(keeper("5.0"))
    wait_until(lambda: len(broker.acted) >= 2, timeout_s=30, what="two actions")
    assert broker.acted == [("5.0", "held", 7), ("5.0", "gone", 7)]
    renewed = len(broker.renewals("5.0"))
    assert renewed == 4
    # Gone: no more renewals of it, while another job's go on.
    keepers.start(keeper("6.0"))
    wait_until(lambda: len(broker.renewals("6.0")) >= 3, timeout_s=30, what="another job's")
    keepers.stop("6.0")
    assert len(broker.renewals("5.0")) == renewed


def test_a_failing_renewal_is_retried_at_the_next_interval():
    class Flaky(Broker):
        def renew(self, job_id: str, token: str) -> str:
            status = super().renew(job_id, token)
            if len(self.renewals(job_id)) == 1:
                raise RuntimeError("connection reset")
            return status

    broker = Flaky()
    keepers = LeaseKeepers(broker.renew, broker.act)
    keepers.start(keeper("8.0"))
    wait_until(lambda: len(broker.renewals("8.0")) >= 2, timeout_s=30, what="the retry")
    keepers.stop("8.0")
    assert broker.acted == []


def test_a_keeper_for_the_same_job_replaces_the_first():
    broker = Broker()
    keepers = LeaseKeepers(broker.renew, broker.act)
    first, second = keeper("9.0"), keeper("9.0")
    keepers.start(first)
    keepers.start(second)
    assert first.stopped and not second.stopped
    wait_until(lambda: broker.renewals("9.0"), timeout_s=30, what="a renewal")
    keepers.stop("9.0")
    assert second.stopped
