"""The transfer run in a root starter's own process (starter/transferstep.py,
transfer/sandbox.py `run_here`) on a real Redis: inputs are written and outputs read
with the job's user's rights, never root's (a root-only file is not reached through
an input or an output name), no child is forked, and the starter's ids are back to
root's after each transfer, whether it succeeded or was held."""

from __future__ import annotations

import hashlib
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import classad2
import msgpack
import pytest

from fetchwork.broker.store import Store
from fetchwork.config.loader import Config
from fetchwork.config.protocol import HoldCode
from fetchwork.starter import transferstep
from fetchwork.transfer import delivery, privstate, sandbox, stored
from fetchwork.transfer.chunks import ChunkStore
from fetchwork.transfer.inputs import INPUT_MANIFEST_ATTR
from fetchwork.transfer.manifest import FileEntry, Manifest

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="a root starter's case")]

HOUR_MS = 3_600_000


def _nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


@pytest.fixture
def store(redis_client, pool_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The pool's client as a starter made it ahead (`prepare`), without a cache."""
    config = Config.load(environ={"FETCHWORK_POOL": pool_name,
                                  "_FETCHWORK_TRANSFER_CACHE_DIR": ""})
    made = Store(redis_client, pool_name, 1000)
    monkeypatch.setattr(sandbox, "_prepared", (config, made))
    monkeypatch.setattr(transferstep, "preload", lambda: None)
    monkeypatch.setattr(sandbox, "prepare", lambda _config: None)
    yield made


def _inputs(store: Store, source: Path, names: dict[str, bytes]) -> str:
    entries = []
    for name, data in names.items():
        path = source / name.replace("/", "_")
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            entries.append(ChunkStore(store, HOUR_MS).upload(fd, name, 0o644))
        finally:
            os.close(fd)
    return stored.attach(store, Manifest(files=tuple(entries)), jobs=1, cap_bytes=0,
                         resend=lambda _d: None)


def _sandbox(job_tmp: Path) -> Path:
    folder = job_tmp / "sandbox"
    folder.mkdir()
    os.chown(folder, *_nobody())
    folder.chmod(0o700)
    return folder


def _step(folder: Path, ad: dict[str, object]) -> transferstep.TransferStep:
    return transferstep.TransferStep(
        Config.load(environ={}), classad2.ClassAd({"ClusterId": 7, "ProcId": 0,
                                                   "ShouldTransferFiles": "YES",
                                                   "Iwd": str(folder), **ad}),
        classad2.ClassAd(), str(folder), _nobody(), dict(os.environ))


def _no_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> int:
        raise AssertionError("the transfer forked")
    monkeypatch.setattr(os, "fork", refused)


def test_inputs_are_written_as_the_jobs_user_in_the_starters_process(
        store: Store, tmp_path: Path, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ident = _inputs(store, tmp_path, {"a.txt": b"a" * 100, "sub/b.txt": b"b" * 100})
    folder = _sandbox(job_tmp)
    before = privstate.ids()
    _no_fork(monkeypatch)
    step = _step(folder, {INPUT_MANIFEST_ATTR: ident, "UserLog": str(job_tmp / "job.log")})
    assert step.inputs(lambda: False) is None
    assert privstate.ids() == before
    for name in ("a.txt", "sub", "sub/b.txt"):
        info = (folder / name).lstat()
        assert (info.st_uid, info.st_gid) == _nobody(), name
    assert (folder / "sub" / "b.txt").read_bytes() == b"b" * 100
    assert step.ad["TransferInputStats"]["FetchworkFilesCount"] == 2
    assert step.ad["Iwd"] == str(folder)
    kinds = [fields[b"kind"] for _id, fields in store.client.xrange(store.keys.events)
             if fields.get(b"type") == b"transfer" and fields.get(b"job") == b"7.0"]
    assert kinds == [b"input_queued", b"input_started", b"input_finished"]


def test_an_input_is_not_written_into_a_root_only_folder(
        store: Store, tmp_path: Path, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ident = _inputs(store, tmp_path, {"locked/x.txt": b"x"})
    folder = _sandbox(job_tmp)
    (folder / "locked").mkdir(mode=0o700)  # root's, in the sandbox
    before = privstate.ids()
    _no_fork(monkeypatch)
    held = _step(folder, {INPUT_MANIFEST_ATTR: ident}).inputs(lambda: False)
    assert held is not None and held.code == HoldCode.TRANSFER_INPUT_ERROR
    assert "locked" in held.reason and "Permission denied" in held.reason
    assert not os.listdir(folder / "locked")
    assert privstate.ids() == before


def test_a_root_only_file_is_not_read_through_an_output_name(
        store: Store, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _sandbox(job_tmp)
    secret = job_tmp / "secret"
    secret.write_text("root's only")
    secret.chmod(0o600)
    os.link(secret, folder / "secret.txt")  # the sandbox holds a name of a root-only file
    (folder / "linked.txt").symlink_to(secret)
    before = privstate.ids()
    _no_fork(monkeypatch)
    for name, why in (("secret.txt", "Permission denied"), ("linked.txt", "symbolic link")):
        step = _step(folder, {"TransferOutput": name})
        step.ad["Iwd"] = str(folder)
        held = step.outputs("exit", lambda: False)
        assert held is not None and held.code == HoldCode.TRANSFER_OUTPUT_ERROR, name
        assert name in held.reason and why in held.reason
        assert delivery.OUTPUT_MANIFEST_ATTR not in step.ad
        assert privstate.ids() == before
    assert not stored.waiting_outputs(store)


def test_outputs_go_back_from_the_starters_process(
        store: Store, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _sandbox(job_tmp)
    (folder / "out.txt").write_text("made by the job")
    os.chown(folder / "out.txt", *_nobody())
    before = privstate.ids()
    _no_fork(monkeypatch)
    step = _step(folder, {"TransferOutput": "out.txt"})
    assert step.outputs("exit", lambda: False) is None
    assert privstate.ids() == before
    manifest = stored.load(store, step.ad[delivery.OUTPUT_MANIFEST_ATTR])
    assert [entry.name for entry in manifest.files] == ["out.txt"]
    # A small output travels inside its manifest: no chunk of its own.
    assert manifest.files[0].data == b"made by the job" and not manifest.digests()
    # No user log: no transfer events on the pool's stream (their only reader).
    assert not [fields for _id, fields in store.client.xrange(store.keys.events)
                if fields.get(b"type") == b"transfer"]


def _inline_inputs(store: Store, names: dict[str, bytes]) -> str:
    entries = tuple(FileEntry(name, 0o644, len(data), hashlib.sha256(data).hexdigest(), (),
                              data) for name, data in names.items())
    return stored.attach(store, Manifest(files=entries), jobs=1, cap_bytes=0,
                         resend=lambda _d: None)


def test_inline_inputs_are_written_as_the_jobs_user_and_checked(
        store: Store, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ident = _inline_inputs(store, {"a.txt": b"a" * 100, "sub/b.txt": b"b" * 10})
    folder = _sandbox(job_tmp)
    _no_fork(monkeypatch)
    step = _step(folder, {INPUT_MANIFEST_ATTR: ident})
    assert step.inputs(lambda: False) is None
    assert (folder / "sub" / "b.txt").read_bytes() == b"b" * 10
    assert ((folder / "a.txt").stat().st_uid, (folder / "a.txt").stat().st_gid) == _nobody()
    assert step.ad["TransferInputStats"]["FetchworkBytesFromPool"] == 110


def test_an_inline_input_changed_in_the_pool_holds_the_job(
        store: Store, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ident = _inline_inputs(store, {"a.txt": b"a" * 100})
    key = store.keys.xfer_manifest(ident)
    raw = msgpack.unpackb(store.client.hget(key, "data"), raw=False)
    raw["files"][0][5] = b"x" * 100
    store.client.hset(key, "data", msgpack.packb(raw, use_bin_type=True))
    folder = _sandbox(job_tmp)
    _no_fork(monkeypatch)
    held = _step(folder, {INPUT_MANIFEST_ATTR: ident}).inputs(lambda: False)
    assert held is not None and held.code == HoldCode.TRANSFER_INPUT_ERROR
    assert "does not match its digest" in held.reason
    assert not os.listdir(folder)


def test_a_stop_request_ends_an_input_transfer_before_its_files(
        store: Store, tmp_path: Path, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ident = _inputs(store, tmp_path, {"a.txt": b"a"})
    folder = _sandbox(job_tmp)
    before = privstate.ids()
    _no_fork(monkeypatch)
    held = _step(folder, {INPUT_MANIFEST_ATTR: ident}).inputs(lambda: True)
    assert held is not None and "stopped" in held.reason
    assert not os.listdir(folder)
    assert privstate.ids() == before


def test_a_transfer_that_runs_plugins_runs_in_a_child(
        store: Store, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _sandbox(job_tmp)
    seen = job_tmp / "seen"

    def answer(direction: str, _folder: str, user: str | None, _ad_text: str,
               evicted: bool = False) -> dict[str, object]:
        seen.write_text(f"{os.getpid()} {user}")
        return {"ok": True, "attrs": {}}

    monkeypatch.setattr(sandbox, "answer", answer)
    step = _step(folder, {"TransferOutput": "out.txt",
                          "TransferOutputRemaps": "out.txt = https://example.org/out"})
    assert step.outputs("exit", lambda: False) is None
    pid, user = seen.read_text().split()
    assert int(pid) != os.getpid() and user == "{}:{}".format(*_nobody())


def test_a_fault_of_the_transfer_holds_the_job_not_the_starter(
        store: Store, job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object, **_kwargs: object) -> dict[str, object]:
        raise KeyError("a fault")

    monkeypatch.setattr(sandbox, "_steps", broken)
    folder = _sandbox(job_tmp)
    before = privstate.ids()
    _no_fork(monkeypatch)
    held = _step(folder, {"TransferOutput": "out.txt"}).outputs("exit", lambda: False)
    assert held is not None and held.code == HoldCode.TRANSFER_OUTPUT_ERROR
    assert "a fault" in held.reason
    assert privstate.ids() == before
