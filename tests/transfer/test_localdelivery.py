"""Delivery on a pool on one machine under root (transfer/localdelivery.py): the
delivering thread (or, where its ids cannot change alone, one forked child per
Owner) writes that Owner's jobs' outputs as the Owner, never as root, on a real
Redis; a job it cannot write for is named with why, the others are delivered all
the same; the thread's ids are root's again after, and another thread's stay
root's throughout."""

from __future__ import annotations

import os
import pwd
import random
import threading
from pathlib import Path

import pytest

from fetchwork.broker.store import Store
from fetchwork.transfer import delivery, privstate, stored
from fetchwork.transfer.chunks import ChunkStore
from fetchwork.transfer.localdelivery import deliver_as, deliver_in_thread
from fetchwork.transfer.manifest import Manifest
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="becoming the Owner needs root")]

HOUR_MS = 3_600_000


def _output(store: Store, tmp_path: Path, job_id: str, name: str, size: int) -> str:
    source = tmp_path / f"src-{job_id}"
    source.write_bytes(random.Random(job_id).randbytes(size))
    fd = os.open(source, os.O_RDONLY)
    try:
        entry = ChunkStore(store, HOUR_MS).upload(fd, name, 0o640)
    finally:
        os.close(fd)
    return stored.attach(store, Manifest(files=(entry,)), jobs=1, cap_bytes=0,
                         resend=lambda _d: None, output_of=job_id, expires_s=2**31)


@pytest.mark.parametrize("where", ["child", "thread"])
def test_one_child_writes_an_owners_jobs_as_that_owner(redis_client, pool_name, tmp_path,
                                                        job_tmp, where):
    if where == "thread" and not privstate.per_thread():
        pytest.skip("this machine's thread cannot change its ids alone")
    store = Store(redis_client, pool_name, 1000)
    store.scripts.ensure_loaded(["transfer_settle"])
    nobody = pwd.getpwnam("nobody")
    ours = job_tmp / "iwd"
    ours.mkdir()
    os.chown(ours, nobody.pw_uid, nobody.pw_gid)
    closed = job_tmp / "closed"  # root's, 0755: the Owner cannot write there
    closed.mkdir(mode=0o755)
    jobs = []
    for job_id, iwd in (("5.0", ours), ("5.1", closed), ("5.2", ours)):
        ident = _output(store, tmp_path, job_id, f"out-{job_id}.bin", 5000)
        jobs.append((job_id, {"Iwd": str(iwd), delivery.OUTPUT_MANIFEST_ATTR: ident}))

    before = privstate.ids()
    others: list[object] = []
    stop = threading.Event()

    def other() -> None:  # another thread of the process, looking all along
        while not stop.wait(0.001):
            others.append(privstate.ids())

    watcher = threading.Thread(target=other)
    watcher.start()
    try:
        wait_until(lambda: others, 10, what="the other thread's first look")
        if where == "child":
            failed = deliver_as(store, jobs, (nobody.pw_uid, nobody.pw_gid))
        else:
            failed = deliver_in_thread(store, jobs, (nobody.pw_uid, nobody.pw_gid))
    finally:
        stop.set()
        watcher.join()
    assert privstate.ids() == before
    assert others and set(map(str, others)) == {str(before)}

    assert list(failed) == ["5.1"] and "out-5.1.bin" in failed["5.1"]
    for job_id in ("5.0", "5.2"):
        written = ours / f"out-{job_id}.bin"
        assert written.read_bytes() == (tmp_path / f"src-{job_id}").read_bytes()
        info = written.stat()
        assert (info.st_uid, info.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert not list(closed.iterdir())
    assert set(stored.waiting_outputs(store)) == {"5.1"}  # the others are settled


def test_a_child_that_cannot_answer_names_every_job(redis_client, pool_name, tmp_path, job_tmp):
    store = Store(redis_client, pool_name, 1000)
    nobody = pwd.getpwnam("nobody")
    ident = _output(store, tmp_path, "6.0", "big.bin", 3 << 20)
    jobs = [("6.0", {"Iwd": str(job_tmp), delivery.OUTPUT_MANIFEST_ATTR: ident})]
    failed = deliver_as(store, jobs, (nobody.pw_uid, nobody.pw_gid), timeout_s=0.0)
    assert list(failed) == ["6.0"] and "was stopped" in failed["6.0"]
