"""Kept job outcomes: the file format, atomic writes, who may report one, the backoff."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import classad2

from fetchwork.startd.starters.outcomes import next_delay_s
from fetchwork.starter.outcomes import (
    forget_outcome,
    new_outcome,
    pending_outcomes,
    read_outcome,
    write_outcome,
    writer_alive,
)
from fetchwork.starter.proctree import state_and_start as process_start_s
from tests.support.waiting import wait_until


def _ad() -> classad2.ClassAd:
    ad = classad2.ClassAd()
    ad["ClusterId"], ad["ProcId"], ad["FetchworkClaim"] = 12, 3, "tok"
    return ad


def test_an_outcome_round_trips_through_its_file(tmp_path):
    outcome = new_outcome(_ad(), "exit", "FETCHWORK", 2, (65534, 65534))
    path = write_outcome(str(tmp_path / "outcomes"), outcome, durable=True)
    assert os.path.basename(path) == f"12.3.{os.getpid()}.outcome"
    assert read_outcome(path) == outcome
    assert [p for p, _o in pending_outcomes(str(tmp_path / "outcomes"))] == [path]
    assert not [name for name in os.listdir(tmp_path / "outcomes") if name.endswith(".tmp")]
    forget_outcome(path)
    forget_outcome(path)  # gone already: nothing happens
    assert pending_outcomes(str(tmp_path / "outcomes")) == []


def test_unreadable_files_and_other_names_are_skipped(tmp_path):
    (tmp_path / "bad.outcome").write_text("{not json")
    (tmp_path / "notes.txt").write_text("x")
    assert pending_outcomes(str(tmp_path)) == []
    assert pending_outcomes(str(tmp_path / "missing")) == []


def test_only_an_outcome_whose_starter_is_gone_is_reported_by_the_startd(tmp_path):
    mine = new_outcome(_ad(), "exit", "FETCHWORK", 1, None)
    assert writer_alive(mine)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    gone = mine.__class__(**{**mine.__dict__, "writer_pid": int(child.stdout)})
    assert not writer_alive(gone)
    # A live process that is not the writer (its pid was reused): a start time that differs.
    reused = mine.__class__(**{**mine.__dict__, "writer_pid": os.getppid(),
                               "writer_started_at": 1.0})
    assert not writer_alive(reused)


def test_a_writer_is_known_by_its_start_since_boot_not_by_the_wall_clock(tmp_path):
    """The start kept is the kernel's, in seconds since boot: a correction of the wall
    clock (which moves the boot time psutil adds) cannot make a live starter look gone,
    and the startd report its outcome beside it."""
    mine = new_outcome(_ad(), "exit", "FETCHWORK", 1, None)
    assert 0 < mine.writer_started_at <= time.clock_gettime(time.CLOCK_BOOTTIME)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        found = process_start_s(sleeper.pid)
        assert found is not None and found[0] in "RSD"
        other = mine.__class__(**{**mine.__dict__, "writer_pid": sleeper.pid,
                                  "writer_started_at": found[1]})
        assert writer_alive(other)
        assert not writer_alive(mine.__class__(**{**other.__dict__,
                                                  "writer_started_at": found[1] + 1.0}))
        sleeper.kill()
        wait_until(lambda: process_start_s(sleeper.pid)[0] == "Z", 10,
                   what="the killed sleeper a zombie")
        assert not writer_alive(other)  # dead, not yet waited for
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not writer_alive(other)
    assert process_start_s(sleeper.pid) is None


def test_the_startd_backs_off_to_its_maximum():
    delays = [0.0]
    for _ in range(6):
        delays.append(next_delay_s(delays[-1], 5.0))
    assert delays[1:] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_an_outcome_folder_removed_between_jobs_is_made_again(tmp_path):
    folder = tmp_path / "outcomes"
    first = write_outcome(str(folder), new_outcome(_ad(), "exit", "FETCHWORK", 1, None))
    os.unlink(first)
    folder.rmdir()  # a starter that runs another job made it for its last one
    path = write_outcome(str(folder), new_outcome(_ad(), "evict", "FETCHWORK", 1, None))
    kept = read_outcome(path)
    assert kept is not None and kept.how == "evict" and kept.user is None
