"""The reference hooks against a real broker, in both forms: called in-process
and run as programs (`fetchwork hook NAME WORD`), with the same results."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest

from fetchwork.broker.client import Broker
from fetchwork.config import ads
from fetchwork.config.loader import reload_config
from fetchwork.errors import FetchworkError
from fetchwork.hooks import control, reference
from tests.support.hookenv import hook_environment
from tests.support.waiting import wait_until

SLOT_AD = """\
Name = "slot1@hooktest"
Machine = "hooktest"
SlotID = 1
State = "Unclaimed"
Activity = "Idle"
Cpus = 1
Memory = 2048
Start = true
"""

FORMS = ["in-process", "program"]


@pytest.fixture
def hook_env(redis_url, pool_name, monkeypatch, tmp_path):
    with hook_environment(monkeypatch, {
            "FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
            "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path),
            "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "0.2"}) as env:
        yield env


@pytest.fixture
def broker(hook_env, redis_client, pool_name):
    return Broker(redis_client, pool=pool_name)


def call(form: str, env: dict[str, str], name: str, stdin: str,
         *args: str) -> tuple[int, str]:
    if form == "in-process":
        try:
            result = reference.HOOKS[name](list(args), stdin)
        except FetchworkError:
            return 1, ""
        if isinstance(result, tuple):
            return result
        return 0, result or ""
    done = subprocess.run([sys.executable, "-m", "fetchwork", "hook", name, *args],
                          input=stdin, env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout


def submit(broker: Broker, count: int = 1, **attrs: object) -> list[str]:
    ad = {"Cmd": "/bin/true", "Iwd": "/tmp", **attrs}
    return broker.submit([ad] * count, owner="tester")


def fetch(form, env) -> ads.classad2.ClassAd | None:
    code, out = call(form, env, "FETCH_WORK", SLOT_AD)
    assert code == 0
    return ads.parse_ad(out) if out.strip() else None


def job_id(ad) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


@pytest.mark.parametrize("form", FORMS)
def test_an_empty_queue_fetches_nothing(form, hook_env, broker):
    assert fetch(form, hook_env) is None


@pytest.mark.parametrize("form", FORMS)
def test_fetch_claims_the_job_for_the_slot(form, hook_env, broker):
    [submitted] = submit(broker)
    job = fetch(form, hook_env)
    assert job is not None and job_id(job) == submitted
    stored = broker.get(submitted)
    assert stored["JobStatus"] == 2
    assert stored["RemoteHost"] == "slot1@hooktest"
    assert isinstance(job["FetchworkClaim"], str)
    assert [slot["Name"] for slot in broker.slots()] == ["slot1@hooktest"]


@pytest.mark.parametrize("form", FORMS)
def test_a_rejected_job_goes_back_to_the_head_of_its_group(form, hook_env, broker):
    first, second = submit(broker, 2)
    job = fetch(form, hook_env)
    assert job_id(job) == first
    code, _ = call(form, hook_env, "REPLY_FETCH", ads.join_pair(job, ads.parse_ad(SLOT_AD)),
                   "reject")
    assert code == 0
    assert broker.get(first)["JobStatus"] == 1
    assert job_id(fetch(form, hook_env)) == first


@pytest.mark.parametrize("form", FORMS)
def test_a_job_runs_its_course_through_prepare_update_and_exit(form, hook_env, broker):
    [submitted] = submit(broker)
    job = fetch(form, hook_env)
    pair = ads.join_pair(job, ads.parse_ad(SLOT_AD))
    assert call(form, hook_env, "PREPARE_JOB", pair)[0] == 0
    job["RemoteUserCpu"] = 1.5
    job["ImageSize"] = 4321
    job["JobState"] = "Running"
    assert call(form, hook_env, "UPDATE_JOB_INFO", ads.format_ad(job))[0] == 0
    stored = broker.get(submitted)
    assert stored["RemoteUserCpu"] == 1.5 and stored["ImageSize"] == 4321
    job["ExitCode"] = 0
    job["ExitBySignal"] = False
    assert call(form, hook_env, "JOB_EXIT", ads.format_ad(job), "exit")[0] == 0
    [done] = broker.history(f"ClusterId == {job['ClusterId']}")
    assert done["JobStatus"] == 4 and done["ExitCode"] == 0
    assert broker.query() == []


@pytest.mark.parametrize("form", FORMS)
def test_an_evicted_job_is_idle_again(form, hook_env, broker):
    [submitted] = submit(broker)
    job = fetch(form, hook_env)
    assert call(form, hook_env, "JOB_EXIT", ads.format_ad(job), "evict")[0] == 0
    assert broker.get(submitted)["JobStatus"] == 1


@pytest.mark.parametrize("form", FORMS)
def test_a_job_removed_while_running_is_settled_by_its_exit_hook(form, hook_env, broker):
    [submitted] = submit(broker)
    job = fetch(form, hook_env)
    broker.remove([submitted])
    assert broker.renew(submitted, job["FetchworkClaim"]) == "removed"
    assert call(form, hook_env, "UPDATE_JOB_INFO", ads.format_ad(job))[0] == 0
    assert call(form, hook_env, "JOB_EXIT", ads.format_ad(job), "remove")[0] == 0
    [done] = broker.history(f"ClusterId == {job['ClusterId']}")
    assert done["JobStatus"] == 3


def test_a_prepare_program_refuses_a_job_whose_claim_is_gone(hook_env, broker):
    submit(broker)
    job = fetch("program", hook_env)
    assert call("program", hook_env, "JOB_EXIT", ads.format_ad(job), "evict")[0] == 0
    code, _ = call("program", hook_env, "PREPARE_JOB",
                   ads.join_pair(job, ads.parse_ad(SLOT_AD)))
    assert code != 0


def test_in_process_prepare_keeps_the_lease_alive(hook_env, broker, redis_client):
    [submitted] = submit(broker, JobLeaseDuration=1)
    job = fetch("in-process", hook_env)
    before = broker.get(submitted)["FetchworkLeaseExpiry"]
    assert call("in-process", hook_env, "PREPARE_JOB",
                ads.join_pair(job, ads.parse_ad(SLOT_AD)))[0] == 0
    try:
        wait_until(lambda: broker.get(submitted)["FetchworkLeaseExpiry"] > before + 0.5,
                   timeout_s=30, what="the keeper to renew the lease")
        assert broker.reap_expired() == []
    finally:
        assert call("in-process", hook_env, "JOB_EXIT", ads.format_ad(job), "exit")[0] == 0
    assert broker.get(submitted)["JobStatus"] == 4


@pytest.mark.parametrize("form", FORMS)
def test_bad_words_are_refused(form, hook_env, broker):
    submit(broker)
    job = fetch(form, hook_env)
    pair = ads.join_pair(job, ads.parse_ad(SLOT_AD))
    assert call(form, hook_env, "REPLY_FETCH", pair, "maybe")[0] != 0
    assert call(form, hook_env, "JOB_EXIT", ads.format_ad(job), "vanished")[0] != 0


def test_the_program_form_needs_exactly_one_hook_name(hook_env):
    done = subprocess.run([sys.executable, "-m", "fetchwork", "hook", "accept"], input="",
                          env=hook_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "FETCH_WORK" in done.stderr


def test_a_fetch_against_a_broker_that_is_down_fails_slowly(hook_env, monkeypatch, tmp_path):
    monkeypatch.setenv("FETCHWORK_BROKER", f"unix://{tmp_path}/nobody-listens.sock")
    reload_config()
    reference.reset_broker()
    started = time.monotonic()
    with pytest.raises(FetchworkError, match="broker"):
        reference.fetch_work([], SLOT_AD)
    assert time.monotonic() - started >= 0.9


@pytest.mark.parametrize("given", ["text", "values", "values with an expression"])
def test_the_prepare_hook_takes_the_starters_values_as_it_reads_text(given, hook_env, broker):
    # The starter hands an in-process prepare hook the pair's text carrying the job
    # ad's values (AdText.carrying): the hook takes the id, claim and lease from them
    # rather than parse the job's text again; an expression among them, or plain
    # text, is parsed as ever. Either way the keeper keeps the job's 1 s lease.
    [submitted] = submit(broker, JobLeaseDuration=1)
    job = fetch("in-process", hook_env)
    if given == "values with an expression":
        job["JobLeaseDuration"] = ads.parse_expr("0 + 1")
    pair = ads.join_pair(job, ads.parse_ad(SLOT_AD))
    text = pair if given == "text" else ads.AdText.carrying(
        pair, {name: job[name] for name in job.keys()})
    assert text == pair
    before = broker.get(submitted)["FetchworkLeaseExpiry"]
    assert reference.prepare_job([], text) is None
    try:
        if isinstance(text, ads.AdText):
            assert text.take() is None  # the hook took them
        wait_until(lambda: broker.get(submitted)["FetchworkLeaseExpiry"] > before + 0.5,
                   timeout_s=30, what="the keeper to renew the 1 s lease")
    finally:
        assert reference.job_exit(["exit"], ads.format_ad(job)) is None
    assert broker.get(submitted)["JobStatus"] == 4


@pytest.mark.parametrize("given", ["text", "values", "values with an expression"])
def test_the_exit_hook_takes_the_starters_values_as_it_reads_text(given, hook_env, broker):
    # The starter hands an in-process exit hook an AdText: the hook takes its values
    # instead of parsing the text back, and the broker hears the same.
    [submitted] = submit(broker)
    job = fetch("in-process", hook_env)
    job["ExitCode"] = 3
    job["ExitBySignal"] = False
    job["RemoteUserCpu"] = 0.25
    job["ExitReason"] = "exited normally with status 3"
    if given == "values with an expression":
        job["ImageSize"] = 2048
        job["MemoryUsage"] = ads.parse_expr("(ImageSize + 1023) / 1024")
    text = ads.format_ad(job) if given == "text" else ads.AdText(job)
    assert reference.job_exit(["exit"], text) is None
    [done] = broker.history(f"ClusterId == {job['ClusterId']}")
    assert job_id(done) == submitted and done["JobStatus"] == 4
    assert (done["ExitCode"], done["RemoteUserCpu"], done["ExitReason"]) == \
        (3, 0.25, "exited normally with status 3")
    if isinstance(text, ads.AdText):
        assert text.take() is None  # the hook took them



def _pipe_words(fd: int) -> list[str]:
    try:
        return os.read(fd, 4096).decode().split()
    except BlockingIOError:
        return []


@pytest.mark.parametrize("next_job_runs", [False, True])
def test_a_lease_keeper_left_past_its_job_stops_no_later_job(next_job_runs, hook_env,
                                                             broker, caplog):
    # The job's exit hook has not settled it (it failed, say), so its keeper still
    # renews. The job is removed at the broker: while its own run lasts the keeper asks
    # the starter to remove it; once a kept starter runs its next job, the request is
    # refused and that job goes on.
    caplog.set_level(logging.INFO)
    [submitted] = submit(broker, JobLeaseDuration=1)
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    control.install(write_fd)
    job = fetch("in-process", hook_env)
    try:
        assert call("in-process", hook_env, "PREPARE_JOB",
                    ads.join_pair(job, ads.parse_ad(SLOT_AD)))[0] == 0
        if next_job_runs:
            control.install(write_fd)  # the next run, on a pipe that stands for its own
        broker.remove([submitted])
        if not next_job_runs:
            words: list[str] = []
            wait_until(lambda: words.extend(_pipe_words(read_fd)) or words, timeout_s=30,
                       what="the removal request")
            assert words == ["remove"]
        else:
            wait_until(lambda: f"job {submitted} is removed but cannot be stopped here"
                       in caplog.text, timeout_s=30, what="the keeper's refused request")
            assert _pipe_words(read_fd) == []
    finally:
        reference._stop_keeper(job_id(job))
        control.install(None)
        os.close(read_fd)
        os.close(write_fd)
