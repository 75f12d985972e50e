"""The user's edit of a job attribute (condor_qedit): which attributes may change
(store/editable.py, pure) and qedit.lua against a real Redis: the value is stored,
a new JobPrio reorders the idle set, an attribute a match reads takes the job out
of its autocluster so a claim sees the new value, finished jobs are left alone."""

from __future__ import annotations

import classad2
import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.store import editable
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.errors import AdError, EditError

SLOT = parse_ad('Name = "slot1@edit"\nMemory = 1000\nCpus = 1\nSTART = true\n')


@pytest.fixture
def broker(redis_client, pool_name) -> Broker:
    return Broker(redis_client, pool_name, Config.load(environ={}))


# -- which attributes (pure) ------------------------------------------------------

@pytest.mark.parametrize("attr", ["Owner", "ClusterId", "procid", "MyType", "TargetType",
                                  "JobUniverse", "AccountingGroup"])
def test_htcondors_immutable_attributes_are_refused(attr: str) -> None:
    assert "immutable" in (editable.refusal(attr) or "")


@pytest.mark.parametrize("attr", ["JobStatus", "FetchworkState", "HoldReason", "RemoteHost",
                                  "FetchworkOrder", "FetchworkAutocluster", "JobRunCount"])
def test_attributes_the_broker_keeps_are_refused(attr: str) -> None:
    assert "kept by the broker" in (editable.refusal(attr) or "")


@pytest.mark.parametrize("attr", ["", "1abc", "a b", "My.Attr", "x-y"])
def test_names_that_are_no_attribute_are_refused(attr: str) -> None:
    assert "not an attribute name" in (editable.refusal(attr) or "")


@pytest.mark.parametrize("attr", ["JobPrio", "Requirements", "RequestMemory", "Foo",
                                  "PeriodicHold", "JobBatchName"])
def test_ordinary_attributes_may_change(attr: str) -> None:
    assert editable.refusal(attr) is None


def test_values_are_classad_expressions_as_condor_qedit_takes_them() -> None:
    assert editable.stored_value("A", "10") == 10
    assert editable.stored_value("A", '"ten"') == "ten"
    assert editable.stored_value("A", "true") is True
    assert editable.stored_value("A", "TARGET.Memory > 10") == {"$expr": "TARGET.Memory > 10"}
    assert editable.stored_value("A", classad2.ExprTree("1 + 2")) == {"$expr": "1 + 2"}
    with pytest.raises(AdError, match="not a ClassAd expression"):
        editable.stored_value("A", "((")


def test_priority_group_is_minus_the_clamped_prio_for_jobprio_only() -> None:
    assert editable.priority_group("JobPrio", 5) == -5
    assert editable.priority_group("jobprio", 10**9) == -(2**18 - 1)
    assert editable.priority_group("JobPrio", {"$expr": "x"}) == 0
    assert editable.priority_group("Foo", 5) is None


# -- qedit.lua on a real Redis ------------------------------------------------------

def test_edit_stores_the_value_on_queued_jobs(broker: Broker) -> None:
    ids = broker.submit([{"Cmd": "/bin/true"}] * 2)
    assert broker.edit(ids, "Tag", '"new"') == ids
    assert [broker.get(job)["Tag"] for job in ids] == ["new", "new"]
    assert broker.edit(ids[:1], "tag", "7") == ids[:1]  # names ignore case
    ad = broker.get(ids[0])
    assert ad["Tag"] == 7 and [name for name in ad.keys() if name.lower() == "tag"] == ["tag"]


def test_a_refused_attribute_changes_nothing(broker: Broker) -> None:
    ids = broker.submit([{"Cmd": "/bin/true"}])
    with pytest.raises(EditError, match="immutable"):
        broker.edit(ids, "Owner", '"mallory"')
    with pytest.raises(EditError, match="not a ClassAd expression"):
        broker.edit(ids, "Foo", "((")
    assert broker.get(ids[0])["Owner"] != "mallory"


def test_a_new_jobprio_reorders_the_idle_set(broker: Broker) -> None:
    ids = broker.submit([{"Cmd": "/bin/true"}] * 3)
    broker.edit(ids[2:], "JobPrio", "5")
    first = broker.claim(SLOT)
    assert first is not None and first["ProcId"] == 2 and first["JobPrio"] == 5
    broker.edit(ids[:1], "JobPrio", "-1")
    second = broker.claim(SLOT)
    assert second is not None and second["ProcId"] == 1


def test_an_attribute_a_match_reads_is_seen_by_the_next_claim(broker: Broker) -> None:
    ids = broker.submit([{"Cmd": "/bin/true", "RequestMemory": 10}] * 2)
    broker.edit(ids[:1], "RequestMemory", "5000")  # more than the slot has
    got = broker.claim(SLOT)
    assert got is not None and got["ProcId"] == 1
    assert broker.claim(SLOT) is None
    broker.edit(ids[:1], "RequestMemory", "100")
    got = broker.claim(SLOT)
    assert got is not None and got["ProcId"] == 0


def test_held_and_running_jobs_are_edited_and_finished_ones_are_not(broker: Broker) -> None:
    ids = broker.submit([{"Cmd": "/bin/true"}] * 3)
    broker.hold(ids[:1])
    running = broker.claim(SLOT)
    assert running is not None
    broker.remove([ids[2]])
    edited = broker.edit(ids, "Tag", "1")
    assert edited == ids[:2]
    assert broker.get(ids[2]).get("Tag") is None


def test_an_edit_does_not_restart_a_jobs_measured_wait(broker: Broker) -> None:
    from fetchwork.broker.metrics import BrokerMetrics

    metrics = BrokerMetrics(broker, recount_interval_s=60)
    ids = broker.submit([{"Cmd": "/bin/true"}])
    metrics.observe("1000-0", {"type": "submit", "job": ids[0], "state": "IDLE"})
    metrics.observe("5000-0", {"type": "edit", "job": ids[0], "state": "IDLE", "attr": "A"})
    metrics.observe("9000-0", {"type": "claim", "job": ids[0], "state": "RUNNING"})
    waited = metrics.registry.get_sample_value("fetchwork_claim_latency_seconds_sum")
    assert waited == 8.0
    assert metrics.registry.get_sample_value("fetchwork_events_total", {"type": "edit"}) == 1


@pytest.mark.parametrize("state", ["IDLE", "HELD", "RUNNING", "SUSPENDED", "BLOCKED"])
def test_an_edit_writes_nothing_to_the_job_event_log(state: str) -> None:
    from fetchwork.broker.userlog.events import bodies

    event = {"type": "edit", "job": "1.0", "state": state, "status": "1", "attr": "A"}
    assert bodies(event, {"ClusterId": 1, "ProcId": 0}, "host") == []


@pytest.mark.parametrize("attr, hint", [("Depends", "depends_on"),
                                        ("HoldUntil", "hold --until")])
def test_attributes_acted_on_only_at_submission_are_refused(attr: str, hint: str) -> None:
    assert hint in (editable.refusal(attr) or "")


def test_a_new_periodic_expression_is_judged_by_the_periodic_pass(broker: Broker) -> None:
    from fetchwork.broker.jobpolicy.periodic import PeriodicPolicy

    ids = broker.submit([{"Cmd": "/bin/true"}] * 2)
    assert broker.client.zcard(broker.keys.periodic) == 0
    broker.edit(ids[1:], "PeriodicHold", "JobStatus == 1")
    broker.edit(ids[:1], "Tag", "1")
    assert broker.store.ids(broker.client.zrange(broker.keys.periodic, 0, -1)) == ids[1:]
    PeriodicPolicy(broker.store, interval_s=60).run_pass()
    assert [broker.get(job)["JobStatus"] for job in ids] == [1, 5]
