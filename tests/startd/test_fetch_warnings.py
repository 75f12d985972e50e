"""A fetch hook that fails or prints what is not a job ad is a WARNING with the
first line of its stderr; a job ad without ClusterId/ProcId runs under a
local id the log names. One real startd (`--once`), three slots, each with
its own fetch hook program that answers once.
"""

from __future__ import annotations

import re

import classad2
import pytest

from fetchwork.hooks.runner import HookResult, HookSpec
from fetchwork.startd.fetchoutput import Fetched, describe, log_level, note
from fetchwork.startd.slots.localid import name_if_anonymous
from fetchwork.startd.slots.slotad import LOCAL_ID_ATTR, job_label
from tests.support.startd import Pool, pool_root

pytestmark = pytest.mark.timeout(120)

# Each hook answers on its first call only (then no work), so `--once` ends.
_HOOK = """\
#!/bin/sh
[ -e "{marker}" ] && exit 0
touch "{marker}"
{body}
"""
FAILING = 'echo "cannot reach the queue at db:5432" >&2\necho "second line" >&2\nexit 3'
GARBAGE = 'echo "Cmd = = broken ["\necho "parser went wrong here" >&2'
ANONYMOUS = 'echo \'Cmd = "/bin/true"\''


@pytest.fixture(scope="module")
def log():
    with pool_root("fetch-warnings") as root:
        pool = Pool(root, "program")
        knobs = ["NUM_SLOTS = 3", "FetchWorkDelay = 0"]
        for slot, (name, body) in enumerate(
                [("FAILING", FAILING), ("GARBAGE", GARBAGE), ("ANON", ANONYMOUS)], start=1):
            hook = root / "hooks" / name.lower()
            hook.write_text(_HOOK.format(marker=root / f"{name}.done", body=body))
            hook.chmod(0o755)
            knobs += [f"SLOT{slot}_JOB_HOOK_KEYWORD = {name}", f"{name}_HOOK_FETCH_WORK = {hook}"]
        pool.write_config("\n".join(knobs) + "\n")
        assert pool.start("--once").wait(90) == 0, pool.log_text()
        yield pool.log_text()


def _lines(log: str, start: str) -> list[str]:
    return [line for line in log.splitlines() if start in line]


def test_a_fetch_hook_that_exits_non_zero_is_a_warning_with_its_stderr(log):
    [line] = [x for x in _lines(log, "slot1: fetch hook") if "exit 3" in x]
    assert "WARNING" in line and "exit 3" in line, line
    assert "stderr: cannot reach the queue at db:5432" in line, line
    assert "second line" not in line


def test_a_fetch_hook_printing_no_ad_is_a_warning_with_its_stderr(log):
    [line] = [x for x in _lines(log, "slot2: fetch hook") if "rejected" in x]
    assert "WARNING" in line and "not a ClassAd" in line and "job (no id)" in line, line
    assert "stderr: parser went wrong here" in line, line


def test_a_job_ad_without_ids_runs_under_a_named_local_id(log):
    [named] = _lines(log, "slot3: the fetched job ad has no ClusterId/ProcId")
    local_id = re.search(r"it is job (local\.\d+)", named)
    assert local_id is not None and LOCAL_ID_ATTR in named, named
    assert f"job {local_id.group(1)} accepted" in log, log
    # The move back to Idle says the job ended (and how), where a line of its own did.
    assert f"job {local_id.group(1)} ended; starter " in log, log
    assert "slot3: Claimed/Idle -> Claimed/Busy" in log


def test_an_ad_with_an_id_gets_no_local_id():
    ad = classad2.ClassAd({"ClusterId": 3, "ProcId": 1})
    assert name_if_anonymous(ad, "slot1") is None and LOCAL_ID_ATTR not in ad
    anonymous = classad2.ClassAd({"Cmd": "/bin/true"})
    given = name_if_anonymous(anonymous, "slot1")
    assert given is not None and job_label(anonymous) == given
    assert name_if_anonymous(anonymous, "slot1") is None  # named once


def _result(**fields: object) -> HookResult:
    return HookResult(spec=HookSpec("FETCH_WORK", "K", "/x"), argv=["/x"], **fields)  # type: ignore[arg-type]


def test_a_clean_fetch_logs_at_info_without_a_note():
    ok = _result(exit_code=0, stderr="chatter\n")
    assert log_level(ok, Fetched()) == 20 and note(ok, Fetched()) == ""
    bad = _result(exit_code=0, stderr="\n  \nfirst\nsecond\n")
    assert log_level(bad, Fetched(bad_reason="x")) == 30
    assert describe(bad) == "exit 0; stderr: first"
