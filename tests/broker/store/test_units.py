"""Pure parts of the broker: ids, priorities, matching, submitted ads, service timing."""

from __future__ import annotations

import pytest

from fetchwork.broker.leader.service import reap_due, tick_interval_s
from fetchwork.broker.store import scripts
from fetchwork.broker.store.jobads import (
    caller_attrs,
    identity,
    place,
    prepare_submitted,
    slot_name,
)
from fetchwork.broker.store.keys import PoolKeys
from fetchwork.broker.store.states import (
    JOB_STATUS,
    PRIO_BOUND,
    PRIO_SCALE,
    State,
    clamp_prio,
    idle_order,
    is_managed,
)
from fetchwork.config.ads import from_dict, parse_ad
from fetchwork.config.matching import matches
from fetchwork.config.protocol import HoldCode, JobStatus, parse_job_id
from fetchwork.errors import JobIdError


def test_job_ids_and_clusters_parse():
    assert parse_job_id("12.3") == (12, 3)
    assert parse_job_id(" 7 ") == (7, None)


@pytest.mark.parametrize("text", ["", "a.b", "1.", ".2", "1.2.3", "-1"])
def test_bad_job_ids_are_refused(text):
    with pytest.raises(JobIdError):
        parse_job_id(text)


def test_priorities_are_clamped_integers():
    assert clamp_prio(5) == 5
    assert clamp_prio(-3.7) == -3
    assert clamp_prio(10**12) == PRIO_BOUND
    assert clamp_prio(-(10**12)) == -PRIO_BOUND
    assert clamp_prio("high") == 0
    assert clamp_prio(True) == 0


def test_idle_order_score_stays_exact_at_the_bounds():
    worst = PRIO_BOUND * 2**34 + 2**33
    assert float(worst) == worst and worst < 2**53
    assert idle_order(-PRIO_BOUND, 2**33) == worst


def test_idle_order_puts_higher_priority_first_then_sequence():
    assert idle_order(5, 1_000_000) < idle_order(0, 1) < idle_order(0, 2) < idle_order(-1, 1)
    assert idle_order(2, 7) == -2 * PRIO_SCALE + 7


def test_lua_scripts_get_the_shared_constants_from_python():
    header = scripts.constants_header()
    assert f"local PRIO_SCALE = {PRIO_SCALE}\n" in header
    assert "local STATUS_HELD = 5\n" in header and "local HOLD_JOB_POLICY = 3\n" in header
    assert scripts.source("reject").startswith(header)
    assert scripts.source("read_ids") == scripts._read("read_ids")
    # Standalone readers of job ads get the cluster-ad merge (jobad.lua), and those
    # that return ads the packing of their reply (packads.lua).
    assert scripts.source("read_ads") == "".join(
        scripts._read(part) + "\n" for part in ("jobad", "packads")) + scripts._read("read_ads")
    assert scripts.source("read_fields") == scripts._read("jobad") + "\n" + scripts._read(
        "read_fields")
    for name in scripts.TRANSITIONS + scripts.LIBRARY:
        code = "\n".join(line for line in scripts._read(name).splitlines()
                         if not line.lstrip().startswith("--"))
        assert "17179869184" not in code and "2^34" not in code, name
        for number in {int(status) for status in JobStatus} | {int(c) for c in HoldCode}:
            for shape in (f"== {number}", f"~= {number}", f", {number})", f"and {number} "):
                assert shape not in code, (name, shape)


def test_htcondor_status_codes():
    assert JOB_STATUS[State.IDLE] == 1
    assert JOB_STATUS[State.RUNNING] == 2
    assert JOB_STATUS[State.REMOVED] == 3
    assert JOB_STATUS[State.COMPLETED] == 4
    assert JOB_STATUS[State.HELD] == 5
    assert JOB_STATUS[State.SUSPENDED] == 7
    assert JOB_STATUS[State.FAILED] == 3


def test_every_key_carries_the_pool_hash_tag():
    keys = PoolKeys("alpha")
    for key in (keys.job("1.0"), keys.queue, keys.idle, keys.running, keys.history, keys.events,
                keys.clusters, keys.cluster_counter, keys.seq_counter, keys.head_counter,
                keys.slot("slot1@h"), keys.slots, keys.leader):
        assert key.startswith("fw:{alpha}:")


@pytest.mark.parametrize("pool", ["", "a{b", "a:b", "a b"])
def test_pool_names_that_break_keys_are_refused(pool):
    with pytest.raises(ValueError):
        PoolKeys(pool)


SLOT = parse_ad('Name = "slot1@h"\nMemory = 1024\nSTART = TARGET.Owner =!= "mallory"\n')


def test_match_needs_both_requirements_and_start():
    job = parse_ad('Owner = "alice"\nRequirements = TARGET.Memory >= 512\n')
    assert matches(job, SLOT)
    assert not matches(parse_ad('Owner = "alice"\nRequirements = TARGET.Memory > 4096'),
                                SLOT)
    assert not matches(parse_ad('Owner = "mallory"\n'), SLOT)


def test_absent_expressions_accept_and_undefined_refuses():
    assert matches(parse_ad('Owner = "a"\n'), parse_ad('Name = "s"\n'))
    assert not matches(parse_ad("Requirements = TARGET.NoSuchAttr > 1\n"), SLOT)


def test_slot_name_falls_back():
    assert slot_name(SLOT) == "slot1@h"
    assert slot_name(parse_ad("Memory = 1\n")) == "unnamed-slot"


def prepare(data, owner=None):
    job = prepare_submitted(data, qdate_s=1000, default_lease_s=60)
    return place(job, identity("p", 4, 2, 1000, seq=9, prio=job.prio, owner=owner,
                               ad_owner=job.ad_owner, user="me"))


def test_identity_is_decided_once():
    attrs = identity("p", 4, 2, 1000, seq=9, prio=3, owner=None, ad_owner="bob", user="me")
    assert attrs == {"Owner": "bob", "ClusterId": 4, "ProcId": 2,
                     "GlobalJobId": "p#4.2#1000", "FetchworkOrder": idle_order(3, 9)}
    assert identity("p", 4, 2, 1000, 9, 3, "ann", "bob", "me")["Owner"] == "ann"
    assert identity("p", 4, 2, 1000, 9, 3, None, None, "me")["Owner"] == "me"


def test_placed_jobs_start_idle_or_held():
    job = prepare({"Cmd": "x"})
    assert job.attrs["FetchworkState"] == "IDLE" and job.attrs["JobStatus"] == 1
    assert job.attrs["EnteredCurrentStatus"] == 1000
    held = prepare({"Cmd": "x", "hold": True})
    assert held.attrs["FetchworkState"] == "HELD" and held.attrs["JobStatus"] == 5


def test_submitted_ads_get_htcondor_attributes():
    job = prepare({"Cmd": "/bin/true", "Owner": "bob"})
    assert job.job_id == "4.2" and job.prio == 0 and not job.held
    attrs = job.attrs
    assert attrs["ClusterId"] == 4 and attrs["ProcId"] == 2
    assert attrs["QDate"] == 1000 and attrs["Owner"] == "bob"
    assert attrs["GlobalJobId"] == "p#4.2#1000" and attrs["FetchworkOrder"] == 9
    assert attrs["JobPrio"] == 0 and attrs["JobLeaseDuration"] == 60
    assert attrs["Rerunnable"] is True


def test_submitted_ads_cannot_set_broker_attributes():
    job = prepare({"jobstatus": 4, "FetchworkState": "COMPLETED", "Cmd": "x"}, owner="eve")
    assert "jobstatus" not in job.attrs and job.attrs["JobStatus"] == 1
    assert job.attrs["FetchworkState"] == "IDLE"
    assert job.attrs["Owner"] == "eve"


def test_hold_command_and_priority_spellings():
    job = prepare({"HOLD": True, "jobprio": 7, "rerunnable": False})
    assert job.held and job.prio == 7
    assert job.attrs["JobPrio"] == 7 and job.attrs["Rerunnable"] is False
    assert job.attrs["HoldReasonCode"] == 15
    assert "HOLD" not in job.attrs


def test_expression_priority_and_hold_are_evaluated():
    job = prepare({"Base": 3, "JobPrio": {"$expr": "Base * 2"}, "hold": {"$expr": "Base > 1"}})
    assert job.prio == 6 and job.held
    assert job.attrs["JobPrio"] == {"$expr": "Base * 2"}


def test_caller_attrs_drop_managed_names():
    kept = caller_attrs({"ExitCode": 0, "JobStatus": 4, "remotehost": "x", "ImageSize": 10})
    assert kept == {"ExitCode": 0, "ImageSize": 10}
    assert is_managed("FETCHWORKCLAIM")


def test_service_timing_decisions():
    assert tick_interval_s(5, 15) == 5
    assert tick_interval_s(30, 15) == 5
    assert tick_interval_s(0, 0) == 0.05
    assert reap_due(100.0, None, 5)
    assert not reap_due(100.0, 97.0, 5)
    assert reap_due(102.0, 97.0, 5)


def test_every_script_documents_keys_and_argv():
    for name in scripts.TRANSITIONS + scripts.STANDALONE:
        lines = scripts._read(name).splitlines()
        header = "\n".join(line for line in lines[:lines.index(next(
            line for line in lines if not line.startswith("--")))])
        assert header.startswith(f"-- {name}.lua:"), name
        assert "KEYS" in header and "ARGV" in header, name
        assert "Returns" in header, name
        assert len(scripts.sha(name)) == 40


def test_from_dict_round_trip_of_a_matched_slot():
    assert matches(from_dict({"Requirements": {"$expr": "TARGET.Memory > 1"}}), SLOT)
