"""`fetchwork qedit` against a real Redis: condor_qedit's words, its refusals, and
the same path as the Python API's Schedd.edit."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner, Result

from fetchwork.broker.client import Broker
from fetchwork.cli import main
from fetchwork.submit.qeditcli import split_words


def qedit(env: dict[str, str], *words: str) -> Result:
    return CliRunner().invoke(main, ["qedit", *words], env=env, catch_exceptions=False)


def test_words_are_ids_then_pairs() -> None:
    assert split_words(("12.0", "3", "JobPrio", "5", "Tag", '"x"')) == \
        (["12.0", "3"], [("JobPrio", "5"), ("Tag", '"x"')])
    assert split_words(("JobPrio", "5")) == ([], [("JobPrio", "5")])
    for bad in (("12.0",), ("12.0", "JobPrio"), ("A", "1", "B")):
        with pytest.raises(click.UsageError):
            split_words(bad)


def test_qedit_sets_attributes_of_the_jobs_named(env: dict[str, str], broker: Broker) -> None:
    ids = broker.submit([{"Cmd": "/bin/true"}] * 3)
    cluster = ids[0].split(".")[0]
    done = qedit(env, f"{cluster}.1", "Tag", '"one"', "Level", "7")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == ['Set attribute "Tag" for 1 matching job(s).',
                                        'Set attribute "Level" for 1 matching job(s).']
    assert broker.get(ids[1])["Tag"] == "one" and broker.get(ids[1])["Level"] == 7
    assert "Tag" not in broker.get(ids[0])
    by_constraint = qedit(env, "-constraint", "ProcId != 1", "Tag", "2")
    assert "for 2 matching job(s)" in by_constraint.stdout
    assert [broker.get(job)["Tag"] for job in ids] == [2, "one", 2]


def test_qedit_refuses_what_a_user_may_not_change(env: dict[str, str], broker: Broker) -> None:
    ids = broker.submit([{"Cmd": "/bin/true"}])
    refused = qedit(env, ids[0], "Tag", "1", "Owner", '"mallory"')
    assert refused.exit_code == 1
    assert "fetchwork: attribute Owner cannot be changed" in refused.stderr
    assert "Tag" not in broker.get(ids[0])  # nothing changed, not even the first pair
    bad = qedit(env, ids[0], "Tag", "((")
    assert bad.exit_code == 1 and "not a ClassAd expression" in bad.stderr
    missing = qedit(env, "999.0", "Tag", "1")
    assert missing.exit_code == 1 and "fetchwork: no matching jobs" in missing.stderr
