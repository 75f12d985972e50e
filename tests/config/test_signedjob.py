"""Job signatures: what they cover, that the text survives the trip to the starter, and
that one signature over a batch's hash tree checks each job of the batch and nothing
else (another job, batch or pool)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fetchwork.config import signedjob
from fetchwork.config.ads import format_ad, from_dict, parse_ad

JOB = {"GlobalJobId": "p#3.0#1700000000", "ClusterId": 3, "ProcId": 0, "Owner": "alice",
       "Cmd": "/bin/sh", "Arguments": "-c 'echo \"hi\" \\\\ é'", "Iwd": "/home/alice",
       "Environment": "A=1 B='x y'", "JobUniverse": 5, "RequestMemory": 128,
       "Out": "out.txt", "Extra": {"$expr": "RequestMemory * 2"}}


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


POOL = "p"


def signed(key: Ed25519PrivateKey, data: dict) -> dict:
    [signature] = signedjob.sign_batch(key, POOL, "b1", [signedjob.signed_text_of(data)])
    return {**data, signedjob.SIGNATURE_ATTR: signature}


def batch(key: Ed25519PrivateKey, count: int, batch_id: str = "b1", pool: str = POOL,
          cluster: int = 3) -> list[dict]:
    jobs = [{**JOB, "ClusterId": cluster, "ProcId": n,
             "GlobalJobId": f"p#{cluster}.{n}#1700000000"} for n in range(count)]
    signatures = signedjob.sign_batch(key, pool, batch_id,
                                      [signedjob.signed_text_of(job) for job in jobs])
    return [{**job, signedjob.SIGNATURE_ATTR: value}
            for job, value in zip(jobs, signatures, strict=True)]


def as_the_starter_reads_it(data: dict):
    return parse_ad(format_ad(from_dict(data)))


def test_a_signed_job_checks_after_the_trip_through_ad_text(key):
    ad = as_the_starter_reads_it(signed(key, JOB))
    assert signedjob.check(key.public_key(), ad, POOL) is None


@pytest.mark.parametrize("name, value", [
    ("Cmd", "/bin/rm"), ("Arguments", "-rf /"), ("Owner", "bob"), ("Iwd", "/tmp"),
    ("Env", "LD_PRELOAD=/x.so"), ("In", "/etc/shadow"), ("GlobalJobId", "p#4.0#1700000000"),
    ("ProcId", 1), ("TransferInput", "a.txt"), ("JobUniverse", 7)])
def test_changing_or_adding_a_signed_attribute_breaks_the_signature(key, name, value):
    data = signed(key, JOB)
    data[name] = value
    why = signedjob.check(key.public_key(), as_the_starter_reads_it(data), POOL)
    assert why is not None and "changed" in why


def test_unsigned_attributes_may_change(key):
    data = signed(key, JOB)
    data["RequestMemory"] = 4096
    data["HookKeyword"] = "OTHER"
    assert signedjob.check(key.public_key(), as_the_starter_reads_it(data), POOL) is None


def test_attribute_names_are_matched_without_case(key):
    data = signed(key, JOB)
    data["cmd"] = data.pop("Cmd")
    assert signedjob.check(key.public_key(), as_the_starter_reads_it(data), POOL) is None


def test_another_pools_key_or_no_signature_is_refused(key):
    other = Ed25519PrivateKey.generate()
    assert signedjob.check(key.public_key(), as_the_starter_reads_it(signed(other, JOB)), POOL)
    why = signedjob.check(key.public_key(), as_the_starter_reads_it(JOB), POOL)
    assert why is not None and "no FetchworkSignature" in why
    for bad in ("v2:abc", "v2:b1:1:0:!!:", "v2:b1:1:5:AAAA:", "v2:b:c:1:0:AA==:",
                "v2:b1:99999999999:0:AA==:", "v1:!!!", "v1:" + "A" * 88, "v3:x", ""):
        assert signedjob.check(key.public_key(),
                               as_the_starter_reads_it({**JOB, "FetchworkSignature": bad}),
                               POOL)


def test_keys_load_from_pem_and_refuse_other_material(tmp_path):
    private, public = signedjob.new_private_pem()
    key = signedjob.read_private_key(private, "k")
    assert signedjob.public_pem(key).encode() == public
    assert signedjob.read_public_key(public, "p")
    with pytest.raises(ValueError, match="p is not a PEM public key"):
        signedjob.read_public_key(b"junk", "p")
    with pytest.raises(ValueError, match="k is not an unencrypted PEM private key"):
        signedjob.read_private_key(public, "k")


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 13, 17])
def test_every_job_of_a_batch_checks_with_one_verification(key, count):
    roots = signedjob.RootCache()
    ads = [as_the_starter_reads_it(job) for job in batch(key, count)]
    assert all(signedjob.check(key.public_key(), ad, POOL, roots) is None for ad in ads)
    assert len(roots._seen) == 1  # one root, verified once


def test_a_proof_from_another_job_batch_or_pool_is_refused(key):
    first, second = batch(key, 6), batch(key, 6, batch_id="b2", cluster=4)
    attr = signedjob.SIGNATURE_ATTR
    roots = signedjob.RootCache()
    swapped = {**first[0], attr: first[1][attr]}
    other_batch = {**first[2], attr: second[2][attr]}
    for data in (swapped, other_batch):
        assert signedjob.check(key.public_key(), as_the_starter_reads_it(data), POOL, roots)
    elsewhere = batch(key, 3, pool="q")[0]
    why = signedjob.check(key.public_key(), as_the_starter_reads_it(elsewhere), POOL, roots)
    assert why is not None and "another pool than 'p'" in why
    # A verified root does not let a changed job through.
    assert signedjob.check(key.public_key(), as_the_starter_reads_it(first[3]), POOL,
                           roots) is None
    changed = {**first[4], "Cmd": "/bin/evil"}
    assert signedjob.check(key.public_key(), as_the_starter_reads_it(changed), POOL, roots)


def test_a_proof_that_does_not_fit_its_index_or_size_is_refused(key):
    jobs = batch(key, 5)
    head, count, index, signature, path = jobs[1][signedjob.SIGNATURE_ATTR].rsplit(":", 4)
    for changed in (f"{head}:{count}:4:{signature}:{path}",   # another leaf's place
                    f"{head}:9:{index}:{signature}:{path}",   # another batch size
                    f"{head}:{count}:{index}:{signature}:",   # no proof
                    f"{head}:{count}:{index}:{signature}:{path}AAAA"):
        data = {**jobs[1], signedjob.SIGNATURE_ATTR: changed}
        assert signedjob.check(key.public_key(), as_the_starter_reads_it(data), POOL)


def test_the_tree_and_its_proofs_agree():
    for count in range(1, 40):
        leaves = [signedjob.leaf_digest(str(n).encode()) for n in range(count)]
        root, paths = signedjob.tree(leaves)
        for index, (leaf, path) in enumerate(zip(leaves, paths, strict=True)):
            assert signedjob.root_of(leaf, index, count, path) == root
        if count > 1:
            assert signedjob.root_of(leaves[0], 1, count, paths[0]) != root
    with pytest.raises(ValueError):
        signedjob.tree([])


def test_the_root_cache_keeps_the_latest_roots_only(key):
    roots = signedjob.RootCache(size=2)
    public = key.public_key()
    for n in range(3):
        roots.add(public, f"m{n}".encode(), b"s")
    assert not roots.known(public, b"m0", b"s")
    assert roots.known(public, b"m1", b"s") and roots.known(public, b"m2", b"s")


@pytest.mark.parametrize("value", [
    "", "plain", 'a "quoted" word', "back\\slash", "tab\there", "new\nline", "é", "\x7f",
    "~!#[]{}", 0, -7, 2**40, True, False, 1.5, [1, "a"], {"$expr": "Memory > 2"}, None])
def test_the_stored_jobs_text_is_the_ads_text(value):
    """signed_text_of (the leader and a submission, from a stored mapping) writes each
    value as signed_text does from the ad the starter parses back."""
    data = {**JOB, "Cmd": value, "args": value}
    if value is None:
        del data["Cmd"]
    assert signedjob.signed_text_of(data) == signedjob.signed_text(as_the_starter_reads_it(data))


def test_signing_leaves_is_signing_their_texts(key):
    texts = [signedjob.signed_text_of({**JOB, "ProcId": n}) for n in range(5)]
    leaves = [signedjob.leaf_digest(text) for text in texts]
    assert signedjob.sign_leaves(key, POOL, "b1", leaves) == \
        signedjob.sign_batch(key, POOL, "b1", texts)
