"""Running one filter: real programs written here, and python: callables."""

from __future__ import annotations

import os
import time

import pytest

from fetchwork.broker.filters.runner import Facts, FilterCall, FilterSpec, run_filter
from tests.support.filterprogs import calls, log_lines, spec, write_filter
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

AD = {"ClusterId": 7, "ProcId": 0, "Tag": "first", "Cmd": "/bin/true"}


def test_a_program_gets_its_args_then_the_action_then_the_ad_file(tmp_path):
    prog = write_filter(tmp_path, "quota", code=0)
    run = run_filter(spec(prog, args=("--strict", "x y")), "submit", AD)
    assert run.exit_code == 0 and not run.timed_out and not run.missing
    line = log_lines(tmp_path)[0]
    args = line.split("args=")[1].split(" pass=")[0].split()
    assert args[:3] == ["--strict", "x", "y"] and args[3] == "submit"
    assert args[4].endswith("job.ad")
    assert calls(tmp_path) == ["quota submit \"first\""]


def test_the_ad_file_is_in_htcondor_long_form(tmp_path):
    prog = write_filter(tmp_path, "copy", body=f'cp "$file" {tmp_path}/seen.ad')
    run_filter(spec(prog), "submit", AD)
    text = (tmp_path / "seen.ad").read_text()
    assert "ClusterId = 7\n" in text and 'Cmd = "/bin/true"\n' in text


@pytest.mark.parametrize("code", [0, 1, 2, 3, 4, 9])
def test_the_exit_code_is_reported(tmp_path, code):
    prog = write_filter(tmp_path, "f", code=code)
    assert run_filter(spec(prog), "activate", AD).exit_code == code


def test_stderr_is_kept_and_the_rewritten_file_read_back(tmp_path):
    prog = write_filter(tmp_path, "rewrite", code=1, body=(
        'echo "JobPrio = 9" >> "$file"; echo "over quota" >&2; echo "more" >&2'))
    run = run_filter(spec(prog), "submit", AD)
    assert run.exit_code == 1
    assert run.first_stderr_line() == "over quota"
    assert run.ad is not None and run.ad["JobPrio"] == 9 and run.ad["Tag"] == "first"


def test_an_unreadable_rewrite_is_reported(tmp_path):
    prog = write_filter(tmp_path, "garble", code=1, body='echo "not an ad" > "$file"')
    run = run_filter(spec(prog), "submit", AD)
    assert run.ad is None and "Name = expression" in (run.ad_error or "")


def test_a_missing_program_is_reported_as_not_found(tmp_path):
    run = run_filter(spec(tmp_path / "nowhere"), "submit", AD)
    assert run.missing and run.exit_code is None


def test_a_program_that_cannot_run_is_an_error(tmp_path):
    path = tmp_path / "notexec"
    path.write_text("#!/bin/sh\nexit 0\n")
    run = run_filter(spec(path), "submit", AD)
    assert run.error is not None and not run.missing


def test_a_timeout_kills_the_whole_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    prog = write_filter(tmp_path, "slow", body=f"sleep 300 & echo $! > {pidfile}; wait")
    started = time.monotonic()
    run = run_filter(spec(prog, timeout_s=1.0), "activate", AD)
    assert run.timed_out and run.exit_code is None
    assert time.monotonic() - started < 20
    child = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 5))

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{child}/stat") as handle:
            return handle.read().split()[2] == "Z"

    wait_until(gone, 10, what="the filter's child to die with its group")


def test_an_activation_filter_sees_the_facts_and_the_slot_ad(tmp_path):
    prog = write_filter(tmp_path, "gate", body=f'cp "$FETCHWORK_SLOT_AD" {tmp_path}/slot.ad')
    facts = Facts(scheduler_pass=12, job_index=3, backfill=False, resource_count=4,
                  slot_ad={"Name": "slot1@host", "Cpus": 4})
    run_filter(spec(prog, kind="activation"), "activate", AD, facts)
    line = log_lines(tmp_path)[0]
    assert "pass=12 index=3 backfill=0 cpus=4 slot=" in line
    assert 'Name = "slot1@host"' in (tmp_path / "slot.ad").read_text()


# -- python: filters ---------------------------------------------------------

def python_filter(call: FilterCall) -> int:
    """Returns the code in the ad's Code attribute; notes what it was given."""
    seen.append((call.action, call.args, call.job_ad.get("Tag"),
                 call.facts.resource_count if call.facts else None,
                 call.slot_ad.get("Name") if call.slot_ad is not None else None))
    if call.job_ad.get("Code") == 1:
        call.job_ad["JobPrio"] = 5
    if call.job_ad.get("Code") == 4:
        call.message = "no licenses for you"
    if call.job_ad.get("Code") == 99:
        raise RuntimeError("boom")
    if call.job_ad.get("Code") == 77:
        time.sleep(3)
    return int(call.job_ad.get("Code", 0))


seen: list[tuple] = []
PY = "python:tests.broker.filters.test_runner:python_filter"


def test_a_python_filter_gets_the_same_information():
    seen.clear()
    facts = Facts(scheduler_pass=1, resource_count=2, slot_ad={"Name": "slot2@h"})
    run = run_filter(FilterSpec("PY", "activation", PY, ("a",)), "activate",
                     {**AD, "Code": 0}, facts)
    assert run.exit_code == 0
    assert seen == [("activate", ["a"], "first", 2, "slot2@h")]


def test_a_python_filter_rewrites_the_ad_and_sets_the_message():
    rewritten = run_filter(FilterSpec("PY", "submission", PY), "submit", {**AD, "Code": 1})
    assert rewritten.exit_code == 1 and rewritten.ad is not None
    assert rewritten.ad["JobPrio"] == 5
    failed = run_filter(FilterSpec("PY", "activation", PY), "activate", {**AD, "Code": 4})
    assert failed.exit_code == 4 and failed.first_stderr_line() == "no licenses for you"


def test_a_python_filter_that_raises_times_out_or_is_missing():
    raised = run_filter(FilterSpec("PY", "submission", PY), "submit", {**AD, "Code": 99})
    assert raised.exit_code is None and "boom" in (raised.error or "")
    slow = run_filter(FilterSpec("PY", "submission", PY, timeout_s=0.3), "submit",
                      {**AD, "Code": 77})
    assert slow.timed_out
    missing = run_filter(FilterSpec("PY", "submission", "python:tests.nosuch:f"), "submit", AD)
    assert missing.missing
