"""What the exit hook records in rq for each way a job leaves its slot (pure)."""

from __future__ import annotations

import pytest

from fetchwork.hooks.rqbridge.outcome import (
    STOPPED_REASON,
    Decision,
    Record,
    decide,
    terminated_reason,
    wait_status,
)


def test_a_clean_exit_was_recorded_by_the_job_process() -> None:
    assert decide("exit", "finished", 0, None, False) == Decision(Record.NOTHING)
    assert decide("exit", "failed", 0, None, False) == Decision(Record.NOTHING)


def test_a_job_process_that_died_fails_as_under_rqs_worker() -> None:
    assert decide("exit", "started", None, 9, False) == Decision(
        Record.FAIL, "Work-horse terminated unexpectedly; waitpid returned 9 (signal 9); ")
    assert decide("exit", "started", 1, None, False) == Decision(
        Record.FAIL, "Work-horse terminated unexpectedly; waitpid returned 256; ")


def test_nothing_is_recorded_twice() -> None:
    for status in ("finished", "failed", "stopped", "canceled", None):
        for how in ("exit", "evict", "remove", "hold"):
            assert decide(how, status, 1, None, True).record is Record.NOTHING


def test_an_evicted_job_goes_back_unless_it_outlived_its_timeout() -> None:
    assert decide("evict", "started", None, 15, False) == Decision(Record.REQUEUE)
    assert decide("evict", "queued", None, 15, False) == Decision(Record.NOTHING)
    killed = decide("evict", "started", None, 9, True)
    assert killed.record is Record.FAIL and "(signal 9)" in killed.reason


def test_remove_stops_and_hold_fails() -> None:
    assert decide("remove", "started", None, 15, False) == Decision(Record.STOP, STOPPED_REASON)
    assert decide("hold", "started", None, 9, False, "too much memory") == Decision(
        Record.FAIL, "held on the execute machine: too much memory")


def test_an_unknown_way_out_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown way"):
        decide("vanish", "started", 0, None, False)


@pytest.mark.parametrize("code, sig, status", [(0, None, 0), (3, None, 768), (None, 15, 15)])
def test_wait_statuses_are_what_waitpid_gives(code: int | None, sig: int | None,
                                              status: int) -> None:
    assert wait_status(code, sig) == status
    assert ("signal" in terminated_reason(status)) == (sig is not None)
