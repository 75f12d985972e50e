"""Faults in the middle of a transfer, on a pool of separate processes (a Redis
with AOF, a broker, a startd): a startd killed while a job's inputs arrive, and
the pool's Redis restarted while a job's outputs leave. Nothing is lost and
nothing is delivered half: the job runs again, or goes on, to one whole set of
outputs. A job's own plugin holds each transfer open until the test lets it go.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from fetchwork.transfer import stored
from tests.support.dropproxy import DropProxy
from tests.support.folders import open_folder
from tests.support.poolprocs import Daemon, RedisProcess, pool_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

HAVE_PYTHON = os.access("/usr/bin/python3", os.X_OK)

# slow://NAME: waits for GATE/go, then downloads "slow NAME" or uploads by a copy
# into GATE/up/NAME; each run notes itself in GATE/runs.
PLUGIN = r"""#!/usr/bin/python3
import os, re, shutil, sys, time
GATE = "@GATE@"
if "-classad" in sys.argv:
    print('MultipleFileSupport = true\nPluginVersion = "0.1"\nSupportedMethods = "slow"')
    sys.exit(0)
ads = open(sys.argv[sys.argv.index("-infile") + 1]).read()
with open(os.path.join(GATE, "runs"), "a") as note:
    note.write(("upload" if "-upload" in sys.argv else "download") + "\n")
while not os.path.exists(os.path.join(GATE, "go")):
    time.sleep(0.1)
out = []
for block in ads.split("]"):
    if "Url" not in block:
        continue
    url = re.search(r'Url = "([^"]*)"', block).group(1)
    local = re.search(r'LocalFileName = "([^"]*)"', block).group(1)
    name = url.split("://", 1)[1]
    if "-upload" in sys.argv:
        shutil.copyfile(local, os.path.join(GATE, "up", name))
    else:
        open(local, "w").write(f"slow {name}\n")
    out.append(f'[ TransferSuccess = true; TransferUrl = "{url}"; TransferFileName = "{local}" ]')
open(sys.argv[sys.argv.index("-outfile") + 1], "w").write("\n".join(out) + "\n")
"""
PROGRAM = """#!/bin/sh
cat data.txt > copy.txt 2>/dev/null || echo "slow data.txt" > copy.txt
head -c 5000000 /dev/urandom > big.bin
echo done
"""


@dataclass
class Pool:
    root: Path
    redis: RedisProcess
    broker: Daemon
    startd: Daemon
    env: dict[str, str]
    gate: Path
    work: Path

    def client(self) -> Broker:
        return Broker.from_config(Config.load(environ=self.env), start=False)


@pytest.fixture
def pool(pool_name: str) -> Iterator[Pool]:
    with open_folder("fw-xfer-faults-") as root:
        redis_server = RedisProcess(root / "redis")
        redis_server.start()
        config = pool_config(root, redis_server.url, pool_name,
                             "STARTER_ALLOW_RUNAS_OWNER = false\n"
                             "JOB_DEFAULT_LEASE_DURATION = 4\n"
                             "TRANSFER_PENDING_LIFETIME = 10\n")
        gate = root / "gate"
        (gate / "up").mkdir(parents=True)
        for folder in (gate, gate / "up"):
            folder.chmod(0o777)
        work = root / "work"
        work.mkdir()
        (work / "plug.py").write_text(PLUGIN.replace("@GATE@", str(gate)))
        (work / "prog.sh").write_text(PROGRAM)
        for name in ("plug.py", "prog.sh"):
            (work / name).chmod(0o755)
        broker = Daemon(config, root / "broker.log", "broker")
        startd = Daemon(config, root / "startd.log", "startd")
        broker.start()
        startd.start()
        env = {**broker.env}
        try:
            yield Pool(root, redis_server, broker, startd, env, gate, work)
        finally:
            (gate / "go").touch()
            for daemon in (startd, broker):
                daemon.stop(30)
            redis_server.stop()


def _submit(pool: Pool, text: str) -> str:
    path = pool.work / "job.sub"
    path.write_text("executable = prog.sh\nshould_transfer_files = YES\n"
                    "transfer_plugins = slow=plug.py\noutput = job.out\n" + text + "queue\n")
    done = subprocess.run([sys.executable, "-m", "fetchwork", "submit", "-spool", "job.sub"],
                          cwd=pool.work, env=pool.env, capture_output=True, text=True,
                          check=True)
    return done.stdout.split("cluster ")[1].split(".")[0] + ".0"


def _status(pool: Pool, job: str) -> int | None:
    ad = pool.client().get(job)
    return None if ad is None else int(ad.get("JobStatus"))


def _plugins_running() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any("plug.py" in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


@pytest.mark.skipif(not HAVE_PYTHON, reason="the test plugin needs /usr/bin/python3")
def test_a_startd_killed_mid_transfer_loses_nothing(pool: Pool) -> None:
    job = _submit(pool, "transfer_input_files = slow://data.txt\n")
    wait_until(lambda: (pool.gate / "runs").exists(), timeout_s=60,
               fail_if=pool.startd.died, what="the input transfer under way")
    pool.startd.kill()
    wait_until(lambda: not _plugins_running(), timeout_s=30,
               what="the transfer gone with its starter")
    wait_until(lambda: _status(pool, job) == 1, timeout_s=60,
               what="the job back in the queue once its lease lapsed")
    (pool.gate / "go").touch()
    pool.startd.start()
    wait_until(lambda: _status(pool, job) == 4, timeout_s=90,
               fail_if=pool.startd.died, what="the job run again to completion")
    assert (pool.gate / "runs").read_text().split() == ["download", "download"]
    broker = pool.client()
    waiting = stored.waiting_outputs(broker.store)
    assert list(waiting) == [job]  # one set of outputs, the second run's
    subprocess.run([sys.executable, "-m", "fetchwork", "transfer-data", job], cwd=pool.work,
                   env=pool.env, check=True, capture_output=True)
    assert (pool.work / "copy.txt").read_text() == "slow data.txt\n"
    assert (pool.work / "big.bin").stat().st_size == 5_000_000


@pytest.mark.skipif(not HAVE_PYTHON, reason="the test plugin needs /usr/bin/python3")
def test_redis_restarted_mid_transfer_delivers_nothing_half(pool: Pool) -> None:
    job = _submit(pool, "transfer_output_remaps = \"copy.txt = slow://copy.txt\"\n")
    wait_until(lambda: (pool.gate / "runs").exists(), timeout_s=60,
               fail_if=pool.startd.died, what="the output transfer under way")
    pool.redis.kill()  # SIGKILL: only what the AOF holds comes back
    pool.redis.start()
    (pool.gate / "go").touch()
    wait_until(lambda: _status(pool, job) == 4, timeout_s=120,
               fail_if=pool.startd.died, what="the job completed")
    broker = pool.client()
    waiting = stored.waiting_outputs(broker.store)
    assert list(waiting) == [job]
    manifest = stored.load(broker.store, waiting[job][0])
    names = sorted(entry.name for entry in manifest.files)
    assert names == ["big.bin", "job.out"]
    assert [entry.size for entry in manifest.files if entry.name == "big.bin"] == [5_000_000]
    assert (pool.gate / "up" / "copy.txt").read_text() == "slow data.txt\n"


# -- faults while a job's outputs leave ---------------------------------------------------

# Outputs of 16 chunks: the transfer is under way for a while after its first chunk.
BIG_MB = 60
BIG_PROGRAM = f"""#!/bin/sh
head -c {BIG_MB * 1024 * 1024} /dev/urandom > big.bin
echo done
"""


def _submit_big(pool: Pool) -> str:
    (pool.work / "big.sh").write_text(BIG_PROGRAM)
    (pool.work / "big.sh").chmod(0o755)
    (pool.work / "big.sub").write_text("executable = big.sh\nshould_transfer_files = YES\n"
                                       "output = big.out\nqueue\n")
    done = subprocess.run([sys.executable, "-m", "fetchwork", "submit", "-spool", "big.sub"],
                          cwd=pool.work, env=pool.env, capture_output=True, text=True,
                          check=True)
    return done.stdout.split("cluster ")[1].split(".")[0] + ".0"


def _admin(pool: Pool) -> redis.Redis:
    return redis.Redis(unix_socket_path=pool.redis.socket)


@contextmanager
def _chunk_writes(pool: Pool, name: str) -> Iterator[Callable[[], bool]]:
    """Yields a check that says (waiting briefly) whether a pending chunk was written
    since the `with` began (Redis's keyspace notifications of the pool's chunk keys): a
    submission's inputs are attached, so no longer pending, when it returns; what is
    pending then is an upload under way."""
    admin = _admin(pool)
    admin.config_set("notify-keyspace-events", "K$")
    pubsub = admin.pubsub()
    pubsub.psubscribe(f"__keyspace@0__:fw:{{{name}}}:xfer:chunk:*")

    def written() -> bool:
        message = pubsub.get_message(timeout=0.5)
        if not message or message["type"] != "pmessage" or message["data"] != b"set":
            return False
        key = message["channel"].split(b":", 1)[1]
        return int(admin.pttl(key)) > 0
    try:
        yield written
    finally:
        pubsub.close()
        admin.config_set("notify-keyspace-events", "")
        admin.close()


def _pending_chunks(pool: Pool, name: str) -> list[bytes]:
    """Chunks sent and not (yet) part of any manifest: they carry a TTL."""
    with _admin(pool) as admin:
        return [key for key in admin.scan_iter(match=f"fw:{{{name}}}:xfer:chunk:*", count=1000)
                if admin.pttl(key) > 0]


def _transfers_running(pool: Pool) -> list[psutil.Process]:
    """The pool's transfer children: forks of its starters named fw-xfer-*, whose
    environment (the job's) points into this pool's folders."""
    found = []
    for proc in psutil.process_iter(["name"]):
        if not (proc.info["name"] or "").startswith("fw-xfer-"):
            continue
        try:
            environ = proc.environ()
        except psutil.Error:
            continue
        if any(str(pool.root) in value for value in environ.values()):
            found.append(proc)
    return found


def _settled_and_freed(pool: Pool, job: str, name: str, baseline: int) -> None:
    """Fetch the job's outputs whole; then every reference and byte of the transfer is
    released and Redis's memory is back near where it was before the job."""
    subprocess.run([sys.executable, "-m", "fetchwork", "transfer-data", job], cwd=pool.work,
                   env=pool.env, check=True, capture_output=True)
    assert (pool.work / "big.bin").stat().st_size == BIG_MB * 1024 * 1024
    keys = pool.client().keys
    with _admin(pool) as admin:
        def freed() -> bool:
            chunks = list(admin.scan_iter(match=f"fw:{{{name}}}:xfer:chunk:*", count=1000))
            return (not chunks and not admin.hlen(keys.xfer_refs)
                    and not admin.hlen(keys.xfer_chunkrefs)
                    and int(admin.get(keys.xfer_bytes) or 0) == 0
                    and not admin.zcard(keys.xfer_outputs))
        wait_until(freed, timeout_s=60, what="every chunk and reference of the job freed "
                   "(the interrupted run's pending chunks lapsed)")
        used = int(admin.info("memory")["used_memory"])
    assert used - baseline < 4 * 1024 * 1024, f"Redis holds {used - baseline} bytes more"


@pytest.mark.timeout(300)
def test_a_startd_killed_while_outputs_leave_delivers_nothing_half(
        pool: Pool, pool_name: str) -> None:
    with _admin(pool) as admin:
        baseline = int(admin.info("memory")["used_memory"])
    with _chunk_writes(pool, pool_name) as written:
        job = _submit_big(pool)
        # The first pending chunk is the outputs' (the inputs were attached as the job
        # was queued). Freeze the pool's writes there, then kill the startd mid-transfer.
        wait_until(written, timeout_s=120, fail_if=pool.startd.died,
                   what="the job's outputs being sent")
        with _admin(pool) as admin:
            admin.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
            try:
                assert _transfers_running(pool), "the output transfer should be under way"
                pool.startd.kill()
                wait_until(lambda: not _transfers_running(pool), timeout_s=30,
                           what="the transfer gone with its startd")
            finally:
                admin.execute_command("CLIENT", "UNPAUSE")
    broker = pool.client()
    # What the killed run sent is pending only, never attached or offered.
    partial = _pending_chunks(pool, pool_name)
    assert partial, "the interrupted output left no chunk (the kill came too late?)"
    assert job not in stored.waiting_outputs(broker.store)
    wait_until(lambda: _status(pool, job) == 1, timeout_s=60,
               what="the job back in the queue once its lease lapsed")
    assert job not in stored.waiting_outputs(broker.store)
    pool.startd.start()
    wait_until(lambda: _status(pool, job) == 4, timeout_s=120,
               fail_if=pool.startd.died, what="the job run again to completion")
    [(ident, _expiry)] = [stored.waiting_outputs(broker.store)[job]]
    [entry] = [e for e in stored.load(broker.store, ident).files if e.name == "big.bin"]
    assert entry.size == BIG_MB * 1024 * 1024
    assert int(broker.get(job)["JobRunCount"]) >= 2
    _settled_and_freed(pool, job, pool_name, baseline)


@pytest.mark.timeout(300)
def test_a_lost_connection_mid_transfer_requeues_the_job(pool: Pool, pool_name: str) -> None:
    """The execute side reaches Redis through a proxy the test cuts while the job's
    outputs are being sent: the transfer fails on the connection, the job goes back
    to the queue (not held: not its fault) and runs again once Redis is reachable."""
    pool.startd.stop(30)
    proxy = DropProxy(str(pool.root / "proxy.sock"), pool.redis.socket)
    proxy.start()
    config = pool.root / "startd.conf"
    config.write_text((pool.root / "fetchwork.conf").read_text().replace(
        pool.redis.url, proxy.url))
    startd = Daemon(config, pool.root / "startd-proxy.log", "startd")
    startd.start()
    starter_log = pool.root / "log" / "StarterLog.slot1"
    try:
        with _admin(pool) as admin:
            baseline = int(admin.info("memory")["used_memory"])
        with _chunk_writes(pool, pool_name) as written:
            job = _submit_big(pool)
            wait_until(written, timeout_s=120, fail_if=startd.died,
                       what="the job's outputs being sent")
            proxy.cut()
        broker = pool.client()
        wait_until(lambda: "the job goes back to the queue" in starter_log.read_text(
            errors="replace"), timeout_s=90, fail_if=startd.died,
                   what="the starter giving the job back after the transfer lost Redis")
        assert "Redis is unreachable" in starter_log.read_text(errors="replace")
        assert job not in stored.waiting_outputs(broker.store)
        assert _pending_chunks(pool, pool_name), "the interrupted output left no chunk"
        proxy.mend()
        wait_until(lambda: _status(pool, job) == 4, timeout_s=180, fail_if=startd.died,
                   what="the job run again to completion")
        ad = broker.get(job)
        assert int(ad["JobRunCount"]) >= 2 and ad.get("HoldReasonCode") is None
        _settled_and_freed(pool, job, pool_name, baseline)
    finally:
        startd.stop(30)
        proxy.stop()
