"""Job sandboxes: the one made ahead is the next job's, and nothing is left behind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fetchwork.config.protocol import JOB_AD_FILE, MACHINE_AD_FILE
from fetchwork.startd.starters.sandboxes import AHEAD, Sandboxes, remove_stale_sandboxes

JOB, MACHINE = 'Cmd = "/bin/true"\n', 'Name = "slot1@host"\n'


def _ahead(execute) -> list[str]:
    return sorted(name for name in os.listdir(execute) if f"_{AHEAD}_" in name)


def test_the_sandbox_made_ahead_becomes_the_next_jobs(tmp_path):
    sandboxes = Sandboxes(str(tmp_path))
    sandboxes.refill()
    [ahead] = _ahead(tmp_path)
    inode = (tmp_path / ahead).stat().st_ino
    assert sorted(os.listdir(tmp_path / ahead)) == sorted([JOB_AD_FILE, MACHINE_AD_FILE])
    path = sandboxes.make(3, JOB, MACHINE)
    assert os.path.basename(path) == f"dir_{os.getpid()}_3_2"
    assert os.stat(path).st_ino == inode  # renamed, not made again
    assert (tmp_path / os.path.basename(path) / JOB_AD_FILE).read_text() == JOB
    assert (tmp_path / os.path.basename(path) / MACHINE_AD_FILE).read_text() == MACHINE
    assert _ahead(tmp_path) == []
    sandboxes.refill()
    sandboxes.refill()  # one ahead at most
    assert len(_ahead(tmp_path)) == 1


def test_the_ads_are_written_whole_into_files_made_ahead_without_truncating(tmp_path):
    # The files made ahead are filled as they are (ext4 writes out a file truncated
    # to zero when it is closed); one that somehow holds more ends with the ad.
    sandboxes = Sandboxes(str(tmp_path))
    sandboxes.refill()
    [ahead] = _ahead(tmp_path)
    (tmp_path / ahead / MACHINE_AD_FILE).write_text("Leftover = " + "x" * 200 + "\n")
    path = sandboxes.make(1, JOB, MACHINE)
    assert Path(path, JOB_AD_FILE).read_text() == JOB
    assert Path(path, MACHINE_AD_FILE).read_text() == MACHINE


def test_without_one_ahead_a_sandbox_is_made_on_the_spot(tmp_path):
    sandboxes = Sandboxes(str(tmp_path))
    first, second = sandboxes.make(1, JOB, MACHINE), sandboxes.make(1, JOB, MACHINE)
    assert first != second
    for path in (first, second):
        assert Path(path, JOB_AD_FILE).read_text() == JOB


def test_a_sandbox_removed_while_ahead_is_made_again_for_the_job(tmp_path):
    sandboxes = Sandboxes(str(tmp_path))
    sandboxes.refill()
    [ahead] = _ahead(tmp_path)
    shutil.rmtree(tmp_path / ahead)  # a site's cleaning script
    path = sandboxes.make(1, JOB, MACHINE)
    assert Path(path, MACHINE_AD_FILE).read_text() == MACHINE
    assert os.listdir(tmp_path) == [os.path.basename(path)]


def test_an_execute_directory_that_is_no_directory_fails_the_job_not_the_refill(tmp_path):
    (tmp_path / "execute").write_text("not a directory\n")
    sandboxes = Sandboxes(str(tmp_path / "execute"))
    sandboxes.refill()  # noted only
    with pytest.raises(NotADirectoryError):
        sandboxes.make(1, JOB, MACHINE)
    assert (tmp_path / "execute").read_text() == "not a directory\n"


def test_the_sandbox_ahead_goes_when_the_startd_closes(tmp_path):
    sandboxes = Sandboxes(str(tmp_path))
    sandboxes.refill()
    kept = sandboxes.make(1, JOB, MACHINE)
    sandboxes.refill()
    sandboxes.close()
    assert os.listdir(tmp_path) == [os.path.basename(kept)]  # a job's is its starter's


def test_a_gone_startds_sandbox_made_ahead_is_stale(tmp_path):
    (tmp_path / f"dir_999999999_{AHEAD}_1").mkdir()
    (tmp_path / f"dir_{os.getpid()}_{AHEAD}_1").mkdir()
    assert remove_stale_sandboxes(str(tmp_path)) == [str(tmp_path / f"dir_999999999_{AHEAD}_1")]


def test_a_reloaded_execute_directory_takes_the_next_sandbox(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    sandboxes = Sandboxes(str(old))
    sandboxes.refill()
    sandboxes.use(str(old))  # unchanged: the one ahead stays
    assert len(_ahead(old)) == 1
    sandboxes.use(str(new))
    assert list(old.iterdir()) == []
    path = sandboxes.make(2, JOB, MACHINE)  # EXECUTE made, as a job's start makes it
    assert os.path.dirname(path) == str(new)
    sandboxes.refill()
    assert len(_ahead(new)) == 1


def test_a_sandbox_left_to_a_kept_starter_is_removed_with_the_slots_next_if_still_there(
        tmp_path):
    # A kept starter removes its job's sandbox after its `done`; one that died first
    # leaves it to the startd: the slot's next sandbox, or the startd's exit.
    sandboxes = Sandboxes(str(tmp_path))
    removed, left, other = (sandboxes.make(slot, JOB, MACHINE) for slot in (1, 2, 3))
    for slot, path in ((1, removed), (2, left), (3, other)):
        sandboxes.left_by(slot, path)
    shutil.rmtree(removed)  # its starter did its part
    (Path(left) / "output").write_text("what the job wrote\n")
    first = sandboxes.make(1, JOB, MACHINE)
    assert not os.path.exists(removed) and os.path.isdir(left) and os.path.isdir(other)
    second = sandboxes.make(2, JOB, MACHINE)
    assert not os.path.exists(left) and os.path.isdir(other)  # another slot's stays
    sandboxes.close()
    assert not os.path.exists(other)
    assert os.path.isdir(first) and os.path.isdir(second)  # jobs' sandboxes not left
