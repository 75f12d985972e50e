"""A waiting starter's rehearsal of the start path: complete, silent, without traces."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from fetchwork.config.loader import Config
from fetchwork.starter import rehearsal


def _config(tmp_path: Path, text: str = "") -> Config:
    conf = tmp_path / "rehearsal.conf"
    conf.write_text(text)
    return Config.load(environ={"FETCHWORK_CONFIG": str(conf),
                                "FETCHWORK_STATE_DIR": str(tmp_path / "state")})


class _Records(logging.Handler):
    """What the test's own thread, and threads it started, log. Threads that were
    running before it (a background thread an earlier test in this process left,
    such as the rq bridge's listener retrying its gone Redis) are not the test's."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        mine = threading.get_ident()
        self.others = {thread.ident for thread in threading.enumerate()} - {mine}

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread not in self.others:
            self.records.append(record)


@pytest.fixture
def records():
    handler = _Records()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler.records
    root.removeHandler(handler)
    root.setLevel(level)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_rehearsal_runs_every_step_and_leaves_nothing_behind(tmp_path, monkeypatch, records):
    config = _config(tmp_path)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    fds = _open_fds()
    ids = (os.getresuid(), os.getresgid(), sorted(os.getgroups()))
    assert rehearsal.rehearse(config) == rehearsal.step_count()
    assert _open_fds() == fds
    assert (os.getresuid(), os.getresgid(), sorted(os.getgroups())) == ids  # switched, back
    assert os.getcwd() == str(work)
    assert list(work.iterdir()) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cwd", "rehearsal.conf"]
    assert not os.path.exists(rehearsal._SANDBOX)
    assert records == []  # nothing logged: not the hook's call, not the job's user
    assert not any(logging.getLogger(name).disabled for name in rehearsal._LOGGERS)


def test_a_rehearsal_stops_at_the_step_under_way_when_interrupted(tmp_path, records):
    asked = []

    def interrupted() -> bool:
        asked.append(True)
        return len(asked) > 2

    assert rehearsal.rehearse(_config(tmp_path), interrupted) == 2
    assert records == []


def test_a_rehearsal_that_fails_raises_nothing_and_logs_nothing(tmp_path, records):
    # The Starter step reads this knob, which does not convert: the rehearsal
    # ends there (the job's own start reports the error).
    config = _config(tmp_path, "STARTER_SAMPLE_INTERVAL = often\n")
    done = rehearsal.rehearse(config)
    assert 0 < done < rehearsal.step_count()
    assert records == []
    assert not any(logging.getLogger(name).disabled for name in rehearsal._LOGGERS)


def test_a_rehearsal_silences_only_its_own_steps(tmp_path, records):
    # Another thread of the waiting starter (a hook module's, say) still logs meanwhile.
    other = logging.getLogger("site.hookmodule")

    def interrupted() -> bool:
        other.info("still heard")
        return False

    rehearsal.rehearse(_config(tmp_path), interrupted)
    # Asked before each step and before the last line: every one was heard.
    assert [record.getMessage() for record in records] == ["still heard"] * (
        rehearsal.step_count())
