"""A job the starter cannot start is held with HTCondor's reason and codes.

The starter words the reason (`Error from slot1@host: Failed to open ...`),
the exit hook reports it with HoldReasonCode 14 and the errno as
HoldReasonSubCode, the broker stores them and release clears them, and
`fetchwork q -hold` lists held jobs with their reasons.
"""

from __future__ import annotations

import errno
import os

import pytest
from rich.console import Console

from fetchwork.broker.client import Broker
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.config.protocol import HoldCode
from fetchwork.errors import StarterError
from fetchwork.starter.jobspec import (
    STANDARD_ERROR,
    STANDARD_INPUT,
    STANDARD_OUTPUT,
    exec_failure,
    hold_attributes,
    open_failure,
)
from fetchwork.submit import tables
from fetchwork.submit.usercli import held_only
from tests.support.pools import Up, fw, history_json, pool_env, q_json
from tests.support.waiting import wait_until

SLOT = parse_ad('Name = "slot1@host"\nSTART = true\n')


def _denied() -> PermissionError:
    return PermissionError(errno.EACCES, os.strerror(errno.EACCES))


# -- the words (pure) ---------------------------------------------------------

@pytest.mark.parametrize("stream", [STANDARD_INPUT, STANDARD_OUTPUT, STANDARD_ERROR])
def test_a_file_that_cannot_be_opened_is_named_with_its_stream_and_errno(stream):
    failure = open_failure("/data/out.0", stream, _denied())
    assert str(failure) == (f"Failed to open '/data/out.0' as {stream}: "
                            "Permission denied (errno 13)")
    assert failure.errno == 13


def test_a_program_that_cannot_be_executed():
    missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
    failure = exec_failure("/opt/tool", missing)
    assert str(failure) == "Failed to execute '/opt/tool': No such file or directory (errno 2)"
    assert failure.errno == 2


def test_hold_attributes_name_the_slot_and_carry_the_errno():
    failure = open_failure("/data/out.0", STANDARD_OUTPUT, _denied())
    assert hold_attributes(SLOT, 1, failure) == {
        "HoldReason": "Error from slot1@host: Failed to open '/data/out.0' as standard "
                      "output: Permission denied (errno 13)",
        "HoldReasonCode": 14,
        "HoldReasonSubCode": 13,
    }
    assert HoldCode.STARTER_ERROR == 14


def test_a_failure_without_an_errno_has_subcode_0_and_a_slot_without_name_its_number():
    attrs = hold_attributes(parse_ad("START = true\n"), 2, StarterError("the job ad has no Cmd"))
    assert attrs == {"HoldReason": "Error from slot2: the job ad has no Cmd",
                     "HoldReasonCode": 14, "HoldReasonSubCode": 0}


def test_the_hold_table_shows_when_and_why_in_full():
    reason = "Error from slot1@host: " + "x" * 150
    ad = {"ClusterId": 7, "ProcId": 2, "Owner": "ann", "JobStatus": 5,
          "EnteredCurrentStatus": 1_700_000_000, "HoldReason": reason}
    row = tables.hold_row(ad, now=1_700_000_100)
    assert row == ("7.2", "ann", tables.date_text(1_700_000_000), reason)
    console = Console(width=80, record=True)
    console.print(tables.hold_table([ad], now=1_700_000_100))
    text = console.export_text()
    assert "HOLD_REASON" in text and "HELD_SINCE" in text
    assert "".join(text.split()).count("x" * 150) == 1, text


def test_hold_selects_held_jobs():
    assert held_only(None) == "JobStatus == 5"
    assert held_only("Owner == \"ann\"") == "JobStatus == 5 && (Owner == \"ann\")"


# -- the broker stores and clears them (real Redis) -----------------------------

@pytest.fixture
def broker(redis_client, pool_name):
    return Broker(redis_client, pool_name, Config.load(environ={}))


def _claim(broker: Broker) -> tuple[str, str]:
    ad = broker.claim(SLOT)
    assert ad is not None
    return f"{ad['ClusterId']}.{ad['ProcId']}", ad["FetchworkClaim"]


def test_finish_stores_the_execute_sides_codes_and_release_clears_them(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = _claim(broker)
    failure = open_failure("/data/out.0", STANDARD_OUTPUT, _denied())
    assert broker.finish(job, token, "hold", {**hold_attributes(SLOT, 1, failure),
                                              "ExitReason": "not started"})
    ad = broker.get(job)
    assert ad["JobStatus"] == 5
    assert ad["HoldReason"] == ("Error from slot1@host: Failed to open '/data/out.0' as "
                                "standard output: Permission denied (errno 13)")
    assert ad["HoldReasonCode"] == 14 and ad["HoldReasonSubCode"] == 13
    assert broker.release([job]) == [job]
    ad = broker.get(job)
    assert ad["LastHoldReason"].endswith("(errno 13)")
    assert "HoldReason" not in ad and "HoldReasonCode" not in ad
    assert "HoldReasonSubCode" not in ad


def test_a_hold_without_codes_stays_the_job_policys(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = _claim(broker)
    assert broker.finish(job, token, "hold", {"HoldReason": "periodic hold"})
    ad = broker.get(job)
    assert ad["HoldReasonCode"] == HoldCode.JOB_POLICY and "HoldReasonSubCode" not in ad


def test_codes_are_only_for_holds(broker):
    broker.submit([{"Cmd": "x"}])
    job, token = _claim(broker)
    assert broker.finish(job, token, "exit", {"HoldReasonCode": 14, "HoldReasonSubCode": 13,
                                              "ExitCode": 0})
    ad = broker.get(job)
    assert ad["JobStatus"] == 4
    assert "HoldReasonCode" not in ad and "HoldReasonSubCode" not in ad


# -- end to end ----------------------------------------------------------------

@pytest.mark.timeout(240)
def test_an_output_file_the_job_cannot_open_holds_the_job_with_the_reason(job_tmp):
    env = pool_env(job_tmp / "state")
    up = Up(env, 1, job_tmp / "up.log")
    try:
        wait_until(lambda: fw(env, "status", check=False).stdout.count("slot") >= 1,
                   timeout_s=60, fail_if=up.died, what="the slot reported by fetchwork status")
        work = job_tmp / "work"
        work.mkdir()
        work.chmod(0o777)
        locked = work / "locked"
        locked.mkdir()
        locked.chmod(0o555)  # the job's user may not write here (root runs jobs as nobody)
        (work / "job.sub").write_text(
            "executable = /bin/echo\narguments = never\noutput = locked/out.$(Process)\n"
            "queue\n")
        fw(env, "submit", "job.sub", cwd=work)
        wait_until(lambda: [ad["JobStatus"] for ad in q_json(env)] == [5], timeout_s=90,
                   fail_if=up.died, what="the job held")
        [ad] = q_json(env)
        slot = ad["LastRemoteHost"]
        assert slot.startswith("slot1@"), ad
        reason = (f"Error from {slot}: Failed to open '{locked}/out.0' as standard output: "
                  "Permission denied (errno 13)")
        assert ad["HoldReason"] == reason
        assert ad["HoldReasonCode"] == 14 and ad["HoldReasonSubCode"] == 13
        assert not (locked / "out.0").exists()
        shown = fw(env, "q", "-hold").stdout
        assert "HOLD_REASON" in shown and "".join(shown.split()).count(
            "".join(reason.split())) == 1, shown
        assert f"{ad['ClusterId']}.{ad['ProcId']}" in shown
        assert [held["HoldReason"] for held in q_json(env, "--hold")] == [reason]
        assert history_json(env) == []
        assert up.stop() == 0, up.log_path.read_text()
    finally:
        if up.process.poll() is None:
            up.kill_all()
        fw(env, "redis", "stop", check=False)
