"""The rq bridge's knobs and the job ad a dequeued rq job becomes (pure)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fetchwork.config.argsyntax import parse_arguments_raw, parse_environment_raw
from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError
from fetchwork.hooks.rqbridge import settings
from fetchwork.hooks.rqbridge.settings import DequeuedJob, RqSettings


def _config(text: str) -> Config:
    base = ("RQ_URL = redis://localhost:6379/0\nRQ_QUEUES = default\nRQ_FETCH_LONG_POLL = 5\n"
            "RQ_WITH_SCHEDULER = false\n")
    return Config.from_text(base + text, source="rq.conf")


def test_queues_keep_their_priority_order() -> None:
    assert settings.queue_names("high, default low") == ("high", "default", "low")


@pytest.mark.parametrize("text, why", [("", "names no queue"), ("a b a", "twice"),
                                       ("good bad/name", "'bad/name' is not a queue name")])
def test_bad_queue_lists_are_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        settings.queue_names(text)


def test_a_bad_knob_is_named_with_its_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"rq.conf:5: RQ_QUEUES names a queue twice"):
        settings.read_settings(_config("RQ_QUEUES = a a\n"))
    with pytest.raises(ConfigError, match="RQ_URL is empty"):
        settings.read_settings(_config("RQ_URL =\n"))
    with pytest.raises(ConfigError, match="RQ_PYTHON must be an absolute path"):
        settings.read_settings(_config("RQ_PYTHON = python3\n"))


def test_the_knobs_are_read() -> None:
    knobs = settings.read_settings(_config(
        "RQ_QUEUES = high,low\nRQ_PYTHONPATH = /srv/a:/srv/b\nRQ_PYTHON = /opt/py/bin/python\n"
        "RQ_FETCH_LONG_POLL = 2.5\n"))
    assert knobs == RqSettings(url="redis://localhost:6379/0", queues=("high", "low"),
                               pythonpath=("/srv/a", "/srv/b"), long_poll_s=3,
                               python="/opt/py/bin/python", with_scheduler=False)


def test_only_an_idle_slot_waits_on_the_queues() -> None:
    knobs = RqSettings(url="u", queues=("q",), pythonpath=(), long_poll_s=5)
    assert settings.block_s(knobs, slot_busy=False) == 5
    assert settings.block_s(knobs, slot_busy=True) is None
    assert settings.block_s(RqSettings("u", ("q",), (), 0), slot_busy=False) is None


def test_the_job_gets_the_startds_environment_and_import_path() -> None:
    env = settings.job_environment(
        {"PATH": "/bin", "PYTHONPATH": "/startd/lib", "TMPDIR": "/tmp/x", "_CONDOR_SLOT": "1",
         "DATABASE_URL": "postgres://db"},
        ("/extra",), {"RQ_JOB_ID": "j1"})
    assert env == {"PATH": "/bin", "PYTHONPATH": "/extra:/startd/lib",
                   "DATABASE_URL": "postgres://db", "RQ_JOB_ID": "j1"}


def test_the_environment_survives_htcondors_syntax() -> None:
    env = {"A": "plain", "B": "it's spaced", "C": "", "D": "a\nb", "bad-name": "x"}
    parsed = parse_environment_raw(settings.format_environment(env))
    assert parsed == {"A": "plain", "B": "it's spaced", "C": "", "D": "a\nb"}


def test_rqs_timeout_becomes_the_walltime() -> None:
    assert settings.walltime_s(None) == settings.RQ_DEFAULT_TIMEOUT_S
    assert settings.walltime_s(0) == settings.RQ_DEFAULT_TIMEOUT_S
    assert settings.walltime_s(-1) is None
    assert settings.walltime_s(2.5) == 3


def test_the_job_ad_runs_the_horse_in_the_startds_folder() -> None:
    job = DequeuedJob(job_id="j1", queue="high", worker="slot1@h.7", execution_id="e1",
                      description="app.tasks.add(1, 2)", timeout_s=30)
    ad = settings.job_ad(job, "/opt/py/bin/python", "/srv/app", {"PYTHONPATH": "/srv/app"})
    assert ad["Cmd"] == "/opt/py/bin/python"
    assert parse_arguments_raw(ad["Arguments"]) == [
        "-m", "fetchwork.hooks.rqbridge.horse", "slot1@h.7", "j1", "e1", "high"]
    assert ad["Iwd"] == "/srv/app"
    assert parse_environment_raw(ad["Environment"]) == {"PYTHONPATH": "/srv/app"}
    assert (ad["RqJobId"], ad["RqQueue"], ad["RqWorker"], ad["RqExecutionId"],
            ad["RqDescription"]) == ("j1", "high", "slot1@h.7", "e1", "app.tasks.add(1, 2)")
    assert ad["AllowedJobDuration"] == 30
    no_limit = settings.job_ad(DequeuedJob("j", "q", "w", "e", None, -1), "/p", "/", {})
    assert "AllowedJobDuration" not in no_limit and "RqDescription" not in no_limit
    long = settings.job_ad(DequeuedJob("j", "q", "w", "e", "f(" + "x" * 1000 + ")", 1), "/p",
                           "/", {})
    assert len(long["RqDescription"]) == settings.DESCRIPTION_CHARS


def test_worker_names_are_the_slots() -> None:
    assert settings.worker_name("slot1_2@host.example", 42) == "slot1_2@host.example.42"
    assert settings.worker_name("odd name:x", 1) == "odd_name_x.1"


def test_the_example_configuration_selects_the_bridge(
        config_with_defaults: Callable[[str], Config]) -> None:
    example = Path(__file__).resolve().parents[3] / "config" / "examples" / "rq.conf"
    config = config_with_defaults(example.read_text())
    knobs = settings.read_settings(config)
    assert knobs.queues == ("high", "default", "low")
    assert knobs.with_scheduler and knobs.long_poll_s == 5
    assert config.get("STARTD_JOB_HOOK_KEYWORD") == "RQ"
    for hook in ("FETCH_WORK", "REPLY_FETCH", "EVICT_CLAIM", "PREPARE_JOB", "UPDATE_JOB_INFO",
                 "JOB_EXIT"):
        assert config.get(f"RQ_HOOK_{hook}", "").startswith(
            "python:fetchwork.hooks.rqbridge.hooks:")
