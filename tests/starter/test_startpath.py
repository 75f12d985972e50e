"""What the starter leaves until after the job's start, and what it still does first."""

from __future__ import annotations

import signal

import classad2

from tests.support.starter_bench import Bench, StarterRun
from tests.support.waiting import wait_until

IGNORES_TERM = """#!/bin/sh
trap 'echo got-term >> {record}' TERM
echo up > {up}
while :; do sleep 0.05; done
"""


def test_vacate_time_is_evaluated_with_the_prepare_hooks_ad(bench: Bench):
    """MachineMaxVacateTime is evaluated when the job is vacated (as HTCondor does),
    not before the job starts: here it names an attribute only the prepare hook
    adds, so a value taken at the start would fall back to the knob's 600 s."""
    record, up = bench.work / "record", bench.work / "up"
    script = bench.script("ignores.sh", IGNORES_TERM.format(record=record, up=up))
    slot_ad = classad2.ClassAd({"Name": "slot1@test", "SlotID": 1})
    slot_ad["MachineMaxVacateTime"] = classad2.ExprTree("TARGET.VacateAllowance")
    prepare = bench.hook("prepare", tail="echo 'VacateAllowance = 1'")
    run = StarterRun(bench.base, "vacate", {"Cmd": script},
                     {"T_HOOK_PREPARE_JOB": prepare, "MachineMaxVacateTime": "600"},
                     slot_ad=slot_ad)  # type: ignore[arg-type]
    bench.runs.append(run)
    run.event("started")
    wait_until(up.exists, 20, what="the job runs")
    run.send("vacate")
    wait_until(lambda: record.exists(), 20, what="the job got SIGTERM")
    exited = run.finish(30)
    assert exited["how"] == "evict"
    assert exited["ad"]["ExitSignal"] == signal.SIGKILL
    assert exited["ad"]["VacateAllowance"] == 1


def test_a_failed_prepare_hook_never_spawns_the_job(bench: Bench):
    marker = bench.work / "ran"
    prepare = bench.hook("prepare", tail="exit 3")
    run = bench.start({"Cmd": "/bin/sh", "Arguments": f"-c 'touch {marker}'"},
                      T_HOOK_PREPARE_JOB=prepare, T_HOOK_JOB_EXIT=bench.hook("exit"))
    exited = run.finish()
    assert exited["how"] == "evict"
    assert not marker.exists()
    assert [e["event"] for e in run.events] == ["exited"]
    assert "JobPid" not in exited["ad"]
    assert bench.recorded("exit", "args") == ["evict\n"]


def test_events_arrive_complete_and_in_order(bench: Bench):
    run = bench.start({"Cmd": "/bin/true"}, T_HOOK_PREPARE_JOB=bench.hook("prepare"))
    exited = run.finish()
    assert [e["event"] for e in run.events] == ["prepared", "started", "state", "exited"]
    started = next(e for e in run.events if e["event"] == "started")
    assert exited["ad"]["JobPid"] == started["pid"]
    assert [e["state"] for e in run.events if e["event"] == "state"] == ["Running"]
