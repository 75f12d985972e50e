"""The startd's first words about signed jobs, told without loading the crypto library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fetchwork.broker.trust.signer import ensure_key_pair
from fetchwork.config.loader import Config
from fetchwork.startd.signingnotice import startup_notice


def config(**knobs: str) -> Config:
    return Config.load(environ={f"_FETCHWORK_{k}": v for k, v in knobs.items()})


def test_no_key_warns_that_jobs_run_as_the_slot_user():
    warn, notice = startup_notice(config())
    assert warn and "never as their Owner" in notice and "JOB_SIGNING_PUBLIC_KEY" in notice


def test_the_pool_key_is_named_and_not_a_warning(tmp_path: Path):
    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    warn, notice = startup_notice(config(JOB_SIGNING_PUBLIC_KEY=str(tmp_path / "p.pem")))
    assert not warn and str(tmp_path / "p.pem") in notice


def test_a_key_that_cannot_serve_warns_that_every_job_is_held(tmp_path: Path):
    (tmp_path / "bad.pem").write_text("not a key")
    (tmp_path / "body.pem").write_text(
        "-----BEGIN PUBLIC KEY-----\n@@@\n-----END PUBLIC KEY-----\n")
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    (tmp_path / "ec.pem").write_bytes(other.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for name in ("bad.pem", "body.pem", "ec.pem", "missing.pem"):
        path = str(tmp_path / name)
        warn, notice = startup_notice(config(JOB_SIGNING_PUBLIC_KEY=path))
        assert warn and "held" in notice and path in notice, notice


def test_the_startd_and_its_reference_hooks_load_neither_crypto_nor_the_metrics_client():
    # What it does not import is memory the long-lived daemon does not carry. (redis
    # imports the top of the cryptography package to see whether it is there.)
    code = ("import sys, fetchwork.startd.cli, fetchwork.startd.daemon\n"
            "import fetchwork.hooks.reference\n"
            "print(sorted(set(sys.modules) & {'cryptography.hazmat.bindings._rust', "
            "'fetchwork.config.signedjob', 'prometheus_client'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
