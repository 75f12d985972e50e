"""Stored batches signed as v3 (a hash tree of 16 children a node): every job of a
batch checks from the proof the stored string gives; a changed job, node, index or
size is caught; a v3 proof cannot pass as v2 or the reverse; v2 and v1 jobs queued
before still check."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fetchwork.config import signaturetext, signedjob
from fetchwork.config.ads import format_ad, from_dict, parse_ad

POOL = "p"
ATTR = signedjob.SIGNATURE_ATTR


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def jobs_of(count: int) -> list[dict]:
    return [{"GlobalJobId": f"p#3.{n}#1700000000", "ClusterId": 3, "ProcId": n,
             "Owner": "alice", "Cmd": "/bin/true", "Arguments": f"job {n}"}
            for n in range(count)]


def handed(key: Ed25519PrivateKey, count: int, version: str = signedjob.WIDE_VERSION
           ) -> list[dict]:
    """Each job with the signature a claim rebuilds from its batch's stored string."""
    jobs = jobs_of(count)
    leaves = [signedjob.leaf_digest(signedjob.signed_text_of(job)) for job in jobs]
    blob = signedjob.sign_batch_blob(key, POOL, "b1", leaves, version=version).blob
    return [{**job, ATTR: signedjob.proof_text(blob, index)}
            for index, job in enumerate(jobs)]


def verdict(key: Ed25519PrivateKey, data: dict) -> str | None:
    return signedjob.check(key.public_key(), parse_ad(format_ad(from_dict(data))), POOL)


def test_the_wide_tree_and_its_proofs_agree() -> None:
    arity = signedjob.WIDE_ARITY
    for count in (*range(1, 40), 255, 256, 257, 500):
        leaves = [signedjob.leaf_digest(str(n).encode()) for n in range(count)]
        tiers = signedjob.levels(leaves, arity)
        root = tiers[-1][0]
        assert len(tiers[-1]) == 1
        for index in sorted({0, min(1, count - 1), count // 2, count - 1}):
            path = []
            pos = index
            for tier in tiers[:-1]:
                start = pos - pos % arity
                group = tier[start:start + arity]
                if len(group) > 1:
                    path += [node for at, node in enumerate(group, start) if at != pos]
                pos //= arity
            raw = b"".join(path)
            assert signedjob.root_of(leaves[index], index, count, raw, arity) == root
            if count > 1:
                other = (index + 1) % count
                assert signedjob.root_of(leaves[index], other, count, raw, arity) != root


def test_arity_two_is_the_binary_tree() -> None:
    for count in range(1, 20):
        leaves = [signedjob.leaf_digest(str(n).encode()) for n in range(count)]
        root, _paths = signedjob.tree(leaves)
        assert signedjob.levels(leaves, 2)[-1][0] == root


@pytest.mark.parametrize("count", [1, 2, 15, 16, 17, 300, 500])
def test_every_job_of_a_v3_batch_checks(key, count: int) -> None:
    jobs = handed(key, count)
    assert all(job[ATTR].startswith(f"v3:b1:{count}:") for job in jobs)
    for job in (jobs[0], jobs[count // 2], jobs[-1]):
        assert verdict(key, job) is None


def test_a_v3_batch_stores_about_34_bytes_a_job(key) -> None:
    leaves = [signedjob.leaf_digest(str(n).encode()) for n in range(500)]
    wide = signedjob.sign_batch_blob(key, POOL, "b1", leaves).blob
    binary = signedjob.sign_batch_blob(key, POOL, "b1", leaves, version="v2").blob
    assert len(wide) == 160 + 32 * (500 + 32 + 2)
    assert len(binary) == 160 + 32 * (500 + 250 + 125 + 63 + 32 + 16 + 8 + 4 + 2)


def test_a_changed_job_node_index_or_size_is_caught(key) -> None:
    jobs = handed(key, 40)
    assert verdict(key, {**jobs[5], "Cmd": "/bin/evil"}) is not None
    assert verdict(key, {**jobs[5], "Owner": "root"}) is not None
    head, count, index, signature, path = jobs[5][ATTR].rsplit(":", 4)
    raw = bytearray(base64.b64decode(path))
    raw[0] ^= 1
    tampered = base64.b64encode(bytes(raw)).decode()
    for changed in (f"{head}:{count}:{index}:{signature}:{tampered}",  # a sibling changed
                    f"{head}:{count}:6:{signature}:{path}",            # another leaf's place
                    f"{head}:41:{index}:{signature}:{path}",           # another batch size
                    f"{head}:{count}:{index}:{signature}:",            # no proof
                    f"{head}:{count}:{index}:{signature}:{path}AAAA"):  # too long
        assert verdict(key, {**jobs[5], ATTR: changed}) is not None
    # Another job's proof.
    assert verdict(key, {**jobs[5], ATTR: jobs[6][ATTR]}) is not None


def test_a_proof_cannot_change_version(key) -> None:
    # A batch of two: the v2 and v3 trees are the same shape, so only the signed header
    # tells them apart.
    wide, binary = handed(key, 2), handed(key, 2, version="v2")
    assert verdict(key, wide[0]) is None and verdict(key, binary[0]) is None
    as_v2 = {**wide[0], ATTR: "v2" + wide[0][ATTR][2:]}
    as_v3 = {**binary[0], ATTR: "v3" + binary[0][ATTR][2:]}
    assert verdict(key, as_v2) is not None
    assert verdict(key, as_v3) is not None


def test_v2_and_v1_jobs_still_check(key) -> None:
    binary = handed(key, 20, version="v2")
    assert binary[7][ATTR].startswith("v2:")
    assert verdict(key, binary[7]) is None
    [v2] = signedjob.sign_batch(key, POOL, "b9", [signedjob.signed_text_of(jobs_of(1)[0])])
    assert verdict(key, {**jobs_of(1)[0], ATTR: v2}) is None
    one = jobs_of(1)[0]
    v1 = "v1:" + base64.b64encode(key.sign(signedjob.signed_text_of(one))).decode()
    assert verdict(key, {**one, ATTR: v1}) is None
    assert verdict(key, {**one, "Cmd": "/bin/evil", ATTR: v1}) is not None


def test_an_unknown_version_names_the_ones_checked(key) -> None:
    why = verdict(key, {**jobs_of(1)[0], ATTR: "v9:x"})
    assert why is not None and "v3, v2 and v1" in why



def test_a_claims_signature_parts_read_as_the_text_the_batch_gives(key) -> None:
    """The claim hands out a stored job's label, root signature and proof raw
    (lua/sigbatch.lua); its caller's text is the one proof_text makes, and parts that
    do not read so give no signature (the starter then refuses the job unsigned)."""
    leaves = [signedjob.leaf_digest(str(n).encode()) for n in range(40)]
    blob = signedjob.sign_batch_blob(key, POOL, "b1", leaves).blob
    for index in (0, 17, 39):
        text = signedjob.proof_text(blob, index)
        assert text is not None
        label, signature, proof = text.rsplit(":", 2)
        parts = (label + ":").encode() + base64.b64decode(signature) + base64.b64decode(proof)
        assert signaturetext.text_of_parts(parts) == text
        assert signaturetext.text_of_parts(parts[:len(label) + 1 + 63]) is None
    assert signaturetext.text_of_parts(b"v3:b1:40" + bytes(64)) is None
    assert signaturetext.text_of_parts("v3:b\u00e9:40:1:".encode() + bytes(64)) is None
