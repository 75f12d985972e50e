"""The leader's duty interface without Redis: what an inbox hands a duty, in which
order, what it drops, and the loop that drives one duty from its inbox."""

from __future__ import annotations

import math
import threading

import pytest

from fetchwork.broker.leader import duty as duty_module
from fetchwork.broker.leader.duty import Inbox, Mail, drive
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(30)


def events(*ids: str) -> list[tuple[str, dict[str, str]]]:
    return [(entry, {"job": f"1.{n}", "state": "IDLE"}) for n, entry in enumerate(ids)]


# -- the inbox ---------------------------------------------------------------------------

def test_a_new_lead_comes_with_where_the_events_begin():
    inbox = Inbox("one")
    inbox.lead("5-0")
    inbox.put(events("6-0", "7-0"))
    assert inbox.take(0) == Mail(leading=True, since="5-0", events=events("6-0", "7-0"))


def test_what_was_taken_is_not_handed_again():
    inbox = Inbox("one")
    inbox.lead("5-0")
    inbox.put(events("6-0"))
    inbox.take(0)
    assert inbox.take(0) == Mail(leading=True)


def test_batches_put_meanwhile_come_together_in_order():
    inbox = Inbox("one")
    inbox.lead("5-0")
    inbox.take(0)
    inbox.put(events("6-0"))
    inbox.put(events("7-0", "7-1"))
    assert [entry for entry, _ in inbox.take(0).events] == ["6-0", "7-0", "7-1"]


def test_events_are_dropped_while_not_leading():
    inbox = Inbox("one")
    inbox.put(events("6-0"))
    assert inbox.take(0) == Mail(leading=False)


def test_losing_the_lead_drops_what_was_not_taken():
    inbox = Inbox("one")
    inbox.lead("5-0")
    inbox.put(events("6-0"))
    inbox.lose()
    assert inbox.take(0) == Mail(leading=False, lost=True)


def test_a_lead_lost_and_taken_again_is_both_in_order():
    inbox = Inbox("one")
    inbox.lead("5-0")
    inbox.take(0)
    inbox.lose()
    inbox.lead("9-0")
    inbox.put(events("10-0"))
    assert inbox.take(0) == Mail(leading=True, lost=True, since="9-0", events=events("10-0"))


def test_losing_a_lead_never_had_is_nothing():
    inbox = Inbox("one")
    inbox.lose()
    assert inbox.take(0) == Mail(leading=False)


def test_a_duty_too_far_behind_is_resynced_from_the_newest_dropped():
    inbox = Inbox("slow", max_pending=3)
    inbox.lead("5-0")
    inbox.put(events("6-0", "7-0"))
    inbox.put(events("8-0", "9-0"))
    inbox.put(events("10-0"))
    assert inbox.take(0) == Mail(leading=True, since="9-0", events=events("10-0"))


def test_closing_ends_a_waiting_take():
    inbox = Inbox("one")
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(inbox.take(None)))
    thread.start()
    inbox.close()
    thread.join(5)
    assert got == [None]


def test_a_take_with_nothing_to_take_waits_its_timeout():
    assert Inbox("one").take(0.01) == Mail(leading=False)


# -- the loop of one duty ------------------------------------------------------------------

class Recorder:
    """A duty that records its calls; a pass is due every `period_s` or after events."""

    reads_events = True

    def __init__(self, period_s: float = math.inf, fail_passes: int = 0):
        self.name = "recorder"
        self.period_s = period_s
        self.fail_passes = fail_passes
        self.calls: list[tuple] = []
        self.due = False
        self.passed_at: float | None = None

    def on_lead(self, since: str) -> None:
        self.calls.append(("lead", since))
        self.due = True

    def on_lose(self) -> None:
        self.calls.append(("lose",))

    def on_events(self, batch) -> None:
        self.calls.append(("events", [entry for entry, _ in batch]))
        self.due = True

    def due_in_s(self, now_s: float) -> float:
        if self.due or self.passed_at is None:
            return 0.0
        return max(0.0, self.passed_at + self.period_s - now_s)

    def run_due(self, now_s: float) -> None:
        if self.fail_passes:
            self.fail_passes -= 1
            raise RuntimeError("a pass that fails")
        self.calls.append(("pass",))
        self.due, self.passed_at = False, now_s

    def close(self) -> None:
        self.calls.append(("close",))

    def passes(self) -> int:
        return self.calls.count(("pass",))


@pytest.fixture
def driven():
    made: list[tuple[Inbox, threading.Thread]] = []

    def start(duty: Recorder) -> Inbox:
        inbox = Inbox(duty.name)
        thread = threading.Thread(target=drive, args=(duty, inbox), daemon=True)
        thread.start()
        made.append((inbox, thread))
        return inbox

    yield start
    for inbox, thread in made:
        inbox.close()
        thread.join(5)
        assert not thread.is_alive()


def test_nothing_runs_before_the_lead(driven):
    duty = Recorder(period_s=0.01)
    driven(duty)
    threading.Event().wait(0.1)
    assert duty.calls == []


def test_the_lead_then_each_batch_bring_a_pass(driven):
    duty = Recorder()
    inbox = driven(duty)
    inbox.lead("5-0")
    wait_until(lambda: duty.passes() == 1, 5)
    inbox.put(events("6-0", "7-0"))
    wait_until(lambda: duty.passes() == 2, 5)
    assert duty.calls == [("lead", "5-0"), ("pass",), ("events", ["6-0", "7-0"]), ("pass",)]


def test_a_duty_due_by_time_alone_passes_on_its_period(driven):
    duty = Recorder(period_s=0.05)
    driven(duty).lead("5-0")
    wait_until(lambda: duty.passes() >= 4, 5, what="passes on the period")


def test_after_the_lead_is_lost_no_pass_runs(driven):
    duty = Recorder(period_s=0.02)
    inbox = driven(duty)
    inbox.lead("5-0")
    wait_until(lambda: duty.passes() >= 2, 5)
    inbox.lose()
    wait_until(lambda: ("lose",) in duty.calls, 5)
    passes = duty.passes()
    threading.Event().wait(0.1)
    assert duty.passes() == passes


def test_a_pass_that_fails_is_tried_again(driven, monkeypatch, caplog):
    monkeypatch.setattr(duty_module, "RETRY_S", 0.05)
    duty = Recorder(fail_passes=2)
    driven(duty).lead("5-0")
    wait_until(lambda: duty.passes() == 1, 5, what="the pass after two failures")
    assert caplog.text.count("leader duty recorder failed") == 2


def test_an_inbox_is_settled_only_while_its_duty_waits_leading_with_nothing_to_take():
    inbox = Inbox("d")
    taken: list[Mail | None] = []

    def take_once() -> None:
        taken.append(inbox.take(10))

    assert not inbox.settled()  # not leading, nobody waiting
    inbox.lead("0-0")
    assert not inbox.settled()  # the lead is mail, and nobody waits for it
    thread = threading.Thread(target=take_once)
    thread.start()
    thread.join(10)
    assert taken and taken[0] is not None and taken[0].since == "0-0"
    assert not inbox.settled()  # leading, nothing to take, but the duty is not waiting
    thread = threading.Thread(target=take_once)
    thread.start()
    wait_until(inbox.settled, 5, what="the duty waiting with everything applied")
    inbox.put([("1-0", {})])
    assert not inbox.settled()  # mail not taken yet
    thread.join(10)
    assert taken[1] is not None and taken[1].events == [("1-0", {})]
    thread = threading.Thread(target=take_once)
    thread.start()
    wait_until(inbox.settled, 5, what="the duty waiting again")
    inbox.lose()
    assert not inbox.settled()
    thread.join(10)

