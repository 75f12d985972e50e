"""The job policy's decisions (broker/jobpolicy/expressions.py) with HTCondor's semantics, and the
submit commands that make its attributes (submit/jobpolicymap.py): no Redis, no processes."""

from __future__ import annotations

from typing import Any

import pytest

from fetchwork.broker.jobpolicy.expressions import (
    COMPLETE,
    HOLD,
    RELEASE,
    REMOVE,
    REQUEUE,
    exit_action,
    has_exit_policy,
    has_periodic,
    periodic_action,
)
from fetchwork.broker.jobpolicy.periodic import periodic_due
from fetchwork.config.ads import EXPR_KEY, from_dict, parse_expr
from fetchwork.config.protocol import HoldCode
from fetchwork.errors import SubmitFileError
from fetchwork.submit.jobpolicymap import policy_attrs
from fetchwork.submit.submitcheck import warnings
from fetchwork.submit.submitfile import parse_submit

NOW = 1_800_000_000


def ad(**attrs: Any) -> Any:
    """A job ad; string values starting with '=' are expressions."""
    return from_dict({name: {EXPR_KEY: value[1:]} if isinstance(value, str)
                      and value.startswith("=") else value for name, value in attrs.items()})


def exited(code: int, completions: int = 1, **attrs: Any) -> Any:
    return ad(JobStatus=2, ExitCode=code, ExitBySignal=False, NumJobCompletions=completions,
              **attrs)


# -- at exit --------------------------------------------------------------------

def test_a_job_without_policy_completes() -> None:
    assert exit_action(exited(1), NOW).kind == COMPLETE


def test_on_exit_hold_holds_with_its_reason_and_subcode() -> None:
    action = exit_action(exited(3, OnExitHold="=ExitCode == 3",
                                OnExitHoldReason='=strcat("exit ", ExitCode)',
                                OnExitHoldSubCode="=40 + ExitCode"), NOW)
    assert (action.kind, action.reason, action.subcode) == (HOLD, "exit 3", 43)
    assert action.attr == "OnExitHold"


def test_on_exit_hold_without_reason_names_its_expression_and_subcode_zero() -> None:
    action = exit_action(exited(3, OnExitHold="=ExitCode == 3",
                                OnExitHoldReason="=UndefinedThing"), NOW)
    assert action.kind == HOLD and action.subcode == 0
    assert "OnExitHold" in action.reason and "ExitCode == 3" in action.reason


def test_a_subcode_that_is_not_a_whole_number_is_zero() -> None:
    assert exit_action(exited(3, OnExitHold=True, OnExitHoldSubCode="abc"), NOW).subcode == 0
    assert exit_action(exited(3, OnExitHold=True, OnExitHoldSubCode=2.5), NOW).subcode == 0


def test_on_exit_hold_false_then_on_exit_remove_decides() -> None:
    job = exited(0, OnExitHold="=ExitCode == 3", OnExitRemove="=ExitCode == 0")
    assert exit_action(job, NOW).kind == COMPLETE
    job = exited(5, OnExitHold="=ExitCode == 3", OnExitRemove="=ExitCode == 0")
    action = exit_action(job, NOW)
    assert action.kind == REQUEUE and "OnExitRemove" in action.reason


def test_hold_wins_over_a_false_on_exit_remove() -> None:
    assert exit_action(exited(3, OnExitHold=True, OnExitRemove=False), NOW).kind == HOLD


@pytest.mark.parametrize("value", ["=NoSuchAttr", "=1/0", '="text"'])
def test_an_on_exit_remove_neither_true_nor_false_lets_the_job_leave(value: str) -> None:
    assert exit_action(exited(1, OnExitRemove=value), NOW).kind == COMPLETE


def test_periodic_expressions_take_precedence_at_exit() -> None:
    job = exited(3, OnExitHold=True, PeriodicRemove=True)
    assert exit_action(job, NOW).kind == REMOVE
    job = exited(3, PeriodicRemove=True, PeriodicHold=True, PeriodicHoldSubCode=9)
    action = exit_action(job, NOW)
    assert (action.kind, action.subcode, action.attr) == (HOLD, 9, "PeriodicHold")


def test_max_retries_two_runs_three_times() -> None:
    """The OnExitRemove that max_retries = 2 makes: NumJobCompletions counts this exit."""
    attrs = dict(policy_attrs({"max_retries": "2"}, _expr, _whole))
    assert attrs["JobMaxRetries"] == 2
    verdicts = [exit_action(exited(1, run, **attrs), NOW).kind for run in (1, 2, 3)]
    assert verdicts == [REQUEUE, REQUEUE, COMPLETE]
    assert exit_action(exited(0, 1, **attrs), NOW).kind == COMPLETE


def test_a_job_killed_by_a_signal_is_retried() -> None:
    attrs = dict(policy_attrs({"max_retries": "1"}, _expr, _whole))
    job = ad(JobStatus=2, ExitBySignal=True, ExitSignal=9, NumJobCompletions=1, **attrs)
    assert exit_action(job, NOW).kind == REQUEUE


def test_success_exit_code_is_the_success() -> None:
    attrs = dict(policy_attrs({"max_retries": "4", "success_exit_code": "7"}, _expr, _whole))
    assert attrs["JobSuccessExitCode"] == 7
    assert exit_action(exited(0, 1, **attrs), NOW).kind == REQUEUE
    assert exit_action(exited(7, 1, **attrs), NOW).kind == COMPLETE


def test_max_retries_is_ored_with_the_files_on_exit_remove() -> None:
    attrs = dict(policy_attrs({"max_retries": "5", "on_exit_remove": "ExitCode == 2"},
                              _expr, _whole))
    assert exit_action(exited(2, 1, **attrs), NOW).kind == COMPLETE
    assert exit_action(exited(1, 1, **attrs), NOW).kind == REQUEUE


def test_expressions_see_current_time() -> None:
    job = exited(0, OnExitHold="=CurrentTime - QDate < 60", QDate=NOW - 10)
    assert exit_action(job, NOW).kind == HOLD
    assert exit_action(job, NOW + 100).kind == COMPLETE


# -- periodic ---------------------------------------------------------------------

@pytest.mark.parametrize("status", [1, 2, 7])
def test_periodic_hold_of_a_job_not_held(status: int) -> None:
    action = periodic_action(ad(JobStatus=status, PeriodicHold="=JobStatus == JobStatus",
                                PeriodicHoldReason="too long", PeriodicHoldSubCode=5), NOW)
    assert action is not None
    assert (action.kind, action.reason, action.subcode) == (HOLD, "too long", 5)


def test_periodic_hold_is_not_tested_for_a_held_job_and_release_is() -> None:
    assert periodic_action(ad(JobStatus=5, PeriodicHold=True), NOW) is None
    action = periodic_action(ad(JobStatus=5, PeriodicHold=True,
                                PeriodicRelease="=HoldReasonCode == 3", HoldReasonCode=3), NOW)
    assert action is not None and action.kind == RELEASE
    assert periodic_action(ad(JobStatus=1, PeriodicRelease=True), NOW) is None


def test_hold_wins_over_remove_and_remove_applies_to_held_jobs() -> None:
    both = periodic_action(ad(JobStatus=1, PeriodicHold=True, PeriodicRemove=True), NOW)
    assert both is not None and both.kind == HOLD
    held = periodic_action(ad(JobStatus=5, PeriodicRemove="=CurrentTime - QDate > 60",
                              QDate=NOW - 61), NOW)
    assert held is not None and held.kind == REMOVE and "PeriodicRemove" in held.reason


def test_release_comes_before_remove_for_a_held_job() -> None:
    action = periodic_action(ad(JobStatus=5, PeriodicRelease=True, PeriodicRemove=True), NOW)
    assert action is not None and action.kind == RELEASE


@pytest.mark.parametrize("status", [3, 4])
def test_jobs_leaving_the_queue_are_left_alone(status: int) -> None:
    assert periodic_action(ad(JobStatus=status, PeriodicRemove=True), NOW) is None


def test_undefined_and_errors_are_false() -> None:
    assert periodic_action(ad(JobStatus=1, PeriodicHold="=Missing > 3",
                              PeriodicRemove="=1/0"), NOW) is None


def test_the_codes_are_htcondors() -> None:
    assert int(HoldCode.JOB_POLICY) == 3


# -- which jobs need judging --------------------------------------------------------

def test_the_periodic_index_takes_jobs_with_a_periodic_expression() -> None:
    jobs = [("1.0", {"PeriodicRemove": {EXPR_KEY: "x > 1"}}),
            ("1.1", {"periodicHOLD": True}),
            ("1.2", {"PeriodicRelease": False, "OnExitHold": True}),
            ("1.3", {"Cmd": "/bin/true"})]
    assert [job for job, attrs in jobs if has_periodic(attrs)] == ["1.0", "1.1"]
    assert has_periodic({"periodicrelease": {EXPR_KEY: "true"}})
    assert not has_periodic({})


def test_exit_policy_check_on_stored_values() -> None:
    assert not has_exit_policy({"OnExitHold": None, "OnExitRemove": None})
    assert has_exit_policy({"OnExitHold": None, "OnExitRemove": {EXPR_KEY: "ExitCode == 0"}})
    assert not has_exit_policy({"OnExitHold": False, "OnExitRemove": True})
    assert has_exit_policy({"OnExitHold": None, "OnExitRemove": False})


def test_periodic_due() -> None:
    assert periodic_due(10.0, None, 60.0)
    assert not periodic_due(69.0, 10.0, 60.0)
    assert periodic_due(70.0, 10.0, 60.0)


# -- submit commands -------------------------------------------------------------------

def _expr(text: str, command: str) -> Any:
    parsed = parse_expr(text.strip())
    from fetchwork.config.ads import unparse
    return parsed if not hasattr(parsed, "eval") else {EXPR_KEY: unparse(parsed)}


def _whole(text: str, command: str, least: int | None) -> int:
    number = int(text)
    if least is not None and number < least:
        raise ValueError(command)
    return number


def test_submit_commands_map_to_htcondors_attributes() -> None:
    attrs = dict(policy_attrs({
        "on_exit_hold": "ExitCode == 3", "on_exit_hold_reason": '"three"',
        "on_exit_hold_subcode": "7", "on_exit_remove": "false", "periodic_hold": "x > 1",
        "periodic_hold_reason": '"long"', "periodic_hold_subcode": "2",
        "periodic_release": "true", "periodic_remove": "y"}, _expr, _whole))
    assert attrs == {
        "OnExitHold": {EXPR_KEY: "ExitCode == 3"}, "OnExitHoldReason": "three",
        "OnExitHoldSubCode": 7, "OnExitRemove": False, "PeriodicHold": {EXPR_KEY: "x > 1"},
        "PeriodicHoldReason": "long", "PeriodicHoldSubCode": 2, "PeriodicRelease": True,
        "PeriodicRemove": {EXPR_KEY: "y"}}


def test_the_typo_check_knows_the_policy_commands() -> None:
    lines = ["executable = /bin/true", "max_retries = 2", "on_exit_hold = true",
             "periodic_remove = false", "periodic_hold_subcode = 1", "success_exit_code = 0",
             "on_exit_hold_reason = \"x\"", "periodic_release = true", "queue"]
    defined = {line.split("=")[0].strip(): [number]
               for number, line in enumerate(lines, 1) if "=" in line}
    assert warnings(defined, lines, "\n".join(lines), "job.sub") == []


def test_a_submit_file_gives_the_policy_attributes(tmp_path) -> None:
    text = ("executable = /bin/true\nmax_retries = 3\non_exit_remove = ExitCode == 9\n"
            "on_exit_hold = ExitBySignal\non_exit_hold_reason = \"signalled\"\n"
            "periodic_remove = CurrentTime - QDate > 60\nqueue\n")
    parsed = parse_submit(text, 1, submit_dir=str(tmp_path), source="job.sub")
    assert parsed.warnings == []
    [job] = parsed.ads
    assert job["JobMaxRetries"] == 3 and job["OnExitHoldReason"] == "signalled"
    assert job["OnExitHold"] == {EXPR_KEY: "ExitBySignal"}
    assert job["OnExitRemove"] == {EXPR_KEY: "(ExitCode == 9) || (NumJobCompletions > "
                                             "JobMaxRetries || ExitCode is 0)"}
    assert has_periodic(job)


@pytest.mark.parametrize(("line", "message"), [
    ("max_retries = -1", "max_retries must be at least 0"),
    ("max_retries = many", "max_retries must be a whole number"),
    ("periodic_hold = ((", "periodic_hold: not a ClassAd expression"),
])
def test_bad_policy_commands_name_the_line(tmp_path, line: str, message: str) -> None:
    with pytest.raises(SubmitFileError) as caught:
        parse_submit(f"executable = /bin/true\n{line}\nqueue\n", 1, submit_dir=str(tmp_path),
                     source="job.sub")
    assert message in str(caught.value) and "job.sub" in str(caught.value)
    assert ":2" in str(caught.value) or "line 2" in str(caught.value)
