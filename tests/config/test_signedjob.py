"""Job signatures: what they cover, and that the text survives the trip to the starter."""

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


def signed(key: Ed25519PrivateKey, data: dict) -> dict:
    return {**data, signedjob.SIGNATURE_ATTR: signedjob.sign(key, signedjob.signed_text_of(data))}


def as_the_starter_reads_it(data: dict):
    return parse_ad(format_ad(from_dict(data)))


def test_a_signed_job_checks_after_the_trip_through_ad_text(key):
    ad = as_the_starter_reads_it(signed(key, JOB))
    assert signedjob.check(key.public_key(), ad) is None


@pytest.mark.parametrize("name, value", [
    ("Cmd", "/bin/rm"), ("Arguments", "-rf /"), ("Owner", "bob"), ("Iwd", "/tmp"),
    ("Env", "LD_PRELOAD=/x.so"), ("In", "/etc/shadow"), ("GlobalJobId", "p#4.0#1700000000"),
    ("ProcId", 1), ("TransferInput", "a.txt"), ("JobUniverse", 7)])
def test_changing_or_adding_a_signed_attribute_breaks_the_signature(key, name, value):
    data = signed(key, JOB)
    data[name] = value
    why = signedjob.check(key.public_key(), as_the_starter_reads_it(data))
    assert why is not None and "changed" in why


def test_unsigned_attributes_may_change(key):
    data = signed(key, JOB)
    data["RequestMemory"] = 4096
    data["HookKeyword"] = "OTHER"
    assert signedjob.check(key.public_key(), as_the_starter_reads_it(data)) is None


def test_attribute_names_are_matched_without_case(key):
    data = signed(key, JOB)
    data["cmd"] = data.pop("Cmd")
    assert signedjob.check(key.public_key(), as_the_starter_reads_it(data)) is None


def test_another_pools_key_or_no_signature_is_refused(key):
    other = Ed25519PrivateKey.generate()
    assert signedjob.check(key.public_key(), as_the_starter_reads_it(signed(other, JOB)))
    why = signedjob.check(key.public_key(), as_the_starter_reads_it(JOB))
    assert why is not None and "no FetchworkSignature" in why
    for bad in ("v2:abc", "v1:!!!", "v1:" + "A" * 88, ""):
        assert signedjob.check(key.public_key(),
                               as_the_starter_reads_it({**JOB, "FetchworkSignature": bad}))


def test_keys_load_from_pem_and_refuse_other_material(tmp_path):
    private, public = signedjob.new_private_pem()
    key = signedjob.read_private_key(private, "k")
    assert signedjob.public_pem(key).encode() == public
    assert signedjob.read_public_key(public, "p")
    with pytest.raises(ValueError, match="p is not a PEM public key"):
        signedjob.read_public_key(b"junk", "p")
    with pytest.raises(ValueError, match="k is not an unencrypted PEM private key"):
        signedjob.read_private_key(public, "k")
