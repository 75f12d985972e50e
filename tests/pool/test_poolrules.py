"""The pool's rules in a real pool (`fetchwork up`, its own configuration file): a
submitter's configuration cannot loosen them, and the first jobs of a pool, even ones
submitted before it started, go through its submission filters and templates."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.filterprogs import calls, write_filter
from tests.support.pools import Up, fw, history_json, pool_env, q_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)


@contextmanager
def folder() -> Iterator[Path]:
    """A folder the jobs can reach (they run as nobody under a root test run)."""
    path = Path(tempfile.mkdtemp(prefix="fw-rulespool-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def up_with_file(root: Path, text: str, *, wait_for_slot: bool = True) -> Iterator[Up]:
    """`fetchwork up --slots 1` whose own configuration file says `text`."""
    (root / "pool.conf").write_text(text)
    env = {**pool_env(root / "state"), "FETCHWORK_CONFIG": str(root / "pool.conf")}
    up = Up(env, 1, root / "up.log")
    try:
        if wait_for_slot:
            wait_until(lambda: "slot" in fw(env, "status", check=False).stdout, 60,
                       fail_if=up.died, what="the pool's slot")
        yield up
        assert up.stop() == 0, (root / "up.log").read_text()
    finally:
        if up.process.poll() is None:
            up.kill_all()
        fw(env, "redis", "stop", check=False)


def submitter_env(root: Path, **knobs: str) -> dict[str, str]:
    """A submitting user's environment: no configuration file of the pool's, `knobs` of
    its own (as environment overrides)."""
    return pool_env(root / "state", **knobs)


def test_a_submitters_configuration_cannot_loosen_the_pools_max_walltime():
    with folder() as root, up_with_file(root, "MAX_WALLTIME = 100\n"):
        user = submitter_env(root, MAX_WALLTIME="0")
        (root / "long.sub").write_text("executable = /bin/true\nallowed_job_duration = 5000\n"
                                       "queue\n")
        refused = fw(user, "submit", "long.sub", cwd=root, check=False)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert ("job 1.0: the job asks for 5000 s of wall-clock time (AllowedJobDuration), "
                "more than the pool's MAX_WALLTIME = 100 s; nothing was queued") in refused.stderr
        assert q_json(user) == [] and history_json(user) == []
        # The user sees the pool's value, and that theirs does not apply.
        shown = fw(user, "config", "-V", "MAX_WALLTIME").stdout.splitlines()
        assert shown[0] == "100" and "the pool's: published by the leader" in shown[1]
        # Within the cap, the job runs.
        (root / "short.sub").write_text("executable = /bin/true\nallowed_job_duration = 50\n"
                                        "queue\n")
        fw(user, "submit", "--wait", "--wait-timeout", "120", "short.sub", cwd=root)


FILTERED_POOL = """
SUBMIT_FILTER_NAMES = AUDIT
SUBMIT_FILTER_AUDIT = {root}/audit
JOB_TEMPLATE_NAMES = Default
JOB_TEMPLATE_DEFAULT_DEFAULT_Audited = "by the template"
"""


def test_a_job_submitted_before_the_pool_started_waits_for_its_filters():
    with folder() as root:
        write_filter(root, "audit")
        user = submitter_env(root)
        (root / "first.sub").write_text("executable = /bin/true\n+Tag = \"first\"\nqueue\n")
        # No pool runs: submit starts the queue's Redis, and the job waits for a leader.
        early = fw(user, "submit", "first.sub", cwd=root)
        assert "has not published the pool's rules yet" in early.stderr
        assert [ad["JobStatus"] for ad in q_json(user)] == [1]
        assert calls(root) == []
        # Read while the pool runs: a query after it stopped would start its Redis again.
        with up_with_file(root, FILTERED_POOL.format(root=root), wait_for_slot=False) as up:
            [done] = wait_until(lambda: history_json(user), 120, fail_if=up.died,
                                what="the first job finishing")
        assert done["JobStatus"] == 4 and done["Audited"] == "by the template"
        assert calls(root) == ['audit submit "first"']


@pytest.mark.parametrize("run", range(3))
def test_the_first_job_right_after_up_goes_through_the_filters(run: int):
    with folder() as root:
        write_filter(root, "audit")
        user = submitter_env(root)
        (root / "first.sub").write_text(f"executable = /bin/true\n+Tag = \"run{run}\"\nqueue\n")
        with up_with_file(root, FILTERED_POOL.format(root=root), wait_for_slot=False) as up:
            fw(user, "submit", "--no-wait", "first.sub", cwd=root)
            [done] = wait_until(lambda: history_json(user), 120, fail_if=up.died,
                                what="the first job finishing")
        assert done["JobStatus"] == 4 and done["Audited"] == "by the template"
        assert calls(root) == [f'audit submit "run{run}"']
