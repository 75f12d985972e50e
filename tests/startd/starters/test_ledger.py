"""RunLedger: jobs counted as they start, slot time until their starter is gone."""

from __future__ import annotations

import pytest

from fetchwork.startd.starters.ledger import RunLedger


def test_a_job_that_started_and_ended_between_two_looks_is_counted() -> None:
    ledger = RunLedger()
    ledger.started(1, 100.0)
    ledger.ended(1, 100.004)
    assert ledger.jobs_run == 1
    assert ledger.busy_s(200.0) == pytest.approx(0.004)


def test_running_jobs_count_their_time_until_now() -> None:
    ledger = RunLedger()
    ledger.started(1, 10.0)
    ledger.started(2, 12.0)
    ledger.ended(1, 15.0)
    assert ledger.jobs_run == 2
    assert ledger.busy_s(20.0) == pytest.approx(5.0 + 8.0)


def test_a_kept_starter_running_jobs_in_turn_counts_each() -> None:
    ledger = RunLedger()
    for number in range(5):
        ledger.started(1, number * 1.0)
        ledger.ended(1, number * 1.0 + 0.5)
    assert ledger.jobs_run == 5
    assert ledger.busy_s(100.0) == pytest.approx(2.5)


def test_an_end_without_a_start_changes_nothing() -> None:
    """A starter reaped before its job started (it failed, or was evicted first)."""
    ledger = RunLedger()
    ledger.ended(3, 5.0)
    assert (ledger.jobs_run, ledger.busy_s(9.0)) == (0, 0.0)


def test_a_second_start_on_a_slot_ends_the_first_span() -> None:
    ledger = RunLedger()
    ledger.started(1, 0.0)
    ledger.started(1, 4.0)
    assert ledger.jobs_run == 2
    assert ledger.busy_s(6.0) == pytest.approx(6.0)
