"""The startd's pure parts: slot states, the slot ad, accept/reject, fetch timing."""

from __future__ import annotations

import math
import os
import subprocess

import pytest

from fetchwork.config import ads
from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError, SlotStateError
from fetchwork.startd import acceptance, fetchdelay, fetchoutput, running
from fetchwork.startd.acceptance import Verdict
from fetchwork.startd.fetchdelay import FetchClock
from fetchwork.startd.settings import RETIRED_KNOBS, StartdSettings, retired_knobs, slot_hooks
from fetchwork.startd.shutdown import KILL_WAIT_S, ShutdownPlan
from fetchwork.startd.slots.slotad import (
    ClaimView,
    MachineFacts,
    SlotPolicy,
    job_id_of,
    job_label,
    read_policy,
)
from fetchwork.startd.starters.sandboxes import remove_stale_sandboxes, sandbox_name
from fetchwork.startd.states import (
    Activity,
    SlotStatus,
    State,
    can_transition,
    initial_status,
    transition,
)
from tests.support.slotads import build_slot_ad

FACTS = MachineFacts(machine="host.example", opsys="LINUX", arch="X86_64", cpus=4,
                     memory_mb=8000, disk_kb=4_000_000, load_avg=2.0)


def status(state: State, activity: Activity = Activity.IDLE) -> SlotStatus:
    return SlotStatus(state, activity, 100.0, 100.0)


def slot_ad(state: State = State.UNCLAIMED, activity: Activity = Activity.IDLE,
            start: str = "true", rank: str = "0", **extra: str):
    return build_slot_ad(2, "host", 2, FACTS, status(state, activity),
                         SlotPolicy(start=start, rank=rank, extra_attrs=extra), now=1000.0)


def job(text: str = "") -> object:
    return ads.parse_ad('Cmd = "/bin/true"\n' + text)


# -- states ----------------------------------------------------------------

def test_new_slot_starts_in_owner_idle():
    assert initial_status(5.0) == SlotStatus(State.OWNER, Activity.IDLE, 5.0, 5.0)


def test_claim_lifecycle_edges():
    s = transition(initial_status(0.0), State.UNCLAIMED, Activity.IDLE, 1.0)
    s = transition(s, State.CLAIMED, Activity.IDLE, 2.0)
    s = transition(s, State.CLAIMED, Activity.BUSY, 3.0)
    assert (s.entered_state_at, s.entered_activity_at) == (2.0, 3.0)
    s = transition(s, State.CLAIMED, Activity.SUSPENDED, 4.0)
    s = transition(s, State.CLAIMED, Activity.BUSY, 5.0)
    s = transition(s, State.PREEMPTING, Activity.VACATING, 6.0)
    s = transition(s, State.PREEMPTING, Activity.KILLING, 7.0)
    assert s.entered_state_at == 6.0
    s = transition(s, State.OWNER, Activity.IDLE, 8.0)
    assert str(s) == "Owner/Idle" and s.entered_state_at == 8.0


@pytest.mark.parametrize("start, end", [
    ((State.OWNER, Activity.IDLE), (State.CLAIMED, Activity.IDLE)),
    ((State.UNCLAIMED, Activity.IDLE), (State.CLAIMED, Activity.BUSY)),
    ((State.UNCLAIMED, Activity.IDLE), (State.PREEMPTING, Activity.VACATING)),
    ((State.PREEMPTING, Activity.KILLING), (State.PREEMPTING, Activity.VACATING)),
    ((State.PREEMPTING, Activity.VACATING), (State.UNCLAIMED, Activity.IDLE)),
])
def test_missing_edges_are_refused(start, end):
    assert not can_transition(status(*start), *end)
    with pytest.raises(SlotStateError):
        transition(status(*start), *end, now=1.0)


# -- slot ad ---------------------------------------------------------------

def test_slot_ad_carries_the_required_attributes():
    ad = slot_ad(State.CLAIMED, Activity.BUSY, start="TARGET.Owner =!= \"bob\"", rank="2")
    for name in ("Name", "SlotID", "Machine", "State", "Activity", "Cpus", "Memory", "Disk",
                 "OpSys", "Arch", "LoadAvg", "TotalSlots", "EnteredCurrentState", "Start",
                 "Rank"):
        assert name in ad, name
    assert ad["Name"] == "slot2@host"
    assert ad["SlotID"] == 2 and ad["TotalSlots"] == 2
    assert (ad["State"], ad["Activity"]) == ("Claimed", "Busy")
    assert (ad["Cpus"], ad["Memory"], ad["Disk"]) == (2, 4000, 2_000_000)
    assert ad["LoadAvg"] == 1.0
    assert ad["EnteredCurrentState"] == 100
    assert ads.unparse(ad.lookup("Start")) == ads.unparse(ads.parse_expr('TARGET.Owner =!= "bob"'))


def test_slot_ad_round_trips_through_text():
    ad = slot_ad(MemoryLimit="Memory * 2", Site='"cern"')
    back = ads.parse_ad(ads.format_ad(ad))
    # The same attribute names (case-insensitive) and the same expression texts.
    assert {name.lower() for name in back.keys()} == {name.lower() for name in ad.keys()}
    assert all(ads.attr_text(back, name) == ads.attr_text(ad, name) for name in ad.keys())
    assert ads.evaluate_attr(back, "MemoryLimit") == 8000
    assert back["Site"] == "cern"


def test_startd_attrs_cannot_override_builtin_attributes():
    ad = slot_ad(State="\"Hacked\"")
    assert ad["State"] == "Unclaimed"


def test_claim_attributes_are_published():
    ad = build_slot_ad(1, "h", 1, FACTS, status(State.CLAIMED, Activity.BUSY), SlotPolicy(),
                       now=10.0, claim=ClaimView(job_id="3.1", rank=5.0, job_started_at=9.0))
    assert (ad["JobId"], ad["CurrentRank"], ad["JobStart"]) == ("3.1", 5.0, 9)


def test_read_policy_takes_start_rank_and_startd_attrs():
    config = Config.from_text('START = Owner == "x"\nRANK = 3\nSTARTD_ATTRS = Site, Nope\n'
                              'Site = "here"\n')
    got = read_policy(config)
    assert (got.start, got.rank, dict(got.extra_attrs)) == ('Owner == "x"', "3",
                                                            {"Site": '"here"'})


def test_startd_attrs_per_slot_value():
    config = Config.from_text("STARTD_ATTRS = Site\nSite = 1\nSLOT2_Site = 2\n")
    assert read_policy(config, 1).extra_attrs == {"Site": "1"}
    assert read_policy(config, 2).extra_attrs == {"Site": "2"}


def test_job_id_of():
    assert job_id_of(job("ClusterId = 4\nProcId = 2")) == "4.2"
    assert job_id_of(job('GlobalJobId = "g#1"')) == "g#1"
    assert job_id_of(job()) is None
    assert job_label(job()) == "(no id)"
    assert job_label(job("ClusterId = 4\nProcId = 2")) == "4.2"


# -- fetch output ----------------------------------------------------------

def test_empty_output_is_no_work():
    assert fetchoutput.read_fetch_output("").empty
    assert fetchoutput.read_fetch_output("  \n\n").empty


def test_a_job_ad_is_work():
    got = fetchoutput.read_fetch_output('Cmd = "/bin/echo"\nOwner = "ann"\n')
    assert got.found_work and got.job_ad["Owner"] == "ann"


@pytest.mark.parametrize("text, why", [
    ("this is not an ad\n", "not a ClassAd"),
    ('Owner = "ann"\n', "no Cmd"),
])
def test_bad_output_is_rejected(text, why):
    got = fetchoutput.read_fetch_output(text)
    assert not got.found_work and not got.empty and why in got.bad_reason


def test_output_of_a_hook_that_did_not_finish_is_bad():
    assert fetchoutput.read_fetch_output('Cmd = "/x"', failure="timed out").bad_reason
    assert fetchoutput.read_fetch_output("", failure="timed out").empty
    assert fetchoutput.read_fetch_output("x" * 10, output_too_large=True).bad_reason


# -- decisions -------------------------------------------------------------

def test_unclaimed_and_start_true_accepts():
    got = acceptance.decide(status(State.UNCLAIMED), slot_ad(), job(), None)
    assert got.verdict is Verdict.ACCEPT and got.reply == "accept"


def test_start_false_for_the_job_rejects():
    ad = slot_ad(start='TARGET.Owner == "ann"')
    got = acceptance.decide(status(State.UNCLAIMED), ad, job('Owner = "bob"'), None)
    assert got.verdict is Verdict.REJECT and "START" in got.reason


def test_job_requirements_are_checked_against_the_slot():
    got = acceptance.decide(status(State.UNCLAIMED), slot_ad(),
                            job("Requirements = TARGET.Memory > 1000000"), None)
    assert got.verdict is Verdict.REJECT and "Requirements" in got.reason
    ok = acceptance.decide(status(State.UNCLAIMED), slot_ad(),
                           job("Requirements = TARGET.Memory > 1"), None)
    assert ok.verdict is Verdict.ACCEPT


def test_undefined_start_rejects():
    ad = slot_ad(start="TARGET.NoSuchAttr")
    assert acceptance.decide(status(State.UNCLAIMED), ad, job(), None).verdict is Verdict.REJECT


def test_idle_claim_is_reused():
    got = acceptance.decide(status(State.CLAIMED), slot_ad(State.CLAIMED), job(), None)
    assert got.verdict is Verdict.ACCEPT


@pytest.mark.parametrize("current, verdict", [(0.0, Verdict.PREEMPT), (5.0, Verdict.REJECT),
                                              (9.0, Verdict.REJECT)])
def test_claimed_busy_compares_rank(current, verdict):
    ad = slot_ad(State.CLAIMED, Activity.BUSY, rank="TARGET.Prio")
    got = acceptance.decide(status(State.CLAIMED, Activity.BUSY), ad, job("Prio = 5"), current)
    assert got.verdict is verdict and got.rank == 5.0


@pytest.mark.parametrize("pair", [(State.OWNER, Activity.IDLE),
                                  (State.PREEMPTING, Activity.VACATING)])
def test_unavailable_slot_rejects(pair):
    got = acceptance.decide(status(*pair), slot_ad(*pair), job(), None)
    assert got.verdict is Verdict.REJECT and "unavailable" in got.reason


def test_rank_that_is_not_a_number_counts_as_zero():
    assert acceptance.job_rank(slot_ad(rank="TARGET.Missing"), job()) == 0.0


def test_start_is_false_only_when_false_without_a_job():
    assert acceptance.start_is_false(slot_ad(start="false"))
    assert acceptance.start_is_false(slot_ad(start="LoadAvg > 100 || false && true"))
    assert not acceptance.start_is_false(slot_ad(start="TARGET.Owner == \"x\""))
    assert not acceptance.start_is_false(slot_ad(start="true"))


# -- fetch timing ----------------------------------------------------------

EXAMPLE = 'ifThenElse(State == "Claimed" && Activity == "Idle", 0, 300)'


def test_fetch_work_delay_uses_slot_state():
    assert fetchdelay.fetch_delay_s(EXAMPLE, slot_ad(State.CLAIMED), None) == (0, None)
    assert fetchdelay.fetch_delay_s(EXAMPLE, slot_ad(), None) == (300, None)


def test_fetch_work_delay_sees_the_running_job_as_target():
    ad = slot_ad(State.CLAIMED, Activity.BUSY)
    assert fetchdelay.fetch_delay_s("TARGET.Delay * 2", ad, job("Delay = 7"))[0] == 14


def test_fetch_work_delay_that_is_not_a_number_defaults_to_300():
    delay, problem = fetchdelay.fetch_delay_s('"soon"', slot_ad(), None)
    assert delay == 300 and problem
    assert fetchdelay.fetch_delay_s("TARGET.X", slot_ad(), None)[0] == 300


@pytest.mark.parametrize(("expr", "reads"), [
    (EXAMPLE, {("", "State"), ("", "Activity")}),
    ("TARGET.Delay * 2 + MY.Cpus", {("target", "Delay"), ("my", "Cpus")}),
    ('ifThenElse(Owner == "time()", 1, 2)', {("", "Owner")}),  # a string, not a call
    ("300", set()),
    ("time() + 5", None),
    ("random(10)", None),
    ("CurrentTime - EnteredCurrentState", None),
    ("Foo.Bar", None),
    ("1.5e3 + X is undefined", {("", "X")}),  # no name in a number, no keyword
    ("MY.Foo(3)", None),
])
def test_fetch_work_delay_reads_only_its_attributes_or_not(expr, reads):
    found = fetchdelay.reads_only(expr)
    assert (None if found is None else set(found)) == reads


def test_the_delay_memo_evaluates_again_only_when_what_it_reads_changes(monkeypatch):
    calls = []
    real = fetchdelay.fetch_delay_s
    monkeypatch.setattr(fetchdelay, "fetch_delay_s",
                        lambda *args: calls.append(args) or real(*args))
    memo = fetchdelay.DelayMemo(EXAMPLE)
    idle, busy = slot_ad(State.CLAIMED), slot_ad(State.CLAIMED, Activity.BUSY)
    later = slot_ad(State.CLAIMED)
    later["MyCurrentTime"] = 5000  # not read by the expression
    assert memo.delay_s(idle, None) == (0, None) and len(calls) == 1
    assert memo.delay_s(later, job()) == (0, None) and len(calls) == 1
    assert memo.delay_s(busy, None) == (300, None) and len(calls) == 2
    assert memo.delay_s(idle, None) == (0, None) and len(calls) == 2
    # An attribute it reads that is an expression: evaluated each time, as it was.
    odd = slot_ad(State.CLAIMED)
    odd["Activity"] = ads.parse_expr('"Id" + "le"')
    memo.delay_s(odd, None)
    memo.delay_s(odd, None)
    assert len(calls) == 4


def test_the_delay_memo_tells_true_from_one_and_the_job_from_none():
    memo = fetchdelay.DelayMemo("ifThenElse(TARGET.Flag =?= true, 10, 20)")
    ad = slot_ad(State.CLAIMED)
    assert memo.delay_s(ad, job("Flag = 1"))[0] == 20
    assert memo.delay_s(ad, job("Flag = true"))[0] == 10
    assert memo.delay_s(ad, None)[0] == 20
    clock = fetchdelay.DelayMemo("time() % 2 + 1")  # never kept: the clock moves
    assert clock.delay_s(ad, None)[0] in (1, 2)


def test_first_fetch_is_due_at_once():
    assert fetchdelay.fetch_due_at(FetchClock(), 300, 1) == -math.inf


def test_delay_counts_from_the_end_of_the_last_fetch():
    clock = FetchClock()
    clock.started()
    assert fetchdelay.fetch_due_at(clock, 300, 1) is None
    clock.finished(50.0, found_work=True)
    assert fetchdelay.fetch_due_at(clock, 300, 1) == 350.0
    assert fetchdelay.fetch_due_at(clock, 0, 1) == 50.0


def test_empty_fetch_is_not_repeated_sooner_than_the_min_interval():
    clock = FetchClock()
    clock.finished(50.0, found_work=False)
    assert fetchdelay.fetch_due_at(clock, 0, 1) == 51.0
    assert fetchdelay.fetch_due_at(clock, -5, 1) == 51.0
    assert fetchdelay.fetch_due_at(clock, 10, 1) == 60.0


def test_the_min_interval_counts_from_the_start_of_an_empty_fetch():
    # A hook that answers at once waits out the interval; a long poll that waited
    # longer is followed at once, so the idle slot listens again without a gap.
    clock = FetchClock()
    clock.started(50.0)
    clock.finished(50.01, found_work=False, empty=True)
    assert fetchdelay.fetch_due_at(clock, 0, 0.2) == pytest.approx(50.2)
    clock.started(60.0)
    clock.finished(65.0, found_work=False, empty=True)
    assert fetchdelay.fetch_due_at(clock, 0, 0.2) == 65.0
    assert fetchdelay.fetch_due_at(clock, 10, 0.2) == 75.0  # FetchWorkDelay still counts


def test_job_end_makes_the_fetch_due_at_once():
    clock = FetchClock()
    clock.finished(50.0, found_work=False)
    clock.due_now = True
    assert fetchdelay.fetch_due_at(clock, 300, 1) == -math.inf
    clock.started()
    assert not clock.due_now


@pytest.mark.parametrize("pair, start_false, expected", [
    ((State.UNCLAIMED, Activity.IDLE), False, True),
    ((State.CLAIMED, Activity.IDLE), False, True),
    ((State.CLAIMED, Activity.BUSY), False, True),
    ((State.UNCLAIMED, Activity.IDLE), True, False),
    ((State.OWNER, Activity.IDLE), False, False),
    ((State.PREEMPTING, Activity.VACATING), False, False),
])
def test_may_fetch(pair, start_false, expected):
    assert fetchdelay.may_fetch(status(*pair), start_false) is expected


# -- shutdown timeline -----------------------------------------------------

def test_graceful_shutdown_timeline():
    plan = ShutdownPlan.begin(fast=False, now=10.0, grace_s=60.0)
    assert not plan.hard_stop_due(69.0) and plan.hard_stop_due(70.0)
    assert plan.next_deadline() == 70.0
    plan.hard_stop_sent(70.0)
    assert not plan.hard_stop_due(80.0)
    assert not plan.give_up_due(70.0 + KILL_WAIT_S - 0.1) and plan.give_up_due(70.0 + KILL_WAIT_S)


def test_fast_request_shortens_a_graceful_shutdown_never_the_reverse():
    graceful = ShutdownPlan.begin(fast=False, now=0.0, grace_s=60.0)
    fast = ShutdownPlan.begin(fast=True, now=5.0, grace_s=5.0, previous=graceful)
    assert fast.fast and fast.deadline == 10.0
    late = ShutdownPlan.begin(fast=True, now=0.0, grace_s=100.0, previous=graceful)
    assert late.deadline == 60.0


# -- per-slot hooks ----------------------------------------------------------

def test_slot_keyword_and_its_hooks(config_with_defaults):
    config = config_with_defaults(
        "STARTD_JOB_HOOK_KEYWORD = DATABASE\nSLOT4_JOB_HOOK_KEYWORD = WEB\n"
        "DATABASE_HOOK_FETCH_WORK = /db/fetch\nDATABASE_HOOK_REPLY_FETCH = /db/reply\n"
        "DATABASE_HOOK_FETCH_WORK_TIMEOUT = 7\nWEB_HOOK_FETCH_WORK = python:web:fetch\n"
        "WEB_HOOK_EVICT_CLAIM = /web/evict\nHOOK_OUTPUT_LIMIT = 100\n"
        "HOOK_TIMEOUT_FETCH_WORK = 60\nHOOK_TIMEOUT_REPLY_FETCH = 60\n"
        "HOOK_TIMEOUT_EVICT_CLAIM = 60\n")
    db, web = slot_hooks(config, 1), slot_hooks(config, 4)
    assert (db.keyword, db.fetch.value, db.fetch.timeout_s) == ("DATABASE", "/db/fetch", 7.0)
    assert db.reply.value == "/db/reply" and db.evict is None
    assert (web.keyword, web.fetch.value, web.reply, web.evict.value) == (
        "WEB", "python:web:fetch", None, "/web/evict")


def test_without_a_fetch_hook_no_startd_hook_runs():
    config = Config.from_text("STARTD_JOB_HOOK_KEYWORD = K\nK_HOOK_REPLY_FETCH = /r\n"
                              "HOOK_OUTPUT_LIMIT = 100\n")
    hooks = slot_hooks(config, 1)
    assert (hooks.fetch, hooks.reply, hooks.evict) == (None, None, None)
    assert slot_hooks(Config.from_text(""), 1).keyword is None


# -- running job policy ------------------------------------------------------

RULES = running.RunningPolicy(want_suspend="true", suspend="TARGET.Heavy =?= true",
                             continue_="TARGET.Heavy =!= true", preempt="TARGET.Kill =?= true")


@pytest.mark.parametrize("activity, job_text, expected", [
    (Activity.BUSY, "", None),
    (Activity.BUSY, "Heavy = true", running.RunAction.SUSPEND),
    (Activity.BUSY, "Kill = true", running.RunAction.VACATE),
    (Activity.SUSPENDED, "Heavy = true", None),
    (Activity.SUSPENDED, "Heavy = false", running.RunAction.CONTINUE),
    (Activity.SUSPENDED, "Heavy = true\nKill = true", running.RunAction.VACATE),
    (Activity.IDLE, "Kill = true", None),
])
def test_running_action(activity, job_text, expected):
    ad = slot_ad(State.CLAIMED, activity)
    assert running.running_action(status(State.CLAIMED, activity), ad, job(job_text),
                                 RULES) is expected


def test_suspend_is_ignored_without_want_suspend():
    rules = running.RunningPolicy(suspend="true", preempt="true")
    got = running.running_action(status(State.CLAIMED, Activity.BUSY),
                                slot_ad(State.CLAIMED, Activity.BUSY), job(), rules)
    assert got is running.RunAction.VACATE


def test_stale_sandboxes_of_dead_startds_are_removed(tmp_path):
    dead = subprocess.Popen(["/bin/true"])
    dead.wait()
    for name in (sandbox_name(dead.pid, 1, 1), sandbox_name(os.getpid(), 1, 1),
                 sandbox_name(1, 2, 3), "unrelated"):
        (tmp_path / name).mkdir()
    removed = remove_stale_sandboxes(str(tmp_path))
    assert removed == [str(tmp_path / sandbox_name(dead.pid, 1, 1))]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [sandbox_name(os.getpid(), 1, 1), sandbox_name(1, 2, 3), "unrelated"])


def test_settings_refuse_an_unparsable_start_with_its_source():
    config = Config.from_text("NUM_SLOTS = 1\nEXECUTE = /x\nLOG = /y\nSTART = (((\n", "cfg")
    with pytest.raises(ConfigError, match="cfg"):
        StartdSettings.from_config(config)


def test_a_retired_knob_still_set_is_named_with_where_it_is_set(config_with_defaults):
    assert retired_knobs(config_with_defaults("EXECUTE = /x\nLOG = /y\n")) == []
    config = config_with_defaults("EXECUTE = /x\nLOG = /y\nSTARTER_ZYGOTE = false\n")
    [warning] = retired_knobs(config)
    assert warning.startswith("STARTER_ZYGOTE (") and "fetchwork.conf, line 3)" in warning
    assert "no longer means anything and is ignored" in warning


def test_settings_warn_of_a_retired_knob_and_go_on(config_with_defaults, caplog):
    config = config_with_defaults("EXECUTE = /x\nLOG = /y\nSTARTER_ZYGOTE = false\n")
    with caplog.at_level("WARNING", logger="fetchwork.startd.settings"):
        settings = StartdSettings.from_config(config)
    assert settings.starter_standby == config.get_int("STARTER_STANDBY")
    assert [record.getMessage().split(" ", 1)[0] for record in caplog.records] == [
        "STARTER_ZYGOTE"]


def test_no_retired_knob_is_in_defaults_conf(config_with_defaults):
    config = config_with_defaults("")
    assert not [name for name in RETIRED_KNOBS if name in config]


def test_settings_take_unset_knobs_from_defaults_conf(config_with_defaults):
    config = config_with_defaults("EXECUTE = /x\nLOG = /y\n")
    settings = StartdSettings.from_config(config)
    # defaults.conf: NUM_SLOTS = $(DETECTED_CPUS), as in HTCondor.
    assert settings.num_slots == config.get_int("DETECTED_CPUS")
    assert settings.max_vacate_s == config.get_float("MachineMaxVacateTime")
    assert settings.running.continue_ == config.get("CONTINUE")
