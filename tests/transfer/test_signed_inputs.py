"""The input sandbox a job names is signed: pointing a queued job at other files in
the pool (another manifest, whose executable would then run as the job's Owner)
breaks its signature, so the starter holds it instead of running it."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fetchwork.config import signedjob
from fetchwork.config.ads import format_ad, from_dict, parse_ad
from fetchwork.transfer.inputs import INPUT_MANIFEST_ATTR

JOB = {"GlobalJobId": "p#3.0#1700000000", "ClusterId": 3, "ProcId": 0, "Owner": "alice",
       "Cmd": "prog.sh", "Iwd": "/home/alice", "ShouldTransferFiles": "YES",
       INPUT_MANIFEST_ATTR: "a" * 64}


def _check(key: Ed25519PrivateKey, data: dict) -> str | None:
    return signedjob.check(key.public_key(), parse_ad(format_ad(from_dict(data))), "p")


def test_another_input_sandbox_breaks_the_signature() -> None:
    key = Ed25519PrivateKey.generate()
    [signature] = signedjob.sign_batch(key, "p", "b1", [signedjob.signed_text_of(JOB)])
    data = {**JOB, signedjob.SIGNATURE_ATTR: signature}
    assert _check(key, data) is None
    for changed in ({INPUT_MANIFEST_ATTR: "b" * 64}, {INPUT_MANIFEST_ATTR: None}):
        tampered = {**data, **changed}
        if changed[INPUT_MANIFEST_ATTR] is None:
            del tampered[INPUT_MANIFEST_ATTR]
        why = _check(key, tampered)
        assert why is not None and "changed after the broker signed them" in why
