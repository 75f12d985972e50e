"""Filters and timed holds in a real pool (`fetchwork up`): `fetchwork submit`
waits for the submission filters' verdict, the shipped license gate decides
activation, and `fetchwork hold --for/--until` ends by itself."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.filterprogs import write_filter
from tests.support.pools import fw, history_json, pool_up, q_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

GATE = Path(__file__).resolve().parents[2] / "config" / "examples" / "license_gate"


@pytest.fixture(scope="module")
def site():
    """A 2-slot pool whose submission filter refuses jobs saying `Bad = true` and whose
    activation chain is the license gate (the license test leaves it one). Its folder
    is one the jobs can reach (they run as nobody under a root test run)."""
    tmp_path = Path(tempfile.mkdtemp(prefix="fw-filterpool-"))
    tmp_path.chmod(0o777)
    write_filter(tmp_path, "quota", code='$(grep -q "^Bad = true" "$file" && echo 3 || echo 0)',
                 body='grep -q "^Bad = true" "$file" && echo "bad jobs are refused" >&2')
    licenses = tmp_path / "licenses"
    licenses.write_text("100\n")
    try:
        with pool_up(tmp_path, 2, SUBMIT_FILTER_NAMES="QUOTA",
                     SUBMIT_FILTER_QUOTA=str(tmp_path / "quota"),
                     ACTIVATION_FILTER_NAMES="LICENSE", ACTIVATION_FILTER_LICENSE=str(GATE),
                     ACTIVATION_FILTER_LICENSE_ARGS=str(licenses),
                     ACTIVATION_FILTER_INTERVAL="0.5", ACTIVATION_FILTER_TIMEOUT="10") as pool:
            yield pool.env, pool.up, tmp_path, licenses
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_submit_waits_for_the_verdict_and_exits_1_for_a_failed_job(site):
    env, up, tmp_path, _licenses = site
    (tmp_path / "two.sub").write_text(
        "executable = /bin/true\n+Bad = false\nqueue\n+Bad = true\nqueue\n")
    done = fw(env, "submit", "two.sub", cwd=tmp_path, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    cluster = done.stdout.split("cluster ")[1].split(".")[0]
    assert (f"Job {cluster}.1 failed: submission filter QUOTA failed the job: exit 3: "
            "bad jobs are refused") in done.stdout
    assert f"1 job(s) queued in cluster {cluster}; 1 failed." in done.stdout
    failed = [ad for ad in history_json(env) if ad["ClusterId"] == int(cluster)
              and ad["ProcId"] == 1]
    assert failed and failed[0]["RemoveReason"].startswith("submission filter QUOTA")


def test_no_wait_returns_at_once(site):
    env, up, tmp_path, _licenses = site
    done = fw(env, "submit", "--no-wait", "--", "/bin/true", check=False)
    assert done.returncode == 0 and "queued in cluster" not in done.stdout


def test_the_license_gate_starts_one_job_per_free_license(site):
    env, up, tmp_path, licenses = site
    wait_until(lambda: q_json(env) == [], 60, fail_if=up.died, what="an empty queue")
    licenses.write_text("1\n")
    work = tmp_path / "lic"
    work.mkdir(mode=0o777)
    work.chmod(0o777)
    (work / "jobs.sub").write_text(
        f"executable = /bin/sh\narguments = \"-c 'touch {work}/ran.$(Process); sleep 1'\"\n"
        "queue 2\n")
    fw(env, "submit", "jobs.sub", cwd=work)
    wait_until(lambda: (work / "ran.0").exists() or (work / "ran.1").exists(), 60,
               fail_if=up.died, what="the first licensed job")
    assert licenses.read_text().strip() == "0"
    waiting = wait_until(lambda: [ad for ad in q_json(env) if ad["JobStatus"] == 1
                                  and ad.get("FetchworkReservedSlot")], 60,
                         what="the second job waiting on a reserved slot")
    assert "0 free" in waiting[0]["FetchworkActivationReason"] or \
        "exit 2" in waiting[0]["FetchworkActivationReason"]
    licenses.write_text("1\n")  # the site returns the first job's license
    wait_until(lambda: (work / "ran.0").exists() and (work / "ran.1").exists(), 60,
               fail_if=up.died, what="the second job after a license came back")


def test_hold_for_ends_by_itself_and_q_shows_it(site):
    env, up, tmp_path, licenses = site
    licenses.write_text("5\n")
    marker = tmp_path / "timed"
    done = fw(env, "submit", "--hold", "--", "/bin/touch", str(marker))
    cluster = done.stdout.split("cluster ")[1].split(".")[0]
    wait_until(lambda: [ad for ad in q_json(env) if ad["ClusterId"] == int(cluster)
                        and ad["JobStatus"] == 5], 60, what="the job admitted, held")
    # Long enough that the three commands below see the hold: each starts a Python
    # process, and on a loaded 2-core machine the three took over 15 s, so a
    # 15-second hold had ended (and the job run) before the last one.
    asked_at = time.time()
    held = fw(env, "hold", f"{cluster}.0", "--for", "45")
    assert f"Job {cluster}.0 held until " in held.stdout
    assert f"Job {cluster}.0 held until " in fw(env, "q").stdout
    [ad] = [ad for ad in q_json(env) if ad["ClusterId"] == int(cluster)]
    assert asked_at + 44 <= ad["HoldUntil"] <= time.time() + 46  # whole seconds, rounded up
    wait_until(marker.exists, 120, fail_if=up.died, what="the job released by the broker")
    assert time.time() >= ad["HoldUntil"]


def test_hold_until_in_local_time_and_release_ends_it_early(site):
    env, up, tmp_path, _licenses = site
    done = fw(env, "submit", "--hold", "--", "/bin/true")
    cluster = done.stdout.split("cluster ")[1].split(".")[0]
    wait_until(lambda: [ad for ad in q_json(env) if ad["ClusterId"] == int(cluster)
                        and ad["JobStatus"] == 5], 60, what="the job admitted, held")
    later = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() + 7200))
    fw(env, "hold", f"{cluster}", "--until", later)
    [ad] = [ad for ad in q_json(env) if ad["ClusterId"] == int(cluster)]
    assert time.strftime("%Y-%m-%d %H:%M", time.localtime(ad["HoldUntil"])) == later
    past = fw(env, "hold", f"{cluster}", "--until", "2001-01-01 00:00", check=False)
    assert past.returncode != 0 and "in the past" in past.stderr
    fw(env, "release", f"{cluster}")
    wait_until(lambda: not [ad for ad in q_json(env) if ad["ClusterId"] == int(cluster)], 60,
               fail_if=up.died, what="the released job to finish")
