"""The claim side of activation: the published summary and what a claim may offer."""

from __future__ import annotations

from pathlib import Path

from fetchwork.broker.filters.gate import (
    ClaimView,
    Summary,
    block_floor,
    blocked,
    group_of,
    may_offer,
    needs_activation,
    summary_of,
    view_of,
)
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.store.states import PRIO_SCALE
from fetchwork.config.loader import Config

NOW_MS = 5_000_000


def order(prio: int, seq: int) -> float:
    return -prio * PRIO_SCALE + seq


def test_groups_are_minus_jobprio_also_at_the_head_of_a_group():
    assert group_of(order(5, 1)) == -5 and group_of(order(0, 10**9)) == 0
    assert group_of(order(-3, 7)) == 3
    assert group_of(-5 * PRIO_SCALE - 12) == -5  # a rejected job put back at the head


def test_the_summary_round_trips_through_the_hash_fields():
    summary = Summary(submit=True, activate=False, templates=frozenset({"short", "gpu"}),
                      wait_ms=31000)
    values = [summary.fields()[name] for name in ("submit", "activate", "templates", "wait_ms")]
    assert Summary.from_fields(values) == summary
    assert Summary.from_fields([None, None, None, None]) == Summary()
    assert not Summary().any_activation and summary.any_activation


def test_the_summary_of_a_configuration(tmp_path: Path):
    conf = tmp_path / "c.conf"
    conf.write_text("ACTIVATION_FILTER_NAMES = A, B\nACTIVATION_FILTER_A = /a\n"
                    "ACTIVATION_FILTER_B = /b\nACTIVATION_FILTER_TIMEOUT = 2\n"
                    "JOB_TEMPLATE_NAMES = Short\nJOB_TEMPLATE_SHORT_ACTIVATION_FILTER_NAMES = A\n")
    settings = load_settings(Config.load(environ={"FETCHWORK_CONFIG": str(conf),
                                                  "FETCHWORK_STATE_DIR": str(tmp_path)}))
    summary = summary_of(settings)
    assert summary.submit and summary.activate and summary.templates == {"short"}
    assert summary.wait_ms == 7000  # three filters of 2 s, plus the margin


def test_which_jobs_need_activation():
    everyone = Summary(activate=True)
    by_template = Summary(templates=frozenset({"short"}))
    assert needs_activation({}, everyone)
    assert needs_activation({"jobtemplate": "Short"}, by_template)
    assert not needs_activation({"JobTemplate": "Long"}, by_template)
    assert not needs_activation({}, Summary())


def test_a_block_holds_back_equal_and_lower_priorities_only():
    view = ClaimView(blocks=(("1.0", -5),))
    assert blocked("2.0", order(5, 9), view)
    assert blocked("2.0", order(0, 9), view)
    assert not blocked("2.0", order(6, 9), view)
    assert not blocked("1.0", order(5, 1), view)  # the blocker itself
    assert block_floor(view) == -5 and block_floor(ClaimView()) is None


def test_a_blocker_is_itself_held_back_by_a_higher_blocker():
    view = ClaimView(blocks=(("1.0", -5), ("2.0", 0)))
    assert blocked("2.0", order(0, 3), view)
    assert not blocked("1.0", order(5, 1), view)


def test_a_reserved_slot_is_offered_only_its_job_and_no_other_slot_takes_that_job():
    view = ClaimView(reserved_job="3.0")
    assert not may_offer("4.0", {}, order(0, 4), view, "slot1@a", NOW_MS)
    data = {"FetchworkReservedSlot": "slot1@a"}
    assert may_offer("3.0", data, order(0, 3), view, "slot1@a", NOW_MS)
    assert not may_offer("3.0", data, order(0, 3), ClaimView(), "slot2@a", NOW_MS)


def test_a_job_is_not_reevaluated_before_its_time():
    data = {"FetchworkActivateAfter": NOW_MS + 1}
    assert not may_offer("3.0", data, order(0, 3), ClaimView(), "s", NOW_MS)
    assert may_offer("3.0", data, order(0, 3), ClaimView(), "s", NOW_MS + 1)


def test_the_view_from_raw_replies():
    view = view_of([b"", b"1", b"", b"16000"], b"7.0", [(b"7.0", -2.0)])
    assert view.summary.activate and view.summary.wait_ms == 16000
    assert view.reserved_job == "7.0" and view.blocks == (("7.0", -2),)
    assert view_of([None] * 4, None, []).quiet


def test_a_view_is_quiet_only_without_activation_reservation_or_block():
    assert ClaimView().quiet
    assert not ClaimView(summary=Summary(activate=True)).quiet
    assert not ClaimView(reserved_job="1.0").quiet
    assert not ClaimView(blocks=(("1.0", 0),)).quiet
