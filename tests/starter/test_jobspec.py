"""From job ads to launch plans and exit attributes, without processes."""

from __future__ import annotations

import os
import signal

import classad2
import pytest

from fetchwork.config.protocol import JOB_AD_FILE, MACHINE_AD_FILE
from fetchwork.errors import StarterError
from fetchwork.starter.events import LineReader
from fetchwork.starter.jobspec import (
    exit_attributes,
    job_directory,
    launch_plan,
    parse_signal,
    remove_sandbox,
)

MARK = ("_CONDOR_ANCESTOR_1", "x")


def test_plan_resolves_paths_against_iwd():
    ad = classad2.ClassAd({"Cmd": "run.sh", "Arguments": "a 'b c'", "Iwd": "sub",
                           "In": "in", "Out": "/abs/out", "Environment": "K=v",
                           "KillSig": "SIGINT"})
    plan = launch_plan(ad, "/sand", 2, MARK)
    assert plan.argv == ("/sand/sub/run.sh", "a", "b c")
    assert plan.cwd == "/sand/sub"
    assert plan.stdin_path == "/sand/sub/in" and plan.stdout_path == "/abs/out"
    assert plan.stderr_path == os.devnull
    assert plan.kill_sig == signal.SIGINT
    assert plan.env["K"] == "v" and plan.env["_CONDOR_SLOT"] == "slot2"
    assert plan.env["TMPDIR"] == "/sand" and plan.env["_CONDOR_ANCESTOR_1"] == "x"
    assert plan.env["_CONDOR_JOB_AD"] == "/sand/.job.ad"


def test_plan_defaults():
    plan = launch_plan({"Cmd": "/bin/true"}, "/sand", 1, MARK)
    assert plan.cwd == "/sand" and plan.kill_sig == signal.SIGTERM
    assert plan.stdin_path == os.devnull and plan.argv == ("/bin/true",)
    assert job_directory({"Iwd": "/elsewhere"}, "/sand") == "/elsewhere"


@pytest.mark.parametrize("ad", [{}, {"Cmd": ""}, {"Cmd": 5}, {"Cmd": "/x", "Arguments": "'a"},
                                {"Cmd": "/x", "KillSig": "SIGNOPE"}])
def test_bad_ads(ad):
    with pytest.raises(StarterError):
        launch_plan(ad, "/sand", 1, MARK)


@pytest.mark.parametrize(("value", "number"), [
    (None, signal.SIGTERM), ("SIGUSR1", signal.SIGUSR1), ("usr2", signal.SIGUSR2),
    (9, 9), ("3", 3), (15.0, 15)])
def test_parse_signal(value, number):
    assert parse_signal(value) == number


@pytest.mark.parametrize("value", ["0", -1, 999, True, "KILLME"])
def test_parse_signal_rejects(value):
    with pytest.raises(StarterError):
        parse_signal(value)


def test_exit_attributes():
    assert exit_attributes(3, "exit", 1.23456) == {
        "JobDuration": 1.235, "ExitBySignal": False, "ExitCode": 3,
        "ExitReason": "exited normally with status 3"}
    killed = exit_attributes(-9, "evict", 2)
    assert killed["ExitBySignal"] is True and killed["ExitSignal"] == 9
    assert "ExitCode" not in killed
    assert killed["ExitReason"] == "evicted; died on signal 9 (SIGKILL)"
    never = exit_attributes(None, "evict", 0, "the prepare hook failed")
    assert never["ExitReason"] == "the prepare hook failed" and never["ExitBySignal"] is False


def test_line_reader_splits_words_and_sees_eof():
    read_fd, write_fd = os.pipe()
    try:
        reader = LineReader(read_fd)
        os.write(write_fd, b"Suspend\ncontin")
        assert reader.read() == ["suspend"]
        os.write(write_fd, b"ue\n\n")
        assert reader.read() == ["continue"]
        os.close(write_fd)
        write_fd = -1
        assert reader.read() == [] and reader.eof
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def test_a_hook_environment_made_at_first_read_is_hook_env():
    from fetchwork.starter.jobspec import HookEnv, hook_env

    base = {"PATH": "/usr/bin", "_CONDOR_SLOT": "old"}
    lazy = HookEnv(base, "/sandbox", 3, "/sandbox/work")
    assert dict(lazy) == hook_env(base, "/sandbox", 3, "/sandbox/work")
    assert lazy["_CONDOR_SLOT"] == "slot3" and len(lazy) == len(dict(lazy))
    assert "PATH" in lazy and "MISSING" not in lazy


@pytest.mark.parametrize(("value", "asks"), [
    (None, False), ("NO", False), ("no", False), ("", False), ("YES", True),
    (" yes ", True), ("IF_NEEDED", True), ("MAYBE", False)])
def test_only_yes_or_if_needed_sets_up_the_transfer_step(value, asks):
    from fetchwork.starter.starter import asks_transfer
    from fetchwork.starter.transferstep import applies

    ad = classad2.ClassAd({"Cmd": "/bin/true"})
    if value is not None:
        ad["ShouldTransferFiles"] = value
    assert asks_transfer(ad) is asks
    if not asks:  # the step would not have applied on any machine
        assert not applies(ad, "here.example") and not applies(ad, "")


def _sandbox(tmp_path):
    sandbox = tmp_path / "dir_1_1_1"
    sandbox.mkdir()
    for name in (JOB_AD_FILE, MACHINE_AD_FILE):
        (sandbox / name).write_text("A = 1\n")
    return sandbox


@pytest.mark.parametrize("left", ["nothing", "files and folders", "a folder as an ad",
                                  "links as the ads", "an ad gone"])
def test_a_sandbox_is_removed_whatever_its_job_left_and_no_link_is_followed(tmp_path, left):
    sandbox = _sandbox(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine\n")
    if left == "files and folders":
        (sandbox / "out.txt").write_text("x")
        (sandbox / "sub" / "deeper").mkdir(parents=True)
        (sandbox / "sub" / "deeper" / "f").write_text("y")
        (sandbox / "to-outside").symlink_to(outside)
    elif left == "a folder as an ad":
        (sandbox / JOB_AD_FILE).unlink()
        (sandbox / JOB_AD_FILE).mkdir()
        (sandbox / JOB_AD_FILE / "f").write_text("z")
    elif left == "links as the ads":
        for name in (JOB_AD_FILE, MACHINE_AD_FILE):
            (sandbox / name).unlink()
        (sandbox / JOB_AD_FILE).symlink_to(outside / "keep")
        (sandbox / MACHINE_AD_FILE).symlink_to(outside)
    elif left == "an ad gone":
        (sandbox / MACHINE_AD_FILE).unlink()
    remove_sandbox(str(sandbox))
    assert not os.path.lexists(sandbox)
    assert (outside / "keep").read_text() == "mine\n"
    remove_sandbox(str(sandbox))  # gone already: nothing happens
