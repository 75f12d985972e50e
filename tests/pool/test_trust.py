"""A pool on one machine signs its jobs, a batch at a time, and its startd checks
them: a job whose command was rewritten in Redis after admission is held, naming the
check and the slot, and never runs; untouched jobs of one batch all run; the pool
says it is unauthenticated."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from tests.support.pools import UpPool, fw, pool_up, q_json
from tests.support.sigbatches import SIG_REF, handed_signature
from tests.support.startd import pool_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def pool() -> Iterator[UpPool]:
    with pool_root("trust") as root, pool_up(root, 1) as up:
        yield up


def test_a_job_rewritten_after_admission_is_held_and_never_runs(pool: UpPool) -> None:
    work = pool.folder("work")
    (work / "job.sub").write_text("executable = /bin/touch\narguments = ran\nhold = true\n"
                                  "queue\n")
    fw(pool.env, "submit", "job.sub", cwd=work)
    [ad] = q_json(pool.env)
    job = f"{ad['ClusterId']}.{ad['ProcId']}"
    broker = Broker.from_config(Config.load(environ=pool.env))
    # The job names its place in a stored batch; the claim hands out its whole signature.
    assert "FetchworkSignature" not in ad
    assert str(handed_signature(broker, job)).startswith("v3:")
    since = broker.last_event_id()
    # What a stolen execute credential may do: write the queued job's hash.
    broker.client.hset(broker.keys.job(job), "Arguments", msgpack.packb("tampered"))
    fw(pool.env, "release", job)
    held = wait_until(lambda: [a for a in q_json(pool.env)
                               if a["JobStatus"] == 5 and "signature" in a.get("HoldReason", "")],
                      timeout_s=120, fail_if=pool.up.died, what="the job held by the startd")
    reason = held[0]["HoldReason"]
    assert reason.startswith("Error from slot1@") and "job signature check failed" in reason
    assert held[0]["HoldReasonCode"] == 4
    assert not (work / "ran").exists() and not (work / "tampered").exists()
    events = [fields for _id, fields in broker.events(since, count=1000)
              if fields.get("job") == job and fields.get("state") == "HELD"]
    assert events and "slot1@" in events[-1]["hold_reason"]
    broker.remove([job])


def test_untouched_jobs_run_and_the_pool_says_it_is_unauthenticated(pool: UpPool) -> None:
    work = pool.folder("fine")
    # Three jobs admitted in one batch: one signature, each job its own proof path.
    (work / "three.sub").write_text("executable = /bin/touch\narguments = ran.$(Process)\n"
                                    "queue 3\n")
    fw(pool.env, "submit", "three.sub", cwd=work)
    wait_until(lambda: all((work / f"ran.{n}").exists() for n in range(3)), timeout_s=120,
               fail_if=pool.up.died, what="the three jobs ran")
    assert "This pool is unauthenticated" in " ".join(fw(pool.env, "status").stdout.split())
    key = Path(pool.env["FETCHWORK_STATE_DIR"]) / "keys" / "job-signing.key"
    assert key.stat().st_mode & 0o077 == 0
    assert fw(pool.env, "acl", "public-key").stdout.startswith("-----BEGIN PUBLIC KEY-----")


def test_a_changed_batch_node_or_a_moved_index_is_held_by_the_startd(pool: UpPool) -> None:
    work = pool.folder("moved")
    # Four jobs of one batch, held so nothing runs before the batch is tampered with.
    (work / "four.sub").write_text("executable = /bin/touch\narguments = ran.$(Process)\n"
                                   "hold = true\nqueue 4\n")
    fw(pool.env, "submit", "four.sub", cwd=work)
    ads = sorted(q_json(pool.env), key=lambda ad: ad["ProcId"])
    jobs = [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads
            if ad["JobStatus"] == 5 and ad.get("Iwd") == str(work)]
    assert len(jobs) == 4
    broker = Broker.from_config(Config.load(environ=pool.env))
    client = broker.client
    refs = [client.hget(broker.keys.job(job), SIG_REF) for job in jobs]
    assert all(refs)
    number = refs[0].decode().partition(":")[0]
    # What someone who could write the batch's string or a job's hash might try: job 0's
    # sibling leaf (job 1's) changed; job 2 moved onto job 3's leaf.
    client.setrange(broker.keys.sig_batch(number), 160 + 32, b"\xff" * 32)
    client.hset(broker.keys.job(jobs[2]), SIG_REF, f"{number}:3")
    fw(pool.env, "release", jobs[0], jobs[2])

    def held() -> list[dict]:
        found = [ad for ad in q_json(pool.env)
                 if f"{ad['ClusterId']}.{ad['ProcId']}" in (jobs[0], jobs[2])
                 and ad["JobStatus"] == 5 and "signature" in ad.get("HoldReason", "")]
        return found if len(found) == 2 else []

    for ad in wait_until(held, timeout_s=120, fail_if=pool.up.died,
                         what="both tampered jobs held by the startd"):
        assert "job signature check failed" in ad["HoldReason"]
        assert ad["HoldReason"].startswith("Error from slot1@")
    assert not (work / "ran.0").exists() and not (work / "ran.2").exists()
    # Job 1's own proof (the other leaves of its group of 16) does not hold its own leaf,
    # the one changed in the string: its attributes are untouched, so it runs.
    fw(pool.env, "release", jobs[1])
    wait_until(lambda: (work / "ran.1").exists(), timeout_s=120, fail_if=pool.up.died,
               what="the untouched job ran")
    broker.remove(jobs)
