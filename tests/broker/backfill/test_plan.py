"""Reservation and backfill-window arithmetic (broker/backfill/plan.py), with the
scheduler text's numbers: no Redis, no processes."""

from __future__ import annotations

import math
from datetime import UTC

import pytest

from fetchwork.broker.backfill.plan import (
    Machine,
    Reservation,
    Running,
    Verdict,
    Waiting,
    Window,
    decide,
    earliest_start,
    from_record,
    plan,
    to_record,
)
from fetchwork.broker.backfill.pool import (
    ideal_slots_by_machine,
    machines_of,
    running_of,
    waiting_of,
)
from fetchwork.config.resources import Resources
from fetchwork.submit.schedview import reservation_lines

NOW = 1_300_000_000.0
MINUTE = 60.0


def cpus(count: float, memory_mb: float = 0.0) -> Resources:
    return Resources(count, memory_mb, 0.0)


def machine(name: str, total_cpus: float, memory_mb: float = 16000.0) -> Machine:
    return Machine(name, cpus(total_cpus, memory_mb))


def running(job_id: str, on: str, count: float, minutes_left: float,
            exclusive: bool = False) -> Running:
    return Running(job_id, on, cpus(count), NOW + minutes_left * MINUTE, exclusive)


def waiting(job_id: str, order: float, count: float, minutes: float,
            exclusive: bool = False, machines: frozenset[str] | None = None) -> Waiting:
    return Waiting(job_id, order, cpus(count), minutes * MINUTE, exclusive, machines)


# The text: a 16-CPU machine (eight 2-CPU nodes); a job holds half of it for 15
# more minutes, so four 2-CPU nodes are idle for 15 minutes; the head job wants all 16.
NODES = [machine("m", 16)]
BUSY = [running("1.0", "m", 8, 15)]
HEAD = waiting("2.0", 2, 16, 60)


@pytest.fixture()
def reservation() -> Reservation:
    found = plan([HEAD], NODES, BUSY, NOW).reservation
    assert found is not None
    return found


def test_the_head_job_that_cannot_start_gets_the_machine_when_the_running_job_ends(
        reservation):
    assert (reservation.job_id, reservation.machine) == ("2.0", "m")
    assert reservation.start_at == NOW + 15 * MINUTE


def test_four_idle_two_cpu_nodes_for_15_minutes_make_a_4_by_15_window(reservation):
    assert reservation.window == Window(cpus(8, 16000), 15 * MINUTE)
    assert reservation.window.free.cpus / 2 == 4, "four 2-CPU nodes"


def test_an_8_cpu_10_minute_job_fits_the_window_exactly(reservation):
    assert reservation.window.fits(cpus(8), 10 * MINUTE)
    assert decide(waiting("3.0", 3, 8, 10), "m", reservation, NOW) is Verdict.WINDOW


@pytest.mark.parametrize("count, minutes", [(8, 16), (9, 10), (10, 15)])
def test_a_job_too_wide_or_too_long_for_the_window_is_held_back(reservation, count, minutes):
    assert not reservation.window.fits(cpus(count), minutes * MINUTE)
    assert decide(waiting("3.0", 3, count, minutes), "m", reservation, NOW) is Verdict.HELD_BACK


def test_the_window_shrinks_as_time_passes(reservation):
    later = NOW + 6 * MINUTE
    assert decide(waiting("3.0", 3, 8, 10), "m", reservation, later) is Verdict.HELD_BACK
    assert decide(waiting("3.0", 3, 8, 9), "m", reservation, later) is Verdict.WINDOW


def test_a_lower_job_on_another_machine_never_delays_the_reservation(reservation):
    verdict = decide(waiting("3.0", 3, 8, 600), "other", reservation, NOW)
    assert verdict is Verdict.ELSEWHERE and verdict.allowed and verdict.bypass


def test_a_higher_job_or_the_reserved_job_itself_is_not_behind_the_reservation(reservation):
    assert decide(waiting("0.5", 1, 8, 600), "m", reservation, NOW) is Verdict.AHEAD
    assert decide(HEAD, "m", reservation, NOW) is Verdict.AHEAD
    assert not Verdict.AHEAD.bypass


def test_a_long_job_may_use_what_the_reservation_does_not_need():
    # The head wants 12 of 16 CPUs: at its start 4 stay spare.
    found = plan([waiting("2.0", 2, 12, 60)], NODES, BUSY, NOW).reservation
    assert found is not None and found.spare.cpus == 4
    assert decide(waiting("3.0", 3, 4, 600), "m", found, NOW) is Verdict.SPARE
    assert decide(waiting("3.0", 3, 5, 600), "m", found, NOW) is Verdict.HELD_BACK


def test_with_backfill_off_no_lower_job_starts_anywhere(reservation):
    for on in ("m", "other"):
        assert decide(waiting("3.0", 3, 1, 1), on, reservation, NOW,
                      backfill=False) is Verdict.HELD_BACK
    assert decide(waiting("0.5", 1, 1, 1), "m", reservation, NOW, backfill=False).allowed


def test_no_reservation_while_the_head_job_fits_somewhere_now():
    result = plan([HEAD], NODES + [machine("big", 32)], BUSY, NOW)
    assert result.reservation is None and result.ahead == ("2.0",)


def test_jobs_that_fit_now_go_first_and_the_next_one_is_reserved_for():
    jobs = [waiting("2.0", 2, 8, 30), waiting("3.0", 3, 16, 60)]
    result = plan(jobs, NODES, BUSY, NOW)
    assert result.ahead == ("2.0",)
    assert result.reservation is not None and result.reservation.job_id == "3.0"
    # The 8 CPUs the first job takes free up after its 30 minutes.
    assert result.reservation.start_at == NOW + 30 * MINUTE


def test_a_job_no_machine_can_ever_take_is_passed_over():
    jobs = [waiting("1.5", 1, 64, 60), HEAD]
    result = plan(jobs, NODES, BUSY, NOW)
    assert result.unplaceable == ("1.5",)
    assert result.reservation is not None and result.reservation.job_id == "2.0"


def test_requirements_limit_the_machines_a_job_is_reserved_on():
    machines = [machine("a", 16), machine("b", 16)]
    busy = [running("1.0", "a", 8, 5), running("1.1", "b", 8, 50)]
    job = waiting("2.0", 2, 16, 60, machines=frozenset({"b"}))
    found = plan([job], machines, busy, NOW).reservation
    assert found is not None and (found.machine, found.start_at) == ("b", NOW + 50 * MINUTE)


def test_an_exclusive_head_job_drains_the_machine_whose_jobs_end_soonest():
    machines = [machine("a", 16), machine("b", 16), machine("c", 16)]
    busy = [running("1.0", "a", 1, 10), running("1.1", "a", 1, 40),
            running("1.2", "b", 1, 5), running("1.3", "b", 1, 30),
            running("1.4", "c", 1, 35)]
    job = waiting("2.0", 2, 1, 60, exclusive=True)
    found = plan([job], machines, busy, NOW).reservation
    assert found is not None
    assert (found.machine, found.start_at) == ("b", NOW + 30 * MINUTE)
    assert found.needs == machines[1].total and found.spare == Resources(0.0, 0.0, 0.0)
    # A 1-CPU job that outlasts the drain is held back there, even though CPUs are spare.
    assert decide(waiting("3.0", 3, 1, 31), "b", found, NOW) is Verdict.HELD_BACK
    assert decide(waiting("3.0", 3, 1, 29), "b", found, NOW) is Verdict.WINDOW


def test_an_exclusive_job_starts_at_once_on_an_empty_machine():
    machines = [machine("a", 16), machine("b", 16)]
    job = waiting("2.0", 2, 1, 60, exclusive=True)
    assert plan([job], machines, [running("1.0", "a", 1, 10)], NOW).reservation is None


def test_a_running_exclusive_job_holds_its_whole_machine():
    machines = [machine("a", 16)]
    found = earliest_start(waiting("2.0", 2, 1, 60), machines[0],
                           [running("1.0", "a", 1, 20, exclusive=True)], NOW)
    assert found is not None and found[0] == NOW + 20 * MINUTE


def test_a_job_past_its_walltime_counts_as_ending_now():
    busy = [running("1.0", "m", 8, -5)]
    found = plan([waiting("2.0", 2, 16, 60)], NODES, busy, NOW).reservation
    assert found is not None and found.start_at == NOW and found.window.seconds == 0


def test_the_stored_form_gives_the_same_reservation(reservation):
    assert from_record(to_record(reservation)) == reservation
    assert from_record(None) is None and from_record({"job": "1.0"}) is None


def test_analyze_words_for_the_reserved_job_and_for_the_others(reservation):
    mine = reservation_lines("2.0", reservation, NOW + 60, bypass_count=2, tz=UTC)
    assert mine[0] == ("Reserved: machine m, expected to start Sun Mar 13 07:21:40, in 0:14:00, "
                       "when its running jobs end by their walltimes.")
    assert mine[1] == "Backfill window there: 8 CPUs for 0:15:00 (from Sun Mar 13 07:06:40)."
    assert mine[2] == "2 lower jobs have started ahead of it (BypassCount)."
    other = reservation_lines("3.0", reservation, NOW, tz=UTC)
    assert other == ["Job 2.0 holds the reservation on m (expected to start Sun Mar 13 "
                     "07:21:40, in 0:15:00); jobs below it start only where they do not "
                     "delay it."]
    assert reservation_lines("3.0", None, NOW) == []


def test_machines_total_what_their_slots_offer():
    slots = [{"Name": "slot1@a", "TotalSlotCpus": 16, "Cpus": 4, "TotalSlotMemory": 16000,
              "Memory": 1000, "PartitionableSlot": True},
             {"Name": "slot1_1@a", "Cpus": 12, "Memory": 15000, "DynamicSlot": True},
             {"Name": "slot1@b", "Cpus": 1, "Memory": 500, "Disk": 100},
             {"Name": "slot2@b", "Cpus": 1, "Memory": 500, "Disk": 100},
             {"Name": "slot1_2@c", "DynamicSlot": True, "Cpus": 2, "TotalCpus": 8,
              "TotalMemory": 8000}]
    assert machines_of(slots) == [Machine("a", Resources(16, 16000, math.inf)),
                                  Machine("b", Resources(2, 1000, 200)),
                                  Machine("c", Resources(8, 8000, math.inf))]
    ideal = ideal_slots_by_machine(slots)
    assert ideal["a"][0]["Cpus"] == 16 and ideal["a"][0]["Memory"] == 16000
    assert "c" not in ideal


def test_a_running_job_ends_at_its_start_plus_its_walltime():
    job = {"RemoteHost": "slot1_3@alpha", "RequestCpus": 8, "RequestMemory": 100,
           "AllowedJobDuration": 900, "JobCurrentStartDate": NOW, "Exclusive": True}
    assert running_of("1.0", job, 3600, NOW + 5) == Running(
        "1.0", "alpha", Resources(8, 100, 0), NOW + 900, exclusive=True)
    assert running_of("1.0", {"RequestCpus": 1}, 3600, NOW) is None
    assert waiting_of("2.0", {}, 7.0, 3600).needs == Resources(1, 0, 0)
