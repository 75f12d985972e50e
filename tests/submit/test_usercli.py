"""The user commands against a real Redis: submit, q, history, rm, hold, release, status.

The execute side in these tests is a thread that claims jobs through the
broker API, runs each job's command as a real process and reports its exit.
The tables and helpers are checked as pure functions in test_submit_tables.py.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from fetchwork.broker.client import Broker
from fetchwork.cli import COMMANDS, FetchworkGroup
from fetchwork.config.argsyntax import job_args
from fetchwork.config.loader import environ_without_config
from fetchwork.submit import submitcli, tables, usercli
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

SLOT = {"Name": "slot1@test", "Cpus": 1, "Memory": 1024, "START": True}


@click.group(cls=FetchworkGroup)
def cli() -> None:
    """The user commands alone."""


_USER_MODULES = {module.__name__: module for module in (submitcli, usercli)}
for _module, _attr in COMMANDS.values():
    if _module in _USER_MODULES:
        cli.add_command(getattr(_USER_MODULES[_module], _attr))


@pytest.fixture
def run(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    return invoke


def submitted_cluster(result: Result) -> int:
    assert result.exit_code == 0, result.output
    words = result.stdout.split()
    assert words[1:4] == ["job(s)", "submitted", "to"], result.stdout
    return int(words[-1].rstrip("."))


def q_json(run, *extra: str) -> list[dict]:
    result = run("q", "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


class ExecuteSide:
    """Claims jobs of the pool and runs them as real processes until stopped."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            ad = self.broker.claim(SLOT, wait_s=0.2)
            if ad is None:
                continue
            job = f"{ad['ClusterId']}.{ad['ProcId']}"
            started = time.time()
            code = subprocess.run([ad["Cmd"], *job_args(ad)], cwd=ad["Iwd"], check=False).returncode
            attrs = {"ExitCode": code, "ExitBySignal": False, "JobStartDate": int(started),
                     "RemoteWallClockTime": time.time() - started}
            self.broker.finish(job, ad["FetchworkClaim"], "exit", attrs)

    def __enter__(self) -> ExecuteSide:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


# -- submit ---------------------------------------------------------------------------

def test_submit_file_queues_every_job(run, tmp_path: Path) -> None:
    (tmp_path / "job.sub").write_text("executable = /bin/echo\narguments = $(Process)\n"
                                      "output = out.$(Process)\n+Project = \"demo\"\nqueue 3\n")
    cluster = submitted_cluster(run("submit", "job.sub"))
    ads = q_json(run)
    assert [(ad["ClusterId"], ad["ProcId"]) for ad in ads] == [(cluster, p) for p in range(3)]
    assert {ad["Owner"] for ad in ads} == {getpass.getuser()}
    assert {ad["JobStatus"] for ad in ads} == {1}
    assert [ad["Out"] for ad in ads] == ["out.0", "out.1", "out.2"]
    assert {ad["Iwd"] for ad in ads} == {str(tmp_path)}
    assert {ad["Project"] for ad in ads} == {"demo"}


def test_malformed_file_queues_nothing_and_names_the_line(run, tmp_path: Path) -> None:
    (tmp_path / "bad.sub").write_text("executable = /bin/true\nqueue 2\n"
                                      "requirements = ((\nqueue\n")
    result = run("submit", "bad.sub")
    assert result.exit_code == 1
    assert "bad.sub:3:" in result.stderr
    assert q_json(run) == []


def test_submit_warns_about_ignored_commands(run, tmp_path: Path) -> None:
    (tmp_path / "w.sub").write_text("executable = /bin/true\nnotification = never\nqueue\n")
    result = run("submit", "w.sub")
    assert result.exit_code == 0
    assert ("warning: w.sub: these commands are not supported by fetchwork and were ignored: "
            "notification (line 2)") in result.stderr


def test_submit_file_from_stdin(run) -> None:
    cluster = submitted_cluster(run("submit", "-", input="executable = /bin/true\nqueue 2\n"))
    assert len(q_json(run, str(cluster))) == 2


def test_submit_command_line(run, tmp_path: Path) -> None:
    result = run("submit", "-n", "2", "--priority", "4", "--output", "o.$(Process)",
                 "--", "echo", "hello world", "--flag")
    cluster = submitted_cluster(result)
    ads = q_json(run)
    assert [ad["ClusterId"] for ad in ads] == [cluster, cluster]
    assert ads[0]["Arguments"] == "'hello world' --flag"
    assert ads[1]["Out"] == "o.1" and ads[1]["JobPrio"] == 4


def test_submit_file_with_options_and_append(run, tmp_path: Path) -> None:
    (tmp_path / "o.sub").write_text("executable = /bin/true\npriority = 1\nqueue 2\n")
    cluster = submitted_cluster(run("submit", "--priority", "6", "-a", "+Tag = \"x\"",
                                    "o.sub"))
    ads = q_json(run, str(cluster))
    assert [(ad["JobPrio"], ad["Tag"]) for ad in ads] == [(6, "x"), (6, "x")]
    assert run("submit", "-n", "3", "o.sub").exit_code == 2
    assert run("submit", "-a", "no equals sign", "o.sub").exit_code == 1


def test_submit_needs_file_or_command(run) -> None:
    assert run("submit").exit_code == 2
    assert run("submit", "x.sub", "--", "echo").exit_code == 2


def test_submit_missing_file(run) -> None:
    result = run("submit", "nope.sub")
    assert result.exit_code != 0


def test_submit_hold_true_keeps_job_held(run, tmp_path: Path) -> None:
    (tmp_path / "h.sub").write_text("executable = /bin/true\nhold = true\nqueue\n")
    cluster = submitted_cluster(run("submit", "h.sub"))
    (ad,) = q_json(run, str(cluster))
    assert ad["JobStatus"] == 5


def test_the_fetchwork_program_runs_the_commands(env: dict[str, str], tmp_path: Path) -> None:
    full_env = {**environ_without_config(), **env}

    def fetchwork(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fetchwork", *args], env=full_env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              check=False)

    submitted = fetchwork("submit", "--", "echo", "hi")
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout == "1 job(s) submitted to cluster 1.\n"
    (ad,) = json.loads(fetchwork("q", "--json").stdout)
    assert ad["Arguments"] == "hi" and ad["Iwd"] == str(tmp_path)


# -- q, rm, hold, release -----------------------------------------------------------

def test_q_table_and_constraint(run) -> None:
    first = submitted_cluster(run("submit", "--priority", "7", "--", "sleep", "1"))
    submitted_cluster(run("submit", "--", "true"))
    table = run("q", "-nobatch")
    assert table.exit_code == 0
    for column in tables.QUEUE_COLUMNS:
        assert column in table.stdout
    assert f"{first}.0" in table.stdout and "sleep 1" in table.stdout
    assert "Total for query: 2 jobs" in table.stdout
    chosen = q_json(run, "-constraint", "JobPrio > 5")
    assert [ad["ClusterId"] for ad in chosen] == [first]
    assert q_json(run, "--constraint", "JobPrio > 100") == []


def test_bad_constraint_and_bad_id_are_clear_errors(run) -> None:
    result = run("q", "-constraint", "((")
    assert result.exit_code == 1 and result.stderr.startswith("fetchwork: ")
    result = run("rm", "12.x")
    assert result.exit_code == 1 and "not a job id" in result.stderr


def test_unreachable_broker_is_a_clear_error(env: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["q"], env={**env, "FETCHWORK_BROKER": "redis://127.0.0.1:1"})
    assert result.exit_code == 1
    assert "cannot reach the broker" in result.stderr


def test_q_long_form(run) -> None:
    cluster = submitted_cluster(run("submit", "--", "true"))
    result = run("q", "-l", str(cluster))
    assert f"ClusterId = {cluster}" in result.stdout


def test_hold_release_remove_by_id_and_cluster(run, broker: Broker) -> None:
    cluster = submitted_cluster(run("submit", "-n", "3", "--", "true"))
    held = run("hold", f"{cluster}.1", "-reason", "checking")
    assert held.exit_code == 0 and f"Job {cluster}.1 held." in held.stdout
    ad = broker.get(f"{cluster}.1")
    assert ad is not None and ad["JobStatus"] == 5 and ad["HoldReason"] == "checking"
    released = run("release", str(cluster))
    assert f"Job {cluster}.1 released." in released.stdout
    assert {a["JobStatus"] for a in q_json(run, str(cluster))} == {1}
    removed = run("rm", str(cluster), "--reason", "done here")
    assert removed.stdout.count("marked for removal") == 3
    assert q_json(run, str(cluster)) == []
    history = json.loads(run("history", "--json", str(cluster)).stdout)
    assert {a["JobStatus"] for a in history} == {3}


def test_rm_all_and_constraint(run) -> None:
    a = submitted_cluster(run("submit", "--priority", "1", "--", "true"))
    b = submitted_cluster(run("submit", "-n", "2", "--", "true"))
    assert run("rm", "-constraint", "JobPrio == 1").exit_code == 0
    assert {ad["ClusterId"] for ad in q_json(run)} == {b}
    assert run("rm", "-all").exit_code == 0
    assert q_json(run) == []
    assert a != b


def test_rm_needs_a_selection_and_reports_no_match(run) -> None:
    assert run("rm").exit_code == 2
    result = run("rm", "999999")
    assert result.exit_code == 1 and "no matching jobs" in result.stderr


# -- running jobs: history and --wait -------------------------------------------------

def test_wait_succeeds_and_history_shows_jobs(run, broker: Broker, tmp_path: Path) -> None:
    (tmp_path / "ok.sub").write_text("executable = /bin/sh\n"
                                     "arguments = \"-c 'echo $(Process) > out.$(Process)'\"\n"
                                     "queue 3\n")
    with ExecuteSide(broker):
        result = run("submit", "--wait", "--wait-timeout", "40", "ok.sub")
    cluster = submitted_cluster(result)
    assert "all 3 job(s) completed" in result.stderr
    assert [(tmp_path / f"out.{p}").read_text() for p in range(3)] == ["0\n", "1\n", "2\n"]
    assert q_json(run, str(cluster)) == []
    history = json.loads(run("history", "--json", str(cluster)).stdout)
    assert sorted(ad["ProcId"] for ad in history) == [0, 1, 2]
    assert {(ad["JobStatus"], ad["ExitCode"]) for ad in history} == {(4, 0)}
    table = run("history", str(cluster))
    for column in tables.HISTORY_COLUMNS:
        assert column in table.stdout
    assert len(json.loads(run("history", "--json", "-limit", "2").stdout)) == 2


def test_q_watch_until_the_queue_drains(run, broker: Broker) -> None:
    cluster = submitted_cluster(run("submit", "-n", "2", "--", "true"))
    with ExecuteSide(broker):
        result = run("q", "--watch", str(cluster))
    assert result.exit_code == 0, result.output
    assert "Total for query: 0 jobs" in result.stdout


def test_wait_fails_when_a_job_exits_non_zero(run, broker: Broker) -> None:
    with ExecuteSide(broker):
        result = run("submit", "--wait", "--wait-timeout", "40", "--",
                     "sh", "-c", "exit $0", "0")
        assert result.exit_code == 0, result.output
        failing = run("submit", "--wait", "--wait-timeout", "40", "--", "sh", "-c", "exit 3")
    assert failing.exit_code == 1
    assert "exit 3" in failing.stderr


def test_wait_reports_a_removed_job(run, broker: Broker) -> None:
    def remove_when_queued() -> None:
        queued = wait_until(lambda: broker.query(), timeout_s=20, what="the job queued")
        broker.remove([tables.job_id(queued[0])], reason="changed my mind")

    remover = threading.Thread(target=remove_when_queued, daemon=True)
    remover.start()
    result = run("submit", "--wait", "--wait-timeout", "30", "--", "true")
    remover.join(timeout=10)
    assert result.exit_code == 1 and "(removed)" in result.stderr


def test_wait_on_held_job_fails_at_once(run) -> None:
    result = run("submit", "--hold", "--wait", "--wait-timeout", "20", "--", "true")
    assert result.exit_code == 1 and "held" in result.stderr


def test_wait_timeout(run) -> None:
    result = run("submit", "--wait", "--wait-timeout", "0.5", "--", "true")
    assert result.exit_code == 2 and "gave up waiting" in result.stderr


# -- status ---------------------------------------------------------------------------

def test_status_lists_published_slots(run, broker: Broker) -> None:
    shown = run("status").stdout
    assert "Total: 0 slots" in shown
    assert "This pool is unauthenticated" in " ".join(shown.split())
    broker.publish_slot({"Name": "slot2@h", "State": "Claimed", "Activity": "Busy",
                         "LoadAvg": 1.0, "Memory": 512, "JobId": "3.1"}, ttl_s=30)
    broker.publish_slot({"Name": "slot1@h", "State": "Unclaimed", "Activity": "Idle",
                         "LoadAvg": 0.0, "Memory": 512}, ttl_s=30)
    result = run("status")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == list(tables.SLOT_COLUMNS)
    assert [line.split()[0] for line in lines[2:4]] == ["slot1@h", "slot2@h"]
    assert lines[3].split() == ["slot2@h", "Claimed", "Busy", "1.00", "512", "3.1"]
    slots = json.loads(run("status", "--json").stdout)
    assert [s["Name"] for s in slots] == ["slot1@h", "slot2@h"]
