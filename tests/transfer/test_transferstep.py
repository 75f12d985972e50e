"""The starter's transfer child (starter/transferstep.py): a fork of the starter in a
session of its own, whose answer comes back on a pipe; a stop request kills it with
what it started, and a child that dies without answering is a hold naming how."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import classad2
import pytest

from fetchwork.config.loader import Config
from fetchwork.config.protocol import HoldCode
from fetchwork.starter import transferstep
from fetchwork.transfer import sandbox
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_stop_request_kills_the_child_and_what_it_started(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild"
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                time.sleep(60)
                os._exit(0)
            marker.write_text(str(grandchild))
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(write_fd)
    wait_until(marker.exists)
    wait_until(lambda: marker.read_text().strip() != "")
    grandchild = int(marker.read_text())
    asked = []

    def stop() -> bool:
        asked.append(1)
        return True

    try:
        assert transferstep._collect(pid, read_fd, stop) == (b"", None)
    finally:
        os.close(read_fd)
    assert asked
    assert not _alive(pid)
    wait_until(lambda: not _alive(grandchild))


def _step(tmp_path: Path) -> transferstep.TransferStep:
    ad = classad2.ClassAd({"ClusterId": 1, "ProcId": 0, "ShouldTransferFiles": "YES",
                           "Iwd": str(tmp_path)})
    return transferstep.TransferStep(Config.load(environ={}), ad, classad2.ClassAd(),
                                     str(tmp_path), None, dict(os.environ))


def test_the_childs_answer_comes_back_into_the_ad(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen = tmp_path / "seen"

    def answer(direction: str, folder: str, user: str | None, ad_text: str,
               evicted: bool = False) -> dict[str, object]:
        seen.write_text(f"{os.getpid()} {os.getsid(0)} {direction} {'ClusterId' in ad_text}")
        return {"ok": True, "attrs": {"BytesRecvd": 12.0,
                                      "TransferInputStats": {"FetchworkFilesCount": 2}}}

    monkeypatch.setattr(sandbox, "answer", answer)
    step = _step(tmp_path)
    assert step.inputs(lambda: False) is None
    pid, session, direction, has_ad = seen.read_text().split()
    assert int(pid) != os.getpid() and session == pid  # a fork, in a session of its own
    assert (direction, has_ad) == ("input", "True")
    assert step.ad["BytesRecvd"] == 12.0
    assert step.ad["TransferInputStats"]["FetchworkFilesCount"] == 2
    assert step.ad["Iwd"] == str(tmp_path)


def test_a_hold_answer_is_a_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "answer", lambda *_a, **_k: {
        "ok": False, "code": 32, "subcode": 0, "reason": "big.bin: too big"})
    held = _step(tmp_path).inputs(lambda: False)
    assert held is not None
    assert (held.code, held.reason, held.retry) == (32, "big.bin: too big", False)


def test_a_child_that_dies_without_answering_is_a_hold_naming_how(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def answer(*_args: object, **_kwargs: object) -> dict[str, object]:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("not reached")

    monkeypatch.setattr(sandbox, "answer", answer)
    held = _step(tmp_path).inputs(lambda: False)
    assert held is not None
    assert held.code == HoldCode.TRANSFER_INPUT_ERROR
    assert f"signal {int(signal.SIGKILL)}" in held.reason
