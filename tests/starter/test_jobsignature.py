"""The starter's check: which jobs may run as their Owner, and the hold of the others."""

from __future__ import annotations

from pathlib import Path

from fetchwork.broker.trust.signer import Signer, ensure_key_pair
from fetchwork.config.ads import format_ad, parse_ad
from fetchwork.config.loader import Config
from fetchwork.config.protocol import HoldCode
from fetchwork.starter import jobsignature

JOB = {"GlobalJobId": "p#1.0#1", "ClusterId": 1, "ProcId": 0, "Owner": "alice",
       "Cmd": "/bin/true", "Iwd": "/tmp"}


def config(**knobs: str) -> Config:
    return Config.load(environ={f"_FETCHWORK_{k}": v for k, v in knobs.items()})


def keys(tmp_path: Path) -> tuple[Signer, str]:
    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    return Signer((tmp_path / "k.pem").read_bytes(), "k.pem"), str(tmp_path / "p.pem")


def test_no_public_key_runs_nothing_as_its_owner():
    verdict = jobsignature.verdict(config(), parse_ad(format_ad(JOB)))
    assert verdict == jobsignature.Verdict(owner_trusted=False)


def test_a_signed_job_runs_as_its_owner(tmp_path):
    signer, public = keys(tmp_path)
    ad = parse_ad(format_ad({**JOB, "FetchworkSignature": signer.signature(JOB)}))
    assert jobsignature.verdict(config(JOB_SIGNING_PUBLIC_KEY=public), ad).owner_trusted


def test_a_tampered_job_is_held_naming_the_check_and_the_slot(tmp_path):
    signer, public = keys(tmp_path)
    ad = parse_ad(format_ad({**JOB, "FetchworkSignature": signer.signature(JOB),
                             "Cmd": "/bin/evil"}))
    verdict = jobsignature.verdict(config(JOB_SIGNING_PUBLIC_KEY=public), ad)
    assert not verdict.owner_trusted and verdict.refusal is not None
    held = jobsignature.hold_attributes(parse_ad('Name = "slot2@exec7"'), 2, verdict.refusal)
    assert held["HoldReason"].startswith("Error from slot2@exec7: job signature check failed")
    assert held["HoldReasonCode"] == int(HoldCode.SIGNATURE_INVALID)


def test_an_unreadable_key_holds_every_job(tmp_path):
    (tmp_path / "bad.pem").write_text("not a key")
    for path in (str(tmp_path / "bad.pem"), str(tmp_path / "missing.pem")):
        verdict = jobsignature.verdict(config(JOB_SIGNING_PUBLIC_KEY=path),
                                       parse_ad(format_ad(JOB)))
        assert verdict.refusal is not None and "JOB_SIGNING_PUBLIC_KEY" in verdict.refusal
