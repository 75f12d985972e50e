"""The job user's rights around file work in a root process (transfer/privstate.py):
files are made and opened as the user, never with root's rights, and the process's
ids and groups are back as they were after the block, however it ended."""

from __future__ import annotations

import os
import pwd
import threading
from pathlib import Path

import pytest

from fetchwork.transfer import privstate

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="changing ids needs root")]


def _nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def test_a_file_made_inside_belongs_to_the_user_and_the_ids_come_back(job_tmp: Path) -> None:
    before = privstate.ids()
    folder = job_tmp / "open"
    folder.mkdir()
    folder.chmod(0o777)
    with privstate.as_user(_nobody()):
        assert os.geteuid() == _nobody()[0] and os.getgroups() == [_nobody()[1]]
        assert os.getresuid()[0] == 0 and os.getresuid()[2] == 0  # real, saved: root's
        (folder / "made").write_text("x")
    info = (folder / "made").stat()
    assert (info.st_uid, info.st_gid) == _nobody()
    assert privstate.ids() == before


def test_root_only_files_stay_closed_inside(job_tmp: Path) -> None:
    secret = job_tmp / "secret"
    secret.write_text("root's")
    secret.chmod(0o600)
    grouped = job_tmp / "grouped"  # root's group may read it: the user's groups do not
    grouped.write_text("root's group's")
    grouped.chmod(0o640)
    closed = job_tmp / "closed"
    closed.mkdir(mode=0o755)
    before = privstate.ids()
    with privstate.as_user(_nobody()):
        for path in (secret, grouped):
            with pytest.raises(PermissionError):
                path.read_text()
        with pytest.raises(PermissionError):
            (closed / "new").write_text("x")
    assert not (closed / "new").exists()
    assert privstate.ids() == before


def test_the_ids_come_back_after_a_failure_inside() -> None:
    before = privstate.ids()
    with pytest.raises(RuntimeError), privstate.as_user(_nobody()):
        raise RuntimeError("the file work failed")
    assert privstate.ids() == before and os.geteuid() == 0


def test_refused_for_root_and_nothing_changes() -> None:
    before = privstate.ids()
    with pytest.raises(privstate.UserRightsError, match="never handled as root"), \
            privstate.as_user((0, 0)):
        pass
    assert privstate.ids() == before


def test_another_thread_keeps_roots_ids_or_the_change_is_refused() -> None:
    before = privstate.ids()
    asked, answered = threading.Event(), threading.Event()
    seen: list[tuple[object, ...]] = []

    def other() -> None:
        asked.wait(30)
        seen.append(privstate.ids())
        answered.set()

    thread = threading.Thread(target=other)
    thread.start()
    try:
        if not privstate.per_thread():
            assert not privstate.usable()
            with pytest.raises(privstate.UserRightsError, match="another thread"), \
                    privstate.as_user(_nobody()):
                pass
            return
        with privstate.as_user(_nobody()):
            asked.set()
            assert answered.wait(30)
            assert os.geteuid() == _nobody()[0]
        assert seen == [before]  # the other thread stayed root throughout
    finally:
        asked.set()
        thread.join()
    assert privstate.ids() == before
