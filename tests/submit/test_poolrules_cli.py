"""The user commands and the pool's rules: `fetchwork config` says which values are the
pool's (published by its leader) and which this machine's own; `fetchwork submit` is
refused by the pool's rules whatever this machine's configuration says, and tells the
user when the jobs wait because the pool's rules were never published."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner, Result

from fetchwork.broker.client import Broker
from fetchwork.cli import FetchworkGroup
from fetchwork.config.loader import Config
from fetchwork.submit import configcli, submitcli, usercli
from tests.support.rules import publish_rules

pytestmark = pytest.mark.timeout(60)


@click.group(cls=FetchworkGroup)
def cli() -> None:
    """The commands under test."""


cli.add_command(configcli.config_command)
cli.add_command(submitcli.submit_command)
cli.add_command(usercli.q_command)


def invoke(env: dict[str, str], *args: str, **more: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={**env, **more})


@pytest.fixture
def pool_file_says(redis_url: str, pool_name: str):
    """Publish, as the pool's leader would, the rules of a pool file saying `knobs`."""
    client = redis.Redis.from_url(redis_url)

    def publish(**knobs: object) -> None:
        publish_rules(client, pool_name, Config.load(environ={}).with_values(**knobs))
    yield publish
    client.close()


# -- fetchwork config -------------------------------------------------------------------


def test_config_prints_the_pools_value_of_a_pool_knob(env, pool_file_says):
    pool_file_says(MAX_WALLTIME=100)
    result = invoke(env, "config", "MAX_WALLTIME", _FETCHWORK_MAX_WALLTIME="0")
    assert result.exit_code == 0, result.output
    assert result.output == "100\n"


def test_config_verbose_says_which_values_are_the_pools(env, pool_file_says, pool_name):
    pool_file_says(MAX_WALLTIME=100)
    result = invoke(env, "config", "-V", "MAX_WALLTIME", "NUM_SLOTS",
                    _FETCHWORK_MAX_WALLTIME="0", _FETCHWORK_NUM_SLOTS="3")
    lines = result.output.splitlines()
    assert lines[0] == "100"
    assert lines[1].startswith(f" # the pool's: published by the leader of pool {pool_name} "
                               "(tests), version ")
    assert lines[2].startswith(" # this machine's own value 0 (")
    assert lines[2].endswith(") does not apply to the pool's jobs")
    assert lines[3] == "3" and lines[4].startswith(" # at: ")


def test_config_dump_marks_the_pools_values(env, pool_file_says):
    pool_file_says(MAX_WALLTIME=100, MAXPS_SOFT_SNAC=50)
    lines = invoke(env, "config", "--dump", _FETCHWORK_MAX_WALLTIME="0").output.splitlines()
    assert lines[0].startswith("# Knobs marked 'the pool's' are the pool's, published by")
    at = lines.index("MAX_WALLTIME = 100")
    assert lines[at + 1].startswith(" # the pool's: published by")
    assert lines[at + 2].startswith(" # this machine's own: 0")
    # A pool knob this machine does not define is shown too.
    assert "MAXPS_SOFT_SNAC = 50" in lines
    assert any(line.startswith("NUM_SLOTS = ") for line in lines)


def test_config_without_published_rules_shows_this_machines_values_and_says_so(
        env, redis_url, pool_name):
    redis.Redis.from_url(redis_url).delete(Broker(redis.Redis.from_url(redis_url),
                                                  pool_name).keys.settings)
    result = invoke(env, "config", "-V", "MAX_WALLTIME", _FETCHWORK_MAX_WALLTIME="7")
    lines = result.output.splitlines()
    assert lines[0] == "7"
    assert lines[2] == (" # this machine's own value: the pool's would apply, but the broker "
                        f"service of pool {pool_name} has not published the pool's rules yet")


def test_config_with_the_pool_out_of_reach_still_answers(tmp_path: Path):
    env = {"FETCHWORK_STATE_DIR": str(tmp_path), "FETCHWORK_CONFIG": str(tmp_path / "none"),
           "FETCHWORK_BROKER": f"unix://{tmp_path}/nothing.sock"}
    (tmp_path / "none").write_text("")
    result = invoke(env, "config", "-V", "MAX_WALLTIME")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "0"
    assert "could not be reached" in result.output


# -- fetchwork submit -------------------------------------------------------------------


def test_submit_over_the_pools_cap_is_refused_naming_job_and_knob(env, pool_file_says,
                                                                  tmp_path: Path, broker):
    pool_file_says(MAX_WALLTIME=100)
    (tmp_path / "long.sub").write_text("executable = /bin/true\nallowed_job_duration = 5000\n"
                                       "queue\n")
    result = invoke(env, "submit", str(tmp_path / "long.sub"), _FETCHWORK_MAX_WALLTIME="0")
    assert result.exit_code == 1
    assert ("the pool refused the submission to cluster 1: job 1.0: the job asks for 5000 s "
            "of wall-clock time (AllowedJobDuration), more than the pool's MAX_WALLTIME = "
            "100 s; nothing was queued") in result.output
    assert "Traceback" not in result.output
    assert broker.queued_ids() == []


def test_submit_names_the_line_past_the_pools_attribute_cap(env, pool_file_says,
                                                            tmp_path: Path):
    pool_file_says(SUBMIT_MAX_JOB_ATTRS=2)
    (tmp_path / "wide.sub").write_text("executable = /bin/true\n+A = 1\n+B = 2\n+C = 3\n"
                                       "queue\n")
    result = invoke(env, "submit", str(tmp_path / "wide.sub"),
                    _FETCHWORK_SUBMIT_MAX_JOB_ATTRS="1000")
    assert result.exit_code == 1
    assert "wide.sub:4: more than 2 job attributes" in result.output


def test_submit_to_a_pool_that_never_published_says_the_jobs_wait(env, broker):
    broker.client.delete(broker.keys.settings)
    result = invoke(env, "submit", "--", "/bin/true")
    assert result.exit_code == 0, result.output
    assert "1 job(s) submitted to cluster" in result.output
    assert ("the pool's broker service has not published the pool's rules yet, so the 1 "
            "job(s) wait (VALIDATING)") in result.output
    assert "no broker service leads the pool now" in result.output
    [data] = broker.job_data(broker.queued_ids())
    assert data["FetchworkState"] == "VALIDATING"


def test_config_with_a_malformed_pool_name_answers_with_this_machines_value(env):
    result = invoke(env, "config", "-V", "MAX_WALLTIME", FETCHWORK_POOL="bad:name",
                    _FETCHWORK_MAX_WALLTIME="9")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "9"
    assert "the pool bad:name could not be reached" in result.output
    assert "Traceback" not in result.output
