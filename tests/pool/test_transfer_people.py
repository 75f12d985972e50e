"""A person's jobs with files, on a real redis-server 7 with TLS and the ACL users
`fetchwork acl` prints: a broker service with the admin role, a startd with the
execute role, people submitting with their own users. A person's job with input
files runs and its outputs come back to that person; a person cannot put bad
content into the pool's chunks, cannot read or settle another person's outputs,
and a submission past the pool's cap is refused naming the knob, with nothing
queued and nothing left staged."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.acl import ROLES
from fetchwork.broker.connections.clients import connect
from fetchwork.broker.store import calls
from fetchwork.broker.store.keys import PoolKeys
from fetchwork.config.loader import Config, environ_without_config
from fetchwork.errors import BrokerError, TransferError
from fetchwork.transfer import stored
from fetchwork.transfer.chunks import CHUNK_BYTES
from fetchwork.transfer.delivery import OUTPUT_MANIFEST_ATTR
from fetchwork.transfer.personupload import deliver, stage_inputs
from tests.support.folders import open_folder
from tests.support.tlsredis import TlsRedis, tls_redis
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

PEOPLE = ("alice", "bob")
CAP_MB = 3
PROGRAM = """#!/bin/sh
cat data.txt > copy.txt
cat sub/inner.txt > inner-copy.txt
echo made by $(id -u) > made.txt
"""


@dataclass
class Pool:
    server: TlsRedis
    name: str
    folder: Path
    broker: subprocess.Popen[bytes]
    startd: subprocess.Popen[bytes]

    def env(self, who: str, **knobs: str) -> dict[str, str]:
        user = f"fw-{self.name}-u-{who}" if who in PEOPLE else f"fw-{self.name}-{who}"
        env = environ_without_config()
        env.update({
            "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_POOL": self.name,
            "FETCHWORK_BROKER": self.server.url,
            "FETCHWORK_BROKER_CA": str(self.server.certs.ca),
            "FETCHWORK_BROKER_CERT": str(self.server.certs.client_cert),
            "FETCHWORK_BROKER_KEY": str(self.server.certs.client_key),
            "FETCHWORK_BROKER_USERNAME": user,
            "FETCHWORK_BROKER_PASSWORD_FILE": str(self.folder / f"{who}.pw"),
            "FETCHWORK_STATE_DIR": str(self.folder / f"state-{who}"),
            "_FETCHWORK_LOG": str(self.folder / f"state-{who}" / "log"),
        })
        env.update({f"_FETCHWORK_{k}": v for k, v in knobs.items()})
        return env

    def client(self, who: str) -> Broker:
        config = Config.load(environ=self.env(who))
        return Broker(connect(config, start=False), self.name, config)

    def died(self) -> str | None:
        for name, proc in (("broker", self.broker), ("startd", self.startd)):
            if proc.poll() is not None:
                log = (self.folder / f"{name}.log").read_text(errors="replace")
                return f"{name} exited {proc.returncode}: {log[-3000:]}"
        return None


def fw(env: dict[str, str], *args: str, cwd: Path | None = None,
       ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "fetchwork", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)
    if ok:
        assert done.returncode == 0, f"fetchwork {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def _start(pool_env: dict[str, str], log: Path, command: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "fetchwork", command], env=pool_env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    name = f"x{uuid.uuid4().hex[:8]}"
    # Open to all: jobs run as the slot's user and need to reach their sandboxes.
    with open_folder("fw-xferpeople-") as folder, tls_redis(folder / "redis") as server:
        lines = []
        for who in (*ROLES, *PEOPLE):
            password = folder / f"{who}.pw"
            password.write_text(uuid.uuid4().hex + "\n")
            password.chmod(0o600)
            args = ("user", who) if who in PEOPLE else (who,)
            lines.append(fw(environ_without_config(), "acl", *args, "--pool", name,
                            "--password-file", str(password)).stdout.strip())
        server.write_acl_file(lines)
        with server.admin() as admin:
            admin.acl_load()
        found = Pool(server, name, folder, None, None)  # type: ignore[arg-type]
        found.broker = _start(found.env("admin", TRANSFER_POOL_MAX_MB=str(CAP_MB),
                                        BROKER_REAPER_INTERVAL="0.5"),
                              folder / "broker.log", "broker")
        found.startd = _start(found.env("execute", NUM_SLOTS="1",
                                        STARTER_ALLOW_RUNAS_OWNER="false",
                                        STARTD_JOB_HOOK_KEYWORD="FETCHWORK",
                                        FetchWorkDelay='ifThenElse(State == "Claimed" && '
                                                       'Activity == "Busy", 300, 0)',
                                        FETCHWORK_RENEW_INTERVAL="0.5",
                                        STARTER_INITIAL_UPDATE_INTERVAL="1",
                                        FETCHWORK_FETCH_LONG_POLL="1",
                                        FETCH_WORK_MIN_INTERVAL="0.2"),
                              folder / "startd.log", "startd")
        try:
            yield found
        finally:
            _stop(found.startd)
            _stop(found.broker)


def _work(pool: Pool, who: str) -> Path:
    work = pool.folder / f"work-{who}-{uuid.uuid4().hex[:6]}"
    (work / "sub").mkdir(parents=True)
    (work / "prog.sh").write_text(PROGRAM)
    (work / "prog.sh").chmod(0o755)
    (work / "data.txt").write_text(f"the data of {who}\n")
    (work / "sub" / "inner.txt").write_text(f"inner of {who}\n")
    (work / "job.sub").write_text(
        "executable = prog.sh\nshould_transfer_files = YES\n"
        "transfer_input_files = data.txt, sub\noutput = job.out\nqueue\n")
    return work


def _run_to_completion(pool: Pool, who: str, *submit_args: str) -> tuple[Path, str]:
    work = _work(pool, who)
    done = fw(pool.env(who), "submit", *submit_args, "job.sub", cwd=work)
    job = done.stdout.split("cluster ")[1].split(".")[0] + ".0"
    wait_until(lambda: (pool.client(who).get(job) or {}).get("JobStatus") == 4, 120,
               fail_if=pool.died, what=f"{who}'s job {job} completed")
    return work, job


def _staged(pool: Pool, who: str) -> int:
    with pool.server.admin() as admin:
        return int(admin.exists(PoolKeys(pool.name).person_staged(who)))


def test_a_persons_job_with_files_runs_and_returns_its_outputs(pool: Pool) -> None:
    work, job = _run_to_completion(pool, "alice", "-spool")
    alice = pool.client("alice")
    assert alice.get(job)["Owner"] == "alice"
    assert not (work / "copy.txt").exists()  # spooled: it waits for transfer-data
    fetched = fw(pool.env("alice"), "transfer-data", job, cwd=work)
    assert "output file(s) written" in fetched.stdout
    assert (work / "copy.txt").read_text() == "the data of alice\n"
    assert (work / "inner-copy.txt").read_text() == "inner of alice\n"
    assert (work / "made.txt").exists()
    again = fw(pool.env("alice"), "transfer-data", job, cwd=work)
    assert "already delivered" in again.stdout
    assert job not in stored.waiting_outputs(alice.store)
    assert _staged(pool, "alice") == 0  # the leader took the staging in
    with pool.server.admin() as admin:
        assert not admin.exists(PoolKeys(pool.name).person_outputs("alice")) or \
            not admin.hexists(PoolKeys(pool.name).person_outputs("alice"), job)


def test_fetchwork_wait_fetches_a_persons_outputs(pool: Pool) -> None:
    work = _work(pool, "alice")
    (work / "job.sub").write_text((work / "job.sub").read_text().replace(
        "queue\n", "log = job.log\nqueue\n"))
    done = fw(pool.env("alice"), "submit", "-spool", "job.sub", cwd=work)
    assert "cluster" in done.stdout
    fw(pool.env("alice"), "wait", "job.log", cwd=work)
    assert (work / "copy.txt").read_text() == "the data of alice\n"


def test_another_person_cannot_read_or_settle_the_outputs(pool: Pool) -> None:
    work, job = _run_to_completion(pool, "alice", "-spool")
    alice, bob = pool.client("alice"), pool.client("bob")
    keys = PoolKeys(pool.name)
    ident = alice.get(job)[OUTPUT_MANIFEST_ATTR]
    # bob's raw commands: the manifest and the chunk counts are not his to read, and no
    # transfer key is his to write or delete.
    for attempt in (lambda: bob.client.hget(keys.xfer_manifest(ident), "data"),
                    lambda: bob.client.hgetall(keys.xfer_chunkrefs),
                    lambda: bob.client.delete(keys.xfer_manifest(ident)),
                    lambda: bob.client.zrem(keys.xfer_outputs, f"{job}|{ident}"),
                    lambda: calls.transfer_settle(bob.store, manifest_id=ident, job_id=job,
                                                  how="delivered"),
                    lambda: bob.client.hset(keys.person_outputs("alice"), job, b"x")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    # ... and through the leader: refused, nothing handed out or settled.
    person = bob.person()
    assert person is not None
    with pytest.raises(BrokerError, match="bob may act only on its own jobs"):
        deliver(bob, person, job, {"Iwd": str(work)})
    refused = fw(pool.env("bob"), "transfer-data", job, cwd=work, ok=False)
    assert refused.returncode != 0 and "bob may act only on its own jobs" in refused.stderr
    assert not (work / "copy.txt").exists()
    assert job in stored.waiting_outputs(alice.store)
    fw(pool.env("alice"), "transfer-data", job, cwd=work)
    assert (work / "copy.txt").read_text() == "the data of alice\n"


def test_a_person_cannot_put_bad_content_into_the_pools_chunks(pool: Pool) -> None:
    alice, bob = pool.client("alice"), pool.client("bob")
    keys = PoolKeys(pool.name)
    good = b"the shared input\n"
    digest = hashlib.sha256(good).hexdigest()
    for attempt in (lambda: bob.client.set(keys.xfer_chunk(digest), b"evil"),
                    lambda: calls.transfer_chunk(bob.store, digest=digest, data=b"evil",
                                                 pending_ms=60_000),
                    lambda: bob.client.delete(keys.xfer_chunk(digest)),
                    lambda: bob.client.hset(keys.person_staged("alice"), "x", b"y")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    # Staged under a digest that is not its content: the leader refuses the submission.
    from fetchwork.transfer.manifest import FileEntry, Manifest
    manifest = Manifest((FileEntry("data.txt", 0o644, len(good), digest, (digest,)),))
    ident = manifest.ident()
    staged = keys.person_staged("bob")
    bob.client.hset(staged, f"chunk:{digest}", b"evil bytes\n")
    bob.client.hset(staged, f"manifest:{ident}", manifest.pack())
    before = len(alice.query())
    with pytest.raises(BrokerError, match="does not hold what its name says"):
        bob.submit([{"Cmd": "/bin/cat", "Arguments": "data.txt", "ShouldTransferFiles": "YES",
                     "FetchworkInputManifest": ident}])
    assert len(alice.query()) == before
    assert not alice.client.exists(keys.xfer_chunk(digest))
    assert _staged(pool, "bob") == 0  # the refused staging was freed
    # Naming a manifest it did not stage (anyone's) is refused too.
    work = _work(pool, "alice")
    (work / "job.sub").write_text((work / "job.sub").read_text().replace(
        "queue\n", "hold = true\nqueue\n"))
    done = fw(pool.env("alice"), "submit", "job.sub", cwd=work)
    theirs = alice.get(done.stdout.split("cluster ")[1].split(".")[0] + ".0")
    for named in (theirs["FetchworkInputManifest"], "0" * 64):
        with pytest.raises(BrokerError, match="was not staged by bob"):
            bob.submit([{"Cmd": "/bin/true", "ShouldTransferFiles": "YES",
                         "fetchworkinputmanifest": named}])
    with pytest.raises(BrokerError, match="must be one manifest id"):
        bob.submit([{"Cmd": "/bin/true", "FetchworkInputManifest": "../x"}])
    assert len(alice.query()) == before + 1


def test_a_submission_past_the_pool_cap_is_refused_with_nothing_queued(pool: Pool) -> None:
    work = _work(pool, "bob")
    (work / "data.txt").write_bytes(os.urandom((CAP_MB + 1) * 1024 * 1024))
    bob = pool.client("bob")
    before = len(bob.query())
    bytes_before = int(bob.client.get(bob.keys.xfer_bytes) or 0)
    refused = fw(pool.env("bob"), "submit", "job.sub", cwd=work, ok=False)
    assert refused.returncode != 0
    assert "TRANSFER_POOL_MAX_MB" in refused.stderr + refused.stdout
    assert len(bob.query()) == before
    assert int(bob.client.get(bob.keys.xfer_bytes) or 0) == bytes_before
    assert _staged(pool, "bob") == 0
    # The refused upload's chunks left the pool too.
    first = (work / "data.txt").read_bytes()[:CHUNK_BYTES]
    assert not bob.client.exists(bob.keys.xfer_chunk(hashlib.sha256(first).hexdigest()))


def test_a_persons_outputs_expire_through_the_leader(pool: Pool) -> None:
    work, job = _run_to_completion(pool, "alice", "-spool")
    alice = pool.client("alice")
    ident = alice.get(job)[OUTPUT_MANIFEST_ATTR]
    keys = PoolKeys(pool.name)
    with pool.server.admin() as admin:  # its TRANSFER_OUTPUT_LIFETIME passed
        admin.zadd(keys.xfer_outputs, {f"{job}|{ident}": 1})
    said = fw(pool.env("alice"), "transfer-data", job, cwd=work)
    assert "expired unfetched" in said.stdout
    assert not (work / "copy.txt").exists()
    assert alice.get(job)["FetchworkOutputs"] == "expired"
    with pool.server.admin() as admin:
        assert not admin.exists(keys.xfer_manifest(ident))


def test_the_python_api_submits_and_retrieves_a_persons_files(pool: Pool) -> None:
    from fetchwork.schedd import Schedd

    work = _work(pool, "alice")
    schedd = Schedd(config=Config.load(environ=pool.env("alice")))
    result = schedd.submit({"executable": str(work / "prog.sh"), "initialdir": str(work),
                            "should_transfer_files": "YES",
                            "transfer_input_files": "data.txt, sub", "output": "job.out"},
                           spool=True)
    job = f"{result.cluster()}.0"
    wait_until(lambda: (pool.client("alice").get(job) or {}).get("JobStatus") == 4, 120,
               fail_if=pool.died, what=f"alice's job {job} completed")
    schedd.retrieve(job)
    assert (work / "copy.txt").read_text() == "the data of alice\n"
    bobs = Schedd(config=Config.load(environ=pool.env("bob")))
    with pytest.raises(TransferError, match="bob may act only on its own jobs"):
        bobs.retrieve(job)


def test_a_persons_inputs_already_in_the_pool_are_counted_not_sent(pool: Pool) -> None:
    work = _work(pool, "bob")
    (work / "data.txt").write_bytes(os.urandom(1024 * 1024))
    (work / "job.sub").write_text((work / "job.sub").read_text().replace(
        "queue\n", "hold = true\nqueue\n"))
    bob = pool.client("bob")
    keys = bob.keys
    jobs, said = [], []
    for _ in range(2):
        done = fw(pool.env("bob"), "submit", "job.sub", cwd=work)
        jobs.append(done.stdout.split("cluster ")[1].split(".")[0] + ".0")
        said.append(done.stderr)
    assert "0.0 MB sent" not in said[0] and "0.0 MB sent" in said[1]
    [ident] = {bob.get(job)["FetchworkInputManifest"] for job in jobs}
    with pool.server.admin() as admin:
        assert int(admin.hget(keys.xfer_refs, ident)) == 2
    bob.remove([jobs[0]])
    with pool.server.admin() as admin:
        assert int(admin.hget(keys.xfer_refs, ident)) == 1
    bob.remove([jobs[1]])
    with pool.server.admin() as admin:
        assert admin.hget(keys.xfer_refs, ident) is None
        assert not admin.exists(keys.xfer_manifest(ident))
    first = (work / "data.txt").read_bytes()
    assert not bob.client.exists(keys.xfer_chunk(hashlib.sha256(first).hexdigest()))



def test_an_abandoned_staging_expires_by_itself(pool: Pool) -> None:
    """Inputs staged by a submission that never reached the leader go by themselves."""
    work = _work(pool, "bob")
    bob = pool.client("bob")
    ad = {"Cmd": "prog.sh", "Iwd": str(work), "ShouldTransferFiles": "YES",
          "TransferInput": "data.txt"}
    stage_inputs(bob, "bob", [ad], pending_ms=1500)
    staged = bob.keys.person_staged("bob")
    assert bob.client.hget(staged, f"manifest:{ad['FetchworkInputManifest']}")
    assert 0 < bob.client.pttl(staged) <= 1500
    wait_until(lambda: _staged(pool, "bob") == 0, 30, what="the staging expired")
