"""The submit side of the job event log, against a real Redis: `fetchwork submit`
creates each job's log first, refuses a log it cannot create, and returns once
the broker service's leader has written the submit events."""

from __future__ import annotations

import threading
from pathlib import Path

import click
import htcondor2
import pytest
from click.testing import CliRunner

from fetchwork.broker.leader.service import BrokerService
from fetchwork.cli import FetchworkGroup
from fetchwork.submit import submitcli

pytestmark = pytest.mark.timeout(60)


@click.group(cls=FetchworkGroup)
def cli() -> None:
    """submit alone."""


cli.add_command(submitcli.submit_command)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "_FETCHWORK_SUBMIT_USERLOG_WAIT": "20"}


def submit(env: dict[str, str], tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sub").write_text(text)
    return CliRunner().invoke(cli, ["submit", "job.sub"], env=env)


def test_a_log_that_cannot_be_created_queues_nothing(env, tmp_path, broker, monkeypatch):
    result = submit(env, tmp_path, "executable = /bin/true\nlog = no/such/dir/job.log\nqueue\n",
                    monkeypatch)
    assert result.exit_code == 1
    assert f"cannot create the job event log {tmp_path}/no/such/dir/job.log" in result.output
    assert broker.queued_ids() == []


def test_without_a_broker_service_the_log_is_created_and_submit_warns(env, tmp_path,
                                                                       monkeypatch):
    result = submit(env, tmp_path, "executable = /bin/true\nlog = job.log\nqueue\n", monkeypatch)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "job.log").read_text() == ""
    assert "no broker service runs" in result.output


def test_submit_returns_once_the_submit_events_are_written(env, tmp_path, broker, monkeypatch):
    service = BrokerService(broker, leader_lease_s=30, replica="a", user_logs=True)
    assert service.run_once().leader
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        result = submit(env, tmp_path, "executable = /bin/true\nlog = job.log\nqueue 3\n",
                        monkeypatch)
        assert result.exit_code == 0, result.output
        written = list(htcondor2.JobEventLog(str(tmp_path / "job.log")).events(0))
        assert [(event.type, event.proc) for event in written] == \
            [(htcondor2.JobEventType.SUBMIT, proc) for proc in range(3)]
    finally:
        stop.set()
        thread.join(timeout=10)
