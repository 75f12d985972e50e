"""What people read: `q -showq` for the policy text's example, and `q -analyze` wording."""

from __future__ import annotations

import calendar
import datetime

from fetchwork.broker.scheduling.analyze import ClauseResult, MatchResults, analyze_text
from fetchwork.broker.scheduling.eligibility import scheduling_pass
from fetchwork.broker.scheduling.showq import clock_text, showq_text
from fetchwork.broker.scheduling.snapshot import QueuedJob
from fetchwork.broker.store.states import State
from fetchwork.config.matching import requirement_clauses as split_clauses
from tests.support.scheduling import NOW, apply, hpc2n, job

UTC = datetime.UTC


def _at(clock: str) -> float:
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return float(calendar.timegm((2011, 3, 24, hours, minutes, seconds)))


def _seconds(clock: str) -> float:
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return hours * 3600.0 + minutes * 60 + seconds


IDLE_ROWS = [("900991", "1:00:00", "09:49:11"), ("900992", "2:00:00", "09:50:58"),
             ("900993", "2:00:00", "09:55:30"), ("900995", "2:00:00", "10:04:42"),
             ("900997", "2:00:00", "10:08:28"), ("901013", "1:30:00", "10:43:05"),
             ("901023", "2:29:00", "11:19:08"), ("901025", "2:00:00", "11:24:38")]
BLOCKED_ROWS = [("901069", "2:00:00", "12:42:29"), ("901070", "1:15:00", "12:43:41"),
                ("901071", "1:20:00", "13:11:23"), ("901074", "2:00:00", "13:17:44"),
                ("901108", "2:00:00", "15:33:06"), ("901620", "1:29:00", "10:34:26"),
                ("901624", "2:00:00", "10:37:25"), ("901627", "1:25:00", "10:41:13")]
STARTED = _at("10:50:09")
EXAMPLE_NOW = STARTED + 12 * 3600 - _seconds("9:42:28")


def _queued(rows, state):
    return [QueuedJob(job_id=name, owner="user1", project=None, cpus=8,
                      walltime_s=_seconds(limit), state=state, prio_group=0, order=float(place),
                      queued_at=_at(queued), idle_since=_at(queued))
            for place, (name, limit, queued) in enumerate(rows)]


def example_jobs():
    running = QueuedJob(job_id="899744", owner="user1", project=None, cpus=2,
                        walltime_s=12 * 3600, state=State.RUNNING, prio_group=0, order=0,
                        queued_at=STARTED - 60, started_at=STARTED)
    return [running, *_queued(IDLE_ROWS, State.IDLE), *_queued(BLOCKED_ROWS, State.BLOCKED)]


def _row(name, state, procs, clock, date):
    return f"{name:<12} {'user1':>8} {state:>9} {procs:>4}  {clock:>10}  Thu Mar 24 {date}"


EXPECTED = "\n".join([
    "ACTIVE JOBS--------------------",
    "JOBNAME      USERNAME     STATE PROC   REMAINING  STARTTIME",
    "",
    _row("899744", "Running", 2, "9:42:28", "10:50:09"),
    "",
    "     1 Active Job     3829 of 5080 Processors Active (75.37%)",
    "                       635 of  635 Nodes Active      (100.00%)",
    "",
    "IDLE JOBS----------------------",
    "JOBNAME      USERNAME     STATE PROC     WCLIMIT  QUEUETIME",
    "",
    *[_row(name, "Idle", 8, limit, queued) for name, limit, queued in IDLE_ROWS],
    "",
    "8 Idle Jobs",
    "",
    "BLOCKED JOBS----------------",
    "JOBNAME      USERNAME     STATE PROC     WCLIMIT  QUEUETIME",
    "",
    *[_row(name, "Idle", 8, limit, queued) for name, limit, queued in BLOCKED_ROWS],
    "",
    "Total Jobs: 17   Active Jobs: 1   Idle Jobs: 8   Blocked Jobs: 8",
    ""])


def test_showq_prints_the_texts_example():
    text = showq_text(example_jobs(), EXAMPLE_NOW, processors=(3829, 5080), nodes=(635, 635),
                      tz=UTC)
    assert text == EXPECTED


def test_showq_of_the_first_worked_example_after_a_pass():
    jobs = [job(n) for n in range(10)]
    apply(jobs, scheduling_pass(jobs, hpc2n(), NOW))
    text = showq_text(jobs, NOW, tz=UTC)
    assert "     0 Active Jobs" in text
    assert text.endswith("Total Jobs: 10   Active Jobs: 0   Idle Jobs: 8   Blocked Jobs: 2\n")
    blocked_part = text.split("BLOCKED JOBS")[1]
    assert "8.0" in blocked_part and "9.0" in blocked_part and "7.0" not in blocked_part


def test_held_jobs_are_in_the_blocked_part():
    held = job(1, state=State.HELD)
    text = showq_text([held], NOW, tz=UTC)
    assert " Hold " in text.split("BLOCKED JOBS")[1]
    assert "Blocked Jobs: 1" in text


def test_clock_text_is_mauis():
    assert clock_text(34948) == "9:42:28"
    assert clock_text(432000) == "5:00:00:00"
    assert clock_text(-5) == "0:00:00"


# -- q -analyze ---------------------------------------------------------------------

def test_analyze_says_which_limit_blocks_with_the_numbers():
    jobs = [job(n) for n in range(10)]
    result = scheduling_pass(jobs, hpc2n(), NOW)
    apply(jobs, result)
    text = analyze_text(jobs[9], NOW, result.placements["9.0"], result.priorities["9.0"])
    assert text.startswith("Job 9.0 (user1) is blocked by policy: user user1 has 8 idle jobs "
                           "(MAX_IDLE_JOBS_PER_USER = 8).\n")
    assert "Priority: group 0 (JobPrio)" in text


def test_analyze_says_a_soft_limit_may_still_give_way():
    running = job(1, state=State.RUNNING, cpus=2, walltime_s=43200, remaining_s=34948)
    wide = job(2, cpus=8)
    result = scheduling_pass([running, wide], hpc2n(), NOW)
    text = analyze_text(wide, NOW, result.placements["2.0"])
    assert "98696 > MAXPS_SOFT = 72000" in text
    assert "a slot that no idle job can use may still start it" in text


def test_analyze_of_a_held_job_gives_the_reason():
    held = job(3, state=State.HELD, hold_reason="submitted on hold")
    assert analyze_text(held, NOW) == (
        "Job 3.0 (user1) is held: submitted on hold. `fetchwork release 3.0` lets it run "
        "again.\n")


def test_analyze_of_an_idle_job_behind_others():
    idle = job(4, idle_for_s=90, walltime_s=600)
    text = analyze_text(idle, NOW, ahead=3, match=MatchResults(slots=4, matched=2))
    assert text == ("Job 4.0 (user1) is idle, waiting 0:01:30 so far (walltime 0:10:00, PS 600)."
                    "\n3 idle jobs are ahead of it (higher priority or earlier).\n"
                    "2 of 4 slots match it.\n")
    first = analyze_text(idle, NOW, match=MatchResults(slots=4, matched=2))
    assert first.endswith("It is first in line: it starts when a matching slot fetches work.\n")


def test_analyze_names_the_requirements_clause_that_fails():
    clauses = [ClauseResult("TARGET.Memory >= 4096", 4), ClauseResult("TARGET.Cpus >= 16", 0)]
    text = analyze_text(job(5), NOW, match=MatchResults(slots=4, matched=0, start_refused=1,
                                                         clauses=clauses))
    assert "0 of 4 slots match it.\nSTART refuses it on 1 of 4 slots.\n" in text
    assert "Requirements clause `TARGET.Cpus >= 16` accepts 0 of 4 slots." in text
    assert "Memory" not in text


def test_requirements_split_into_top_level_clauses():
    assert split_clauses('(TARGET.Cpus >= 2) && (Memory > 100 || Arch == "a&&b")') == [
        "TARGET.Cpus >= 2", 'Memory > 100 || Arch == "a&&b"']
    assert split_clauses("((a) && (b))") == ["a", "b"]
    assert split_clauses("(a) || (b)") == ["(a) || (b)"]
    assert split_clauses("  ") == []
