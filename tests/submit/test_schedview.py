"""`q -showq`, `q -analyze ID`, `q -priority`, `q --json` and `submit` on a pool with limits."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner

from fetchwork.broker.client import Broker
from fetchwork.broker.scheduling.leaderpass import SchedulingRunner
from fetchwork.cli import FetchworkGroup
from fetchwork.config.loader import Config
from fetchwork.submit import submitcli, usercli
from tests.support.rules import publish_rules

pytestmark = pytest.mark.timeout(60)

KNOBS = {"MAX_IDLE_JOBS_PER_USER": "2", "PRIORITY_QUEUETIME_WEIGHT": "1"}


@click.group(cls=FetchworkGroup)
def cli() -> None:
    """submit and q alone."""


cli.add_command(usercli.q_command)
cli.add_command(submitcli.submit_command)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    return {**env, **{f"_FETCHWORK_{name}": value for name, value in KNOBS.items()}}


@pytest.fixture
def queue(redis_url: str, pool_name: str) -> list[str]:
    client = redis.Redis.from_url(redis_url)
    config = Config.load(environ={}).with_values(**KNOBS)
    broker = Broker(client, pool_name, config)
    ids = broker.submit([{"Cmd": "/bin/true", "Requirements": {"$expr": "TARGET.Cpus >= 64"}}]
                        * 3, owner="alice")
    SchedulingRunner.for_settings(broker.store, broker.scheduling).run_pass()
    client.close()
    return ids


def q(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, ["q", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_json_shows_idle_and_blocked(env, queue):
    ads = json.loads(q(env, "-json"))
    assert [ad["FetchworkState"] for ad in ads] == ["IDLE", "IDLE", "BLOCKED"]
    assert ads[2]["BlockedReason"] == "user alice has 2 idle jobs (MAX_IDLE_JOBS_PER_USER = 2)"


def test_showq_prints_the_three_parts(env, queue):
    text = q(env, "-showq")
    assert text.startswith("ACTIVE JOBS--------------------\n")
    assert "2 Idle Jobs" in text
    assert f"{queue[2]:<12}" in text.split("BLOCKED JOBS")[1]
    assert text.endswith("Total Jobs: 3   Active Jobs: 0   Idle Jobs: 2   Blocked Jobs: 1\n")


def test_analyze_says_why(env, queue):
    blocked = q(env, "-analyze", queue[2])
    assert ("is blocked by policy: user alice has 2 idle jobs (MAX_IDLE_JOBS_PER_USER = 2)"
            in blocked)
    idle = q(env, "-analyze", queue[1])
    assert "1 idle job is ahead of it" in idle
    assert "0 of 0 slots match it." in idle


def test_priority_lists_each_factor(env, queue):
    text = q(env, "-priority")
    assert "QUEUETIME" in text and "FAIRSHARE" in text
    assert text.count("alice") == 3


def test_analyze_needs_an_id(env, queue):
    result = CliRunner().invoke(cli, ["q", "-analyze"], env=env)
    assert result.exit_code != 0 and "-analyze needs job ids" in result.output


def test_a_submit_file_names_the_walltime_and_the_project(tmp_path: Path):
    from fetchwork.errors import SubmitFileError
    from fetchwork.submit.submitfile import parse_submit

    text = ("executable = /bin/true\nallowed_job_duration = 7200\n"
            "accounting_group = snac001\nqueue\n")
    parsed = parse_submit(text, 1, submit_dir=str(tmp_path))
    (ad,) = parsed.ads
    assert ad["AllowedJobDuration"] == 7200 and ad["AccountingGroup"] == "snac001"
    assert not any("accounting_group" in warning for warning in parsed.warnings)
    with pytest.raises(SubmitFileError, match="allowed_job_duration must be at least 1"):
        parse_submit("executable = /bin/true\nallowed_job_duration = 0\nqueue\n", 1,
                     submit_dir=str(tmp_path))


def test_submit_refuses_a_job_over_max_walltime(env, tmp_path: Path, redis_url, pool_name):
    """The pool's MAX_WALLTIME refuses, whatever the submitter's own configuration says."""
    publish_rules(redis.Redis.from_url(redis_url), pool_name,
                  Config.load(environ={}).with_values(MAX_WALLTIME=432000))
    job = tmp_path / "long.sub"
    job.write_text("executable = /bin/true\nallowed_job_duration = 500000\nqueue 2\n")
    result = CliRunner().invoke(cli, ["submit", str(job)],
                                env={**env, "_FETCHWORK_MAX_WALLTIME": "0"})
    assert result.exit_code == 1
    assert "more than the pool's MAX_WALLTIME = 432000 s" in result.output
    assert "Traceback" not in result.output
    assert json.loads(q(env, "-json")) == []
