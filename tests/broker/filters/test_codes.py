"""The code tables of filters.txt and activation-codes.txt, as pure functions."""

from __future__ import annotations

import pytest

from fetchwork.broker.filters.codes import (
    Activation,
    Submission,
    activation_code,
    activation_verdict,
    hold_until,
    submission_verdict,
    take_rewrite,
)
from fetchwork.broker.filters.runner import FilterRun, FilterSpec

QUOTA = FilterSpec("QUOTA", "submission", "/opt/site/x", timeout_s=15)
LICENSE = FilterSpec("LICENSE", "activation", "/opt/site/gate", timeout_s=15)
GIVEN = {"ClusterId": 3, "ProcId": 0, "Owner": "alice", "JobStatus": 1, "QDate": 100,
         "JobPrio": 0, "Cmd": "/bin/true"}
NOW = 1_000_000


def run(spec: FilterSpec, **kw) -> FilterRun:
    return FilterRun(spec, "submit", **kw)


# -- submission ------------------------------------------------------------------

def test_submission_0_keeps_the_job_as_is():
    verdict = submission_verdict(run(QUOTA, exit_code=0, ad={"Cmd": "/bin/other"}), GIVEN, 15)
    assert verdict.outcome is Submission.AS_IS and verdict.ad == GIVEN


def test_submission_1_takes_the_file_less_managed_attributes():
    rewritten = {**GIVEN, "Cmd": "/bin/false", "JobPrio": 7, "Owner": "mallory",
                 "ClusterId": 99, "JobStatus": 2, "QDate": 5, "NewAttr": "x"}
    del rewritten["ProcId"]
    verdict = submission_verdict(run(QUOTA, exit_code=1, ad=rewritten), GIVEN, 15)
    assert verdict.outcome is Submission.REWRITTEN
    assert verdict.ad == {**GIVEN, "Cmd": "/bin/false", "JobPrio": 7, "NewAttr": "x"}


def test_take_rewrite_drops_what_the_filter_deleted():
    assert take_rewrite({"A": 1, "B": 2, "Owner": "u"}, {"A": 1}) == {"A": 1, "Owner": "u"}


def test_submission_1_with_an_unreadable_file_fails():
    verdict = submission_verdict(run(QUOTA, exit_code=1, ad=None, ad_error="line 1: junk"),
                                 GIVEN, 15)
    assert verdict.outcome is Submission.FAILED
    assert verdict.reason == ("submission filter QUOTA failed the job: it rewrote the job ad "
                              "unreadably: line 1: junk")


@pytest.mark.parametrize("code", [2, 3, 4, 255, -1])
def test_submission_any_other_code_fails_with_the_first_stderr_line(code):
    verdict = submission_verdict(run(QUOTA, exit_code=code, stderr="\nover quota\nmore\n"),
                                 GIVEN, 15)
    assert verdict.outcome is Submission.FAILED
    assert verdict.reason == f"submission filter QUOTA failed the job: exit {code}: over quota"


def test_submission_failure_without_stderr():
    verdict = submission_verdict(run(QUOTA, exit_code=3), GIVEN, 15)
    assert verdict.reason == "submission filter QUOTA failed the job: exit 3"


def test_submission_timeout_missing_signal_and_error_fail():
    def reason(**kw) -> str | None:
        verdict = submission_verdict(run(QUOTA, **kw), GIVEN, 15)
        assert verdict.outcome is Submission.FAILED
        return verdict.reason

    assert reason(timed_out=True) == "submission filter QUOTA timed out after 15 s"
    assert reason(missing=True) == "submission filter QUOTA not found: /opt/site/x"
    assert reason(signal=9) == "submission filter QUOTA failed the job: killed by signal 9"
    assert reason(error="Permission denied") == (
        "submission filter QUOTA could not run: Permission denied")


# -- activation ------------------------------------------------------------------

@pytest.mark.parametrize(("kw", "action"), [
    ({"exit_code": 0}, Activation.START),
    ({"exit_code": 1}, Activation.BLOCK),
    ({"exit_code": 2}, Activation.RESERVE),
    ({"exit_code": 3}, Activation.HOLD),
    ({"exit_code": 4}, Activation.FAIL),
    ({"exit_code": 5}, Activation.RESERVE),
    ({"exit_code": 255}, Activation.RESERVE),
    ({"timed_out": True}, Activation.RESERVE),
    ({"missing": True}, Activation.RESERVE),
    ({"error": "Permission denied"}, Activation.RESERVE),
    ({"signal": 9}, Activation.RESERVE),
])
def test_the_activation_table(kw, action):
    assert activation_code(FilterRun(LICENSE, "activate", **kw)) is action


def test_activation_reasons_name_the_filter():
    def verdict(**kw):
        return activation_verdict(FilterRun(LICENSE, "activate", **kw), 15, NOW, 900)

    assert verdict(exit_code=0).reason is None
    assert verdict(exit_code=4, stderr="expired\n").reason == (
        "activation filter LICENSE failed the job: exit 4: expired")
    assert verdict(exit_code=1).reason == "activation filter LICENSE blocks the queue: exit 1"
    assert verdict(exit_code=2).reason == "activation filter LICENSE answered exit 2"
    assert verdict(timed_out=True).reason == "activation filter LICENSE timed out after 15 s"
    assert verdict(missing=True).reason == "activation filter LICENSE not found: /opt/site/gate"
    assert verdict(exit_code=3, stderr="wait").reason == (
        "activation filter LICENSE held the job: wait")


def test_code_3_holds_until_the_default_duration_without_a_holduntil():
    held = activation_verdict(FilterRun(LICENSE, "activate", exit_code=3, ad={"A": 1}),
                              15, NOW, 900)
    assert held.action is Activation.HOLD and held.hold_until == NOW + 900


def test_code_3_takes_the_holduntil_the_filter_wrote():
    held = activation_verdict(
        FilterRun(LICENSE, "activate", exit_code=3, ad={"holduntil": NOW + 60}), 15, NOW, 900)
    assert held.hold_until == NOW + 60


def test_a_holduntil_in_the_past_or_not_a_number_gives_the_default():
    assert hold_until({"HoldUntil": NOW - 5}, NOW, 120) == NOW + 120
    assert hold_until({"HoldUntil": "soon"}, NOW, 120) == NOW + 120
    assert hold_until(None, NOW + 0.5, 60) == NOW + 60
