"""`fetchwork q -showq`, `q -analyze ID`, `q -priority` and `q --json` on a pool with limits."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner

from fetchwork.broker.client import Broker
from fetchwork.broker.policing import PolicyRunner
from fetchwork.config.loader import Config
from fetchwork.submit import usercli

pytestmark = pytest.mark.timeout(60)

KNOBS = {"MAX_IDLE_JOBS_PER_USER": "2", "PRIORITY_QUEUETIME_WEIGHT": "1"}


@click.group()
def cli() -> None:
    """q alone."""


cli.add_command(usercli.q_command)


@pytest.fixture
def env(redis_url: str, pool_name: str, tmp_path: Path) -> dict[str, str]:
    knobs = {f"_FETCHWORK_{name}": value for name, value in KNOBS.items()}
    return {"FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
            "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path / "state"),
            **knobs}


@pytest.fixture
def queue(redis_url: str, pool_name: str) -> list[str]:
    client = redis.Redis.from_url(redis_url)
    config = Config.load(environ={}).with_values(**KNOBS)
    broker = Broker(client, pool_name, config)
    ids = broker.submit([{"Cmd": "/bin/true", "Requirements": {"$expr": "TARGET.Cpus >= 64"}}]
                        * 3, owner="alice")
    PolicyRunner.for_broker(broker).run_pass()
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
