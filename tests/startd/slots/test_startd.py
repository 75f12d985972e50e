"""A partitionable slot in a real startd fed by a site's own hooks (programs): jobs carve
dynamic slots, and jobs that do not fit (the hook does not check) are rejected."""

from __future__ import annotations

import pytest

from fetchwork.config import ads
from tests.support.startd import QUEUE_DELAY, Pool, pool_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def run():
    with pool_root("pslot") as root:
        pool = Pool(root, "program")
        pool.write_config(f"""
            NUM_CPUS = 4
            MEMORY = 1000
            SLOT_TYPE_1 = cpus=100%, memory=100%
            SLOT_TYPE_1_PARTITIONABLE = True
            NUM_SLOTS_TYPE_1 = 1
            STARTD_JOB_HOOK_KEYWORD = Q
            FetchWorkDelay = {QUEUE_DELAY}
        """ + pool.keyword_config("Q"))
        release = root / "release"
        pool.jobs = {  # type: ignore[attr-defined]
            "wide": pool.add_job("Q", "RequestCpus = 3\nRequestMemory = 600\n", cmd="/bin/sh",
                                 args=f"-c 'while [ ! -e {release} ]; do sleep 0.1; done'"),
            "too_wide": pool.add_job("Q", "RequestCpus = 2\n"),
            "exclusive": pool.add_job("Q", "Exclusive = true\n"),
            "narrow": pool.add_job("Q", "RequestCpus = 1\nRequestMemory = 400\n"),
        }
        proc = pool.start("--once", "--name", "testhost")
        # The narrow job ran and gave its slot back while the wide one still runs.
        wait_until(lambda: len(pool.calls("exit")) >= 1 and len(pool.calls("fetch")) >= 5,
                   timeout_s=90, fail_if=pool.exited, what="the narrow job done")
        release.write_text("")
        pool.status = proc.wait(90)
        yield pool


def job_of(call, pool) -> str:
    ad = ads.split_pair(call.stdin)[0]
    job = f"{ad['ClusterId']}.{ad['ProcId']}"
    return next(name for name, job_id in pool.jobs.items() if job_id == job)


def test_the_startd_exits_zero(run):
    assert run.status == 0, run.log_text()[-3000:]


def test_jobs_that_fit_are_accepted_the_others_rejected(run):
    replies = {job_of(call, run): call.args[-1] for call in run.calls("reply")}
    assert replies == {"wide": "accept", "too_wide": "reject", "exclusive": "reject",
                       "narrow": "accept"}
    log = run.log_text()
    assert "RequestCpus 2 CPU(s) is more than the slot's Cpus 1" in log
    assert "the job is exclusive and 1 job(s) run on this machine" in log


def test_the_fetch_hook_sees_what_is_still_free(run):
    first, second = [ads.parse_ad(call.stdin) for call in run.calls("fetch")[:2]]
    assert (first["Cpus"], first["Memory"], first["PartitionableSlot"]) == (4, 1000, True)
    assert first["SlotType"] == "Partitionable" and first["TotalSlotCpus"] == 4
    assert first["FetchworkDynamicSlotName"] == "slot1_1@testhost"
    assert (second["Cpus"], second["Memory"], second["FetchworkRunningJobs"]) == (1, 400, 1)
    assert second["FetchworkDynamicSlotName"] == "slot1_2@testhost"


def test_each_job_runs_in_its_own_dynamic_slot(run):
    slots = {job_of(call, run): ads.split_pair(call.stdin)[1] for call in run.calls("prepare")}
    assert set(slots) == {"wide", "narrow"}
    wide, narrow = slots["wide"], slots["narrow"]
    assert (wide["Name"], wide["SlotType"], wide["Cpus"], wide["Memory"]) == (
        "slot1_1@testhost", "Dynamic", 3, 600)
    assert (narrow["Name"], narrow["DynamicSlot"], narrow["Cpus"]) == ("slot1_2@testhost",
                                                                       True, 1)
    assert narrow["FetchworkRunningJobs"] == 2


def test_a_finished_job_gives_its_resources_back(run):
    log = run.log_text()
    assert "slot1_2: given back; free now 1 CPU(s), 400 MB" in log
    assert "slot1_1: given back; free now 4 CPU(s), 1000 MB" in log
