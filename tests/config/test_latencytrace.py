"""The latency trace: one line a mark when FETCHWORK_LATENCY_TRACE names a file, nothing
at all otherwise (each case in a process of its own: the knob is read at import)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fetchwork.config import latencytrace

MARK_TWICE = ("from fetchwork.config import latencytrace\n"
              "latencytrace.mark('startd.fetched')\n"
              "latencytrace.mark('startd.handover')\n"
              "print(__import__('os').getpid())\n")


def run(env: dict[str, str]) -> int:
    done = subprocess.run([sys.executable, "-c", MARK_TWICE], env=env, check=True,
                          capture_output=True, text=True, timeout=60)
    return int(done.stdout)


def test_marks_go_to_the_named_file_one_line_each(tmp_path: Path) -> None:
    trace = tmp_path / "trace.log"
    before = time.time_ns()
    pid = run({**os.environ, latencytrace.ENV_VAR: str(trace)})
    lines = [line.split() for line in trace.read_text().splitlines()]
    assert [words[0] for words in lines] == ["startd.fetched", "startd.handover"]
    stamps = [int(words[1]) for words in lines]
    assert before <= stamps[0] <= stamps[1] <= time.time_ns()
    assert {int(words[2]) for words in lines} == {pid}


def test_unset_nothing_is_written(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != latencytrace.ENV_VAR}
    run({**env, "TMPDIR": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []
