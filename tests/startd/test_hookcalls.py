"""The startd loop's own watch over in-process hook calls: a call past its timeout
is reported timed out when the loop settles it, a call that returned is forgotten,
and the loop is told when to wake next."""

from __future__ import annotations

import time

from fetchwork.hooks.inprocess import Call, CallOutcome
from fetchwork.startd.hookcalls import HookCalls
from tests.support.waiting import wait_until


def test_a_call_past_its_timeout_is_delivered_as_timed_out_once():
    outcomes: list[CallOutcome] = []
    calls = HookCalls()
    call = Call(outcomes.append)
    calls.add(call, 0.05)
    calls.settle()  # not due yet
    assert outcomes == []
    wait_until(lambda: calls.settle() or outcomes, timeout_s=30, what="the timeout")
    assert [outcome.timed_out for outcome in outcomes] == [True]
    assert calls.next_at() is None  # forgotten once delivered
    call.deliver(CallOutcome(exit_code=0, stdout="late"))  # the hook returns after all
    assert len(outcomes) == 1


def test_a_call_that_returned_is_forgotten_and_the_earliest_deadline_wakes_the_loop():
    outcomes: list[CallOutcome] = []
    calls = HookCalls()
    quick, slow = Call(outcomes.append), Call(outcomes.append)
    before = time.monotonic()
    calls.add(slow, 60.0)
    calls.add(quick, 20.0)
    calls.add(None, 1.0)  # a program hook's run: watched in its own thread
    next_at = calls.next_at()
    assert next_at is not None and before + 20.0 <= next_at <= time.monotonic() + 20.0
    quick.deliver(CallOutcome(exit_code=0, stdout="job"))
    calls.settle()
    next_at = calls.next_at()
    assert next_at is not None and next_at >= before + 60.0
    assert [outcome.stdout for outcome in outcomes] == ["job"]
