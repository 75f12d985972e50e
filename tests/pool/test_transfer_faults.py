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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from fetchwork.transfer import stored
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
                             "JOB_DEFAULT_LEASE_DURATION = 4\n")
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
