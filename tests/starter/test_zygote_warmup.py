"""The zygote reads the pool's public key before it forks, so its starters share it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fetchwork.broker.trust.signer import ensure_key_pair

pytestmark = pytest.mark.timeout(120)

PROBE = ("from fetchwork.starter import jobsignature, zygote\n"
         "zygote.preload()\n"
         "print(sorted(jobsignature._cache))\n")


def _preloaded_keys(tmp_path: Path, key_line: str) -> str:
    config = tmp_path / "zygote.conf"
    config.write_text(key_line)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("_FETCHWORK_") and key != "FETCHWORK_CONFIG"}
    env.update(FETCHWORK_CONFIG=str(config), FETCHWORK_STATE_DIR=str(tmp_path / "state"))
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_zygote_reads_the_configured_key_before_it_forks(tmp_path: Path) -> None:
    ensure_key_pair(tmp_path / "k.pem", tmp_path / "p.pem")
    assert _preloaded_keys(tmp_path, f"JOB_SIGNING_PUBLIC_KEY = {tmp_path / 'p.pem'}\n") \
        == repr([str(tmp_path / "p.pem")])


def test_a_key_that_cannot_be_read_is_left_to_each_job(tmp_path: Path) -> None:
    (tmp_path / "bad.pem").write_text("not a key")
    assert _preloaded_keys(tmp_path, f"JOB_SIGNING_PUBLIC_KEY = {tmp_path / 'bad.pem'}\n") \
        == "[]"
    assert _preloaded_keys(tmp_path, "JOB_SIGNING_PUBLIC_KEY =\n") == "[]"
