"""condor_q's everyday options against a real Redis: the batch view, -nobatch,
-totals, -run, -af, -format, -better-analyze, history -match, submit -dry-run,
single-dash options; reading only what is asked; narrow terminals; the
notices about a Redis started on demand and a pool with no startd."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner, Result

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.embedded import embedded_for
from fetchwork.cli import COMMANDS, FetchworkGroup, load_command
from fetchwork.config.loader import Config, environ_without_config
from fetchwork.submit import formats, tables

pytestmark = pytest.mark.timeout(120)

SLOT = {"Name": "slot1@test", "Cpus": 2, "Memory": 2048, "State": "Unclaimed",
        "Activity": "Idle"}


@click.group(cls=FetchworkGroup)
def cli() -> None:
    """The user commands alone."""


for _name in ("submit", "q", "history", "rm", "hold", "release", "status"):
    cli.add_command(load_command(_name), _name)
assert all(name in COMMANDS for name in cli.commands)


@pytest.fixture
def run(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)

    def invoke(*args: str, input: str | None = None, **extra: str) -> Result:
        return CliRunner().invoke(cli, list(args), env={**env, **extra}, input=input,
                                  catch_exceptions=False)
    return invoke


def cluster_of(result: Result) -> int:
    assert result.exit_code == 0, result.output
    return int(result.stdout.split()[-1].rstrip("."))


def hgetall_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))


# -- views -----------------------------------------------------------------------------

def test_q_shows_one_line_per_batch_by_default(run) -> None:
    first = cluster_of(run("submit", "-n", "3", "--", "sleep", "5"))
    second = cluster_of(run("submit", "--batch-name", "nightly", "--", "true"))
    run("hold", f"{first}.2")
    lines = run("q").stdout.splitlines()
    assert lines[0].split() == list(formats.BATCH_COLUMNS)
    assert lines[1].split()[1:3] == ["ID:", str(first)]
    assert lines[1].split()[-6:] == ["_", "_", "2", "1", "3", f"{first}.0-2"]
    assert lines[2].split()[1] == "nightly" and lines[2].endswith(f"{second}.0")
    assert lines[-1].startswith("Total for query: 4 jobs;")
    per_job = run("q", "-nobatch").stdout
    assert per_job.splitlines()[0].split()[:2] == ["ID", "OWNER"]
    assert f"{first}.1" in per_job
    assert run("q", "-totals").stdout.splitlines() == [lines[-1]]


def test_single_dash_words_are_condor_q_options(run) -> None:
    cluster = cluster_of(run("submit", "--", "true"))
    run("rm", "-all")
    watched = run("q", "-watch", str(cluster))
    assert watched.exit_code == 0, watched.output
    assert "No such option" not in watched.output
    for args in (("q", "-nobatch", "-json"), ("history", "-limit", "1", "-long"),
                 ("status", "-json")):
        assert run(*args).exit_code == 0


def test_autoformat_and_format(run) -> None:
    cluster = cluster_of(run("submit", "-n", "2", "--priority", "4", "--", "sleep", "9"))
    assert run("q", "-af", "ClusterId", "ProcId", "JobPrio + 1").stdout == \
        f"{cluster} 0 5\n{cluster} 1 5\n"
    shown = run("q", "-format", "%d.", "ClusterId", "-format", "%d\\n", "ProcId").stdout
    assert shown == f"{cluster}.0\n{cluster}.1\n"
    run("rm", str(cluster))
    assert run("history", "-af", "ProcId", "-match", "1").stdout == "1\n"
    assert len(run("history", "-match", "1").stdout.splitlines()) == 4  # heading, job, total


def test_run_view_lists_running_jobs_only(run, broker: Broker) -> None:
    cluster = cluster_of(run("submit", "-n", "2", "--", "sleep", "9"))
    claimed = broker.claim(SLOT)
    assert claimed is not None
    lines = run("q", "-run").stdout.splitlines()
    assert lines[0].split() == list(formats.RUN_COLUMNS)
    assert [line.split()[0] for line in lines[1:-2]] == [f"{cluster}.0"]
    assert lines[1].split()[-1] == "slot1@test"


def test_better_analyze_names_the_failing_clause(run, broker: Broker) -> None:
    broker.publish_slot(SLOT, ttl_s=60)
    broker.publish_slot({**SLOT, "Name": "slot2@test", "Memory": 16384}, ttl_s=60)
    cluster = cluster_of(run("submit", "--requirements",
                             "TARGET.Memory >= 8192 && TARGET.Cpus >= 2", "--", "true"))
    shown = run("q", "-better-analyze", f"{cluster}.0")
    assert shown.exit_code == 0, shown.output
    assert "[0]           1  TARGET.Memory >= 8192" in shown.stdout
    assert "[1]           2  TARGET.Cpus >= 2" in shown.stdout
    assert "Of 2 slots" in shown.stdout and "      1 are able to run your job" in shown.stdout


def test_submit_dry_run_prints_ads_and_queues_nothing(run, tmp_path: Path) -> None:
    (tmp_path / "d.sub").write_text("executable = /bin/echo\narguments = $(Process)\nqueue 2\n")
    shown = run("submit", "-dry-run", "d.sub")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.count('Cmd = "/bin/echo"') == 2
    assert "ProcId = 1" in shown.stdout
    assert shown.stdout.endswith("2 job(s) dry-run to cluster 1.\n")
    assert run("q", "-totals").stdout.startswith("Total for query: 0 jobs")


def test_submit_warns_about_a_typo_with_file_and_line(run, tmp_path: Path) -> None:
    (tmp_path / "t.sub").write_text("executable = /bin/true\nnotification = never\n"
                                    "outptu = out\nqueue\n")
    result = run("submit", "t.sub")
    assert result.exit_code == 0
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert warnings[0].endswith("t.sub: these commands are not supported by fetchwork and "
                                "were ignored: notification (line 2)")
    assert warnings[1].endswith("t.sub:3: the line 'outptu = out' was unused by fetchwork "
                                "submit. Is it a typo?")


# -- narrow terminals ---------------------------------------------------------------------

@pytest.mark.parametrize("columns", ["80", "60"])
def test_q_on_a_narrow_terminal_keeps_the_id(run, columns: str) -> None:
    cluster = cluster_of(run("submit", "--priority", "12", "--", "sleep", "1" * 120))
    lines = run("q", "-nobatch", COLUMNS=columns).stdout.splitlines()
    header = lines[0].split()
    assert header[:7] == list(tables.QUEUE_COLUMNS[:7])
    row = lines[1].split()
    assert row[0] == f"{cluster}.0" and row[5:8] == ["I", "12", "0.0"]
    assert all(len(line) <= int(columns) for line in lines[:-2])  # the total is not cut


# -- reading only what is asked ----------------------------------------------------------

def test_q_id_and_history_id_read_only_those_jobs(run, broker: Broker,
                                                  redis_client: redis.Redis) -> None:
    ad = {"Cmd": "/bin/true", "Iwd": "/tmp"}
    for _ in range(3):
        broker.submit([ad] * 1000, owner="someone")
    cluster = cluster_of(run("submit", "-n", "2", "--", "true"))
    redis_client.config_resetstat()
    assert run("q", "-json", f"{cluster}.1").exit_code == 0
    assert hgetall_calls(redis_client) <= 2
    run("rm", f"{cluster}.1")
    broker.remove(broker.queued_ids()[:1000])
    redis_client.config_resetstat()
    assert run("history", f"{cluster}.1", "-json").exit_code == 0
    assert hgetall_calls(redis_client) <= 2
    redis_client.config_resetstat()
    waited = run("submit", "--hold", "--wait", "--", "true")
    assert waited.exit_code == 1  # held: the wait ends at once and says so
    assert hgetall_calls(redis_client) <= 10


def test_q_of_20000_jobs_is_quick(run, broker: Broker) -> None:
    ad = {"Cmd": "/bin/sleep", "Arguments": "60", "Iwd": "/tmp"}
    for _ in range(4):
        broker.submit([ad] * 5000, owner="someone")
    for args in (("q",), ("q", "-nobatch"), ("q", "--json")):
        started = time.monotonic()
        result = run(*args)
        elapsed_s = time.monotonic() - started
        assert result.exit_code == 0
        assert "20000" in result.stdout.splitlines()[-1] or args[-1] == "--json"
        assert elapsed_s < 15, f"{args}: {elapsed_s:.1f} s"


# -- what the commands do to the pool -------------------------------------------------------

def test_a_command_that_starts_redis_says_so(tmp_path: Path, pool_name: str) -> None:
    env = {**environ_without_config(), "FETCHWORK_CONFIG": os.devnull,
           "FETCHWORK_POOL": pool_name, "FETCHWORK_STATE_DIR": str(tmp_path / "s")}
    try:
        first = CliRunner().invoke(cli, ["q"], env=env, catch_exceptions=False)
        assert first.exit_code == 0, first.output
        assert "no pool was running: started a Redis server" in first.stderr
        assert "fetchwork redis stop" in first.stderr
        again = CliRunner().invoke(cli, ["q"], env=env, catch_exceptions=False)
        assert again.stderr == ""
    finally:
        assert embedded_for(Config.load(environ=env)).stop()


def test_submit_warns_when_no_startd_reports(run, broker: Broker) -> None:
    alone = run("submit", "--", "true")
    assert "no startd has reported in the last 900 s" in alone.stderr
    broker.publish_slot(SLOT, ttl_s=60)
    assert "no startd" not in run("submit", "--", "true").stderr
