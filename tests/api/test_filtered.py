"""Schedd.submit in a pool with a submission filter (`fetchwork up`): the call
returns after the filters' verdict, and jobs they fail raise
SubmissionFilteredError naming each job and its reason, the others queued."""

from __future__ import annotations

from collections.abc import Iterator

import htcondor2
import pytest

import fetchwork
from fetchwork.broker.filters.gate import SUBMIT_FIELD
from fetchwork.errors import SubmissionFilteredError, SubmitError
from tests.support.filterprogs import write_filter
from tests.support.folders import open_folder
from tests.support.pools import pool_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def schedd() -> Iterator[fetchwork.Schedd]:
    """A 1-slot pool whose submission filter fails jobs saying `Bad = true`."""
    with open_folder("fw-api-filter-", 0o777) as root:
        write_filter(root, "quota", code='$(grep -q "^Bad = true" "$file" && echo 3 || echo 0)',
                     body='grep -q "^Bad = true" "$file" && echo "bad jobs are refused" >&2')
        with pool_up(root, 1, SUBMIT_FILTER_NAMES="QUOTA",
                     SUBMIT_FILTER_QUOTA=str(root / "quota")) as pool, \
                pytest.MonkeyPatch.context() as patch:
            for name, value in pool.env.items():
                patch.setenv(name, value)
            patch.chdir(pool.folder("work"))
            schedd = fetchwork.Schedd()
            # The leader publishes its filters once it leads; only then are jobs filtered.
            broker = schedd.broker
            wait_until(lambda: broker.client.hget(broker.keys.filters, SUBMIT_FIELD),
                       timeout_s=60, fail_if=pool.up.died, what="the leader's filter summary")
            yield schedd


def test_jobs_the_filters_fail_raise_with_the_rest_queued(schedd: fetchwork.Schedd) -> None:
    sub = htcondor2.Submit({"executable": "/bin/sleep", "arguments": "60", "hold": "true",
                            "+Bad": "$(bad)"})
    with pytest.raises(SubmissionFilteredError) as caught:
        schedd.submit(sub, itemdata=iter([{"bad": "false"}, {"bad": "true"}]))
    error = caught.value
    assert isinstance(error, SubmitError)
    cluster = error.result.cluster()
    assert error.result.num_procs() == 2
    assert list(error.failed) == [f"{cluster}.1"]
    assert "bad jobs are refused" in error.failed[f"{cluster}.1"]
    assert f"Job {cluster}.1 failed: submission filter QUOTA" in str(error)
    queued = schedd.query(f"ClusterId == {cluster}", ["ProcId", "JobStatus"])
    assert [(ad["ProcId"], ad["JobStatus"]) for ad in queued] == [(0, 5)]
    schedd.act(htcondor2.JobAction.Remove, cluster)


def test_jobs_the_filters_admit_return_after_the_verdict(schedd: fetchwork.Schedd) -> None:
    result = schedd.submit({"executable": "/bin/true", "+Bad": "false", "hold": "true"},
                           count=2)
    states = [ad["JobStatus"] for ad in
              schedd.query(f"ClusterId == {result.cluster()}", ["JobStatus"])]
    assert states == [5, 5]  # admitted (held as asked), not waiting VALIDATING
    schedd.act(htcondor2.JobAction.Remove, result.cluster())
