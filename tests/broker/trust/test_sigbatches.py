"""Signed batches stored once (lua/sigbatch.lua, sig_sweep.lua) on a real Redis: a job
keeps a short field and its hash stays in Redis's compact encoding; the claim hands out
the job's whole v3 signature (a 16-wide tree), rebuilt from the batch; a changed node or
a moved index does not check; a batch stored as v2 (binary) before still hands out
signatures that check; a batch's keys go when its last job leaves the queue."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fetchwork.broker.client import Broker
from fetchwork.broker.filters.leader import BATCH, FilterLeader
from fetchwork.config import signedjob
from fetchwork.config.loader import Config
from fetchwork.starter import jobsignature
from tests.support.sigbatches import SIG_REF, handed_signature, settle
from tests.support.waiting import wait_until

SLOT = {"Name": "slot1@here", "Cpus": 1, "Memory": 1024, "Requirements": True, "Start": True}


@pytest.fixture
def signing(signing_leader):
    return signing_leader


def swept(leader: FilterLeader) -> bool:
    """A pass that sweeps the stored batches (one is due every SWEEP_INTERVAL_S)."""
    leader._swept_at = 0.0
    settle(leader)
    return True


def submit(broker: Broker, leader: FilterLeader, count: int) -> list[str]:
    jobs = broker.submit([{"Cmd": "/bin/true", "Arguments": f"job {n}"} for n in range(count)],
                         owner="alice")
    settle(leader)
    return jobs


def batch_of(broker: Broker, job: str) -> str:
    ref = broker.client.hget(broker.keys.job(job), SIG_REF)
    assert ref is not None
    return ref.decode().partition(":")[0]


def starter_verdict(public: Path, ad, pool: str) -> jobsignature.Verdict:
    config = Config.load(environ={"_FETCHWORK_JOB_SIGNING_PUBLIC_KEY": str(public),
                                  "_FETCHWORK_FETCHWORK_POOL": pool})
    return jobsignature.verdict(config, ad)


def test_a_signed_jobs_hash_keeps_a_short_field_and_the_compact_encoding(signing) -> None:
    broker, leader, _public = signing
    jobs = submit(broker, leader, 300)
    for job in (jobs[0], jobs[150], jobs[-1]):
        key = broker.keys.job(job)
        ref = broker.client.hget(key, SIG_REF)
        assert ref is not None and len(ref) < 64
        assert not broker.client.hexists(key, signedjob.SIGNATURE_ATTR)
        assert broker.client.object("encoding", key) == b"listpack"
    # One string a batch: 160 bytes of header, then every level of the 16-wide tree
    # below its root: 300 leaves, 19 nodes, 2 nodes (about 34 bytes a job).
    blob = broker.client.get(broker.keys.sig_batch(batch_of(broker, jobs[0])))
    assert blob is not None and len(blob) == 160 + 32 * (300 + 19 + 2)
    assert blob[64:160].strip().endswith(b":300:16")


@pytest.mark.parametrize("count", [1, 2, 3, 5, 16, 17, 33, 257])
def test_the_claim_hands_out_the_signature_its_batch_gives(signing, count: int) -> None:
    broker, leader, public = signing
    jobs = submit(broker, leader, count)
    key = signedjob.read_public_key(public.read_bytes(), "p")
    seen = set()
    for _ in jobs:
        ad = broker.claim(SLOT)
        assert ad is not None
        job = f"{ad['ClusterId']}.{ad['ProcId']}"
        seen.add(job)
        # The claim's text (its parts from Lua, written by the claim's caller) is byte
        # for byte the one config/signedjob.py rebuilds from the batch.
        assert ad[signedjob.SIGNATURE_ATTR] == handed_signature(broker, job)
        assert not any(name.startswith("#") for name in ad)
        assert signedjob.check(key, ad, broker.pool) is None
        assert starter_verdict(public, ad, broker.pool).owner_trusted
    assert seen == set(jobs)


def test_a_changed_node_or_a_moved_index_does_not_check(signing) -> None:
    broker, leader, public = signing
    jobs = submit(broker, leader, 18)
    number = batch_of(broker, jobs[0])
    client = broker.client
    # Job 1's leaf changed in the batch's string: it is in the proof of every other job
    # of its group of 16 (jobs 0 to 15), not in its own nor in the next group's.
    client.setrange(broker.keys.sig_batch(number), 160 + 32, b"\0" * 32)
    # Job 16 moved onto job 17's leaf.
    client.hset(broker.keys.job(jobs[16]), SIG_REF, f"{number}:17")
    refused = {}
    for _ in jobs:
        ad = broker.claim(SLOT)
        assert ad is not None
        assert ad[signedjob.SIGNATURE_ATTR].startswith("v3:")
        job = f"{ad['ClusterId']}.{ad['ProcId']}"
        refused[job] = starter_verdict(public, ad, broker.pool).refusal
    for job in (jobs[1], jobs[17]):
        assert refused[job] is None
    for job in (*jobs[0:1], *jobs[2:17]):
        assert refused[job] is not None and "job signature check failed" in refused[job]


def test_a_batch_stored_as_v2_before_still_checks(signing, tmp_path: Path) -> None:
    # Jobs queued before the 16-wide tree: their batch's binary string is replaced by
    # the v2 one the same key signs, and the claim still hands out signatures that check.
    broker, leader, public = signing
    jobs = submit(broker, leader, 5)
    number = batch_of(broker, jobs[0])
    key = signedjob.read_private_key((tmp_path / "k.pem").read_bytes(), "k.pem")
    leaves = [signedjob.leaf_digest(signedjob.signed_text_of(broker.get(job) or {}))
              for job in jobs]
    old = signedjob.sign_batch_blob(key, broker.pool, "old.1", leaves,
                                    version=signedjob.VERSION)
    assert len(old.blob) == 160 + 32 * (5 + 3 + 2)
    broker.client.set(broker.keys.sig_batch(number), old.blob)
    for _ in jobs:
        ad = broker.claim(SLOT)
        assert ad is not None
        assert ad[signedjob.SIGNATURE_ATTR].startswith("v2:old.1:5:")
        assert starter_verdict(public, ad, broker.pool).refusal is None


def test_a_job_signed_alone_or_before_keeps_its_own_signature(signing) -> None:
    broker, leader, public = signing
    [job] = submit(broker, leader, 1)
    client, key = broker.client, broker.keys.job(job)
    data = dict(next(iter(broker.store.hashes([job])))[1])
    # A job queued with a whole v2 signature (from before batches were stored apart).
    old = leader.signer.signature(data)  # type: ignore[union-attr]
    client.hdel(key, SIG_REF)
    client.hset(key, signedjob.SIGNATURE_ATTR, msgpack.packb(old))
    ad = broker.claim(SLOT)
    assert ad is not None and ad[signedjob.SIGNATURE_ATTR] == old
    assert starter_verdict(public, ad, broker.pool).owner_trusted


def live_batches(broker: Broker) -> set[bytes]:
    return set(broker.client.smembers(broker.keys.sig_batches))


def test_a_batch_is_freed_when_its_last_job_leaves_the_queue(signing) -> None:
    broker, leader, _public = signing
    jobs = submit(broker, leader, 3)
    number = batch_of(broker, jobs[0])
    keys = broker.keys
    assert live_batches(broker) == {number.encode()}
    # One job finishes, one is removed: the batch still serves the third.
    ad = broker.claim(SLOT)
    assert ad is not None
    finished = f"{ad['ClusterId']}.{ad['ProcId']}"
    assert broker.finish(finished, ad["FetchworkClaim"], "exit")
    others = [job for job in jobs if job != finished]
    broker.remove([others[0]])
    settle(leader)
    swept(leader)
    assert broker.client.exists(keys.sig_batch(number), keys.sig_jobs(number)) == 2
    # The runs left name only what may still be queued.
    assert broker.client.get(keys.sig_jobs(number)).decode().count("-") >= 1
    broker.remove([others[1]])
    wait_until(lambda: swept(leader) and not broker.client.exists(keys.sig_batch(number)),
               10, what="the batch freed by a leader's pass")
    assert broker.client.exists(keys.sig_jobs(number)) == 0
    assert live_batches(broker) == set()
    # History keeps the jobs (and their short field) until it is trimmed; nothing of the
    # batch is needed for that, and trimming it leaves no batch key behind.
    assert broker.trim_history(0) == 3
    assert not any(broker.client.exists(keys.job(job)) for job in jobs)
    assert not broker.client.keys(keys.prefix.replace("{", "[{]").replace("}", "[}]")
                                  + "sig:*")


def test_a_batch_outlives_a_forged_counter_and_its_number_is_not_reused(signing) -> None:
    broker, leader, public = signing
    first = submit(broker, leader, 2)
    number = batch_of(broker, first[0])
    # The counter set back (the submitter role's DECR reaches every key): the next batch
    # takes a number no stored batch has, so the first batch's jobs still check.
    broker.client.set(broker.keys.sig_counter, "0")
    second = submit(broker, leader, 2)
    assert batch_of(broker, second[0]) != number
    key = signedjob.read_public_key(public.read_bytes(), "p")
    for _ in first + second:
        ad = broker.claim(SLOT)
        assert ad is not None and signedjob.check(key, ad, broker.pool) is None


def test_a_full_admission_batch_fits_16_kib() -> None:
    # The leader's batch size is chosen so a full batch's string, with Redis's 6-byte
    # string header, takes the allocator's 16 KiB class and one more job would not.
    key = Ed25519PrivateKey.generate()

    def stored(count: int) -> int:
        leaves = [signedjob.leaf_digest(str(n).encode()) for n in range(count)]
        return len(signedjob.sign_batch_blob(key, "p", "b1", leaves).blob) + 6

    assert stored(BATCH) <= 16384 < stored(BATCH + 1)
