"""The htcondor2 script (htcondor_script.py) against a whole fetchwork pool:
`fetchwork up` with two slots, the script's `Schedd()` found from the
environment as the command line finds it, jobs that really run. The record
must meet htcondor2's documented expectations (expectations.py), and the
errors must be fetchwork's, with the command line's messages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import fetchwork
from fetchwork.errors import AdError, EditError
from tests.api import expectations, htcondor_script
from tests.support.pools import pool_up

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Iterator[htcondor_script.Record]:
    from tests.support.folders import open_folder

    with open_folder("fw-api-", 0o777) as root, pool_up(root, 2) as pool:
        work = pool.folder("work")
        with pytest.MonkeyPatch.context() as patch:
            for name, value in pool.env.items():
                patch.setenv(name, value)
            yield htcondor_script.run(fetchwork, str(work), timeout_s=120)


def test_the_script_meets_htcondor2s_expectations(record: htcondor_script.Record) -> None:
    expectations.check(record)


def test_a_refused_edit_is_a_fetchwork_error_naming_the_attribute(
        record: htcondor_script.Record) -> None:
    error = record.errors["edit_owner"]
    assert isinstance(error, EditError) and "Owner" in str(error)


def test_a_bad_constraint_has_the_command_lines_message(record: htcondor_script.Record) -> None:
    error = record.errors["bad_constraint"]
    assert isinstance(error, AdError)
    assert str(error).startswith("constraint: not a ClassAd expression")

