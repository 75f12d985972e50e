"""The starter's lifecycle decisions, without processes."""

from __future__ import annotations

import pytest

from fetchwork.starter import lifecycle as lc
from fetchwork.starter.lifecycle import Phase, Status

VACATE_S = 10.0


def running() -> Status:
    return lc.started(Status())


def test_suspend_and_continue():
    step = lc.handle(running(), lc.SUSPEND, 0, VACATE_S)
    assert step.status.phase is Phase.SUSPENDED and step.effects == (lc.STOP,)
    assert lc.handle(step.status, lc.SUSPEND, 0, VACATE_S).effects == ()
    back = lc.handle(step.status, lc.CONTINUE, 0, VACATE_S)
    assert back.status.phase is Phase.RUNNING and back.effects == (lc.CONT,)
    assert lc.handle(running(), lc.CONTINUE, 0, VACATE_S).effects == ()


@pytest.mark.parametrize(("request_", "how"), [
    (lc.VACATE, "evict"), (lc.REMOVE, "remove"), (lc.HOLD, "hold")])
def test_stop_requests_soft_kill_then_deadline(request_, how):
    step = lc.handle(running(), request_, 100.0, VACATE_S)
    assert step.status == Status(Phase.VACATING, how, 110.0)
    assert step.effects == (lc.SOFT_KILL,)
    assert lc.next_deadline(step.status) == 110.0
    assert lc.tick(step.status, 109.9).effects == ()
    late = lc.tick(step.status, 110.0)
    assert late.effects == (lc.HARD_KILL,) and late.status.kill_at is None
    assert lc.tick(late.status, 200).effects == ()
    assert lc.finished(late.status).how == how


def test_suspended_job_is_continued_after_its_killsig():
    suspended = lc.handle(running(), lc.SUSPEND, 0, VACATE_S).status
    assert lc.handle(suspended, lc.VACATE, 0, VACATE_S).effects == (lc.SOFT_KILL, lc.CONT)


def test_kill_is_immediate():
    step = lc.handle(running(), lc.KILL, 0, VACATE_S)
    assert step.effects == (lc.HARD_KILL,) and step.status.how == "evict"
    vacating = lc.handle(running(), lc.REMOVE, 0, VACATE_S).status
    step = lc.handle(vacating, lc.KILL, 1, VACATE_S)
    assert step.effects == (lc.HARD_KILL,) and step.status.how == "remove"


def test_removal_outranks_eviction_not_the_reverse():
    vacating = lc.handle(running(), lc.VACATE, 0, VACATE_S).status
    removed = lc.handle(vacating, lc.REMOVE, 1, VACATE_S)
    assert removed.effects == () and removed.status.how == "remove"
    assert removed.status.kill_at == VACATE_S  # the first deadline stands
    assert lc.handle(removed.status, lc.VACATE, 2, VACATE_S).status.how == "remove"
    assert lc.handle(removed.status, lc.HOLD, 2, VACATE_S).status.how == "remove"


def test_requests_while_preparing_are_remembered():
    step = lc.handle(Status(), lc.HOLD, 0, VACATE_S)
    assert step.status.phase is Phase.PREPARING and step.status.how == "hold"
    assert step.effects == ()
    assert lc.handle(Status(), lc.SUSPEND, 0, VACATE_S).effects == ()


def test_finished_and_done():
    done = lc.finished(running())
    assert done.phase is Phase.DONE and done.how == "exit"
    assert lc.handle(done, lc.KILL, 0, VACATE_S) == lc.Step(done)
    with pytest.raises(ValueError):
        lc.started(done)
    with pytest.raises(ValueError):
        lc.handle(running(), "explode", 0, VACATE_S)
