"""The policy knobs (converter, defaults, the example site) and the snapshot built from ads."""

from __future__ import annotations

import pytest

from fetchwork.broker.scheduling.settings import Budget
from fetchwork.broker.scheduling.snapshot import (
    build_snapshot,
    queued_job,
    usage_of,
)
from fetchwork.broker.store.jobads import walltime_of
from fetchwork.broker.store.states import State
from fetchwork.errors import ConfigError
from tests.support.scheduling import hpc2n, settings

# -- settings ---------------------------------------------------------------------


def test_every_policy_knob_is_off_by_default():
    defaults = settings()
    assert not defaults.limits_on() and not defaults.priority_on()
    assert defaults.max_walltime_s == 0
    assert defaults.default_walltime_s == 3600
    assert defaults.interval_s == 5
    assert defaults.fairshare_window_s == 7 * 86400 and defaults.fairshare_depth == 7


def test_the_example_site_is_the_texts_policy():
    site = hpc2n()
    assert (site.max_idle_per_user, site.max_idle_per_project, site.max_jobs_per_user) == (
        8, 30, 72)
    assert site.maxps == Budget(72000, 1080000)
    assert site.max_walltime_s == 432000
    assert site.project_maxps["snac001"] == Budget(86_400_000, 3 * 86_400_000)
    assert site.weights.fairshare and site.weights.xfactor and site.weights.queuetime
    assert site.qos["express"].target_queuetime_s == 4 * 3600


def test_a_projects_hard_limit_defaults_to_three_times_its_soft_one():
    knobs = settings("MAXPS_SOFT_Phys = 1000\nMAXPS_SOFT_chem = 10\nMAXPS_HARD_chem = 20")
    assert knobs.budget_of_project("phys") == Budget(1000, 3000)
    assert knobs.budget_of_project("CHEM") == Budget(10, 20)
    assert knobs.budget_of_project("bio") is None and knobs.budget_of_project(None) is None


def test_qos_classes_and_fairshare_targets_are_read_by_name():
    knobs = settings("QOS_NAMES = high, low\nQOS_high_PRIORITY = 50\n"
                     "QOS_high_TARGET_QUEUETIME = 2h\nFAIRSHARE_TARGET_alice = 25")
    assert knobs.qos["high"].priority == 50 and knobs.qos["high"].target_queuetime_s == 7200
    assert knobs.qos["low"].priority == 0 and knobs.qos["low"].target_queuetime_s == 0
    assert knobs.fairshare_targets == {"alice": 25.0}


@pytest.mark.parametrize(("text", "knob"), [
    ("MAX_IDLE_JOBS_PER_USER = many", "MAX_IDLE_JOBS_PER_USER"),
    ("MAX_JOBS_PER_USER = -1", "MAX_JOBS_PER_USER"),
    ("MAXPS_SOFT = -5", "MAXPS_SOFT"),
    ("MAXPS_SOFT_phys = lots", "MAXPS_SOFT_phys"),
    ("FAIRSHARE_TARGET_alice = 150", "FAIRSHARE_TARGET_alice"),
    ("FAIRSHARE_DEPTH = 0", "FAIRSHARE_DEPTH"),
    ("DEFAULT_JOB_WALLTIME = 0", "DEFAULT_JOB_WALLTIME"),
    ("QOS_NAMES = high\nQOS_high_TARGET_QUEUETIME = soon", "QOS_high_TARGET_QUEUETIME"),
])
def test_a_bad_knob_is_named_with_its_line(text, knob):
    with pytest.raises(ConfigError, match=knob) as caught:
        settings(text)
    assert "<test>:" in str(caught.value)


# -- the snapshot ---------------------------------------------------------------------

AD = {"ClusterId": 12, "ProcId": 3, "Owner": "alice", "QDate": 1000, "JobStatus": 1,
      "FetchworkState": "IDLE", "FetchworkOrder": 17.0, "EnteredCurrentStatus": 1500,
      "JobPrio": 2}


def test_a_job_ad_becomes_a_policy_job_with_defaults():
    one = queued_job(AD, 3600)
    assert (one.job_id, one.owner, one.project, one.cpus, one.walltime_s) == (
        "12.3", "alice", None, 1, 3600)
    assert (one.state, one.prio_group, one.order, one.idle_since) == (State.IDLE, 2, 17.0, 1500)
    assert one.ps == 3600 and one.queue_time_s(1600) == 100


def test_names_are_case_insensitive_and_expressions_count_as_absent():
    ad = {**AD, "requestcpus": 4, "ALLOWEDJOBDURATION": 100, "RequestMemory": {"$expr": "x"}}
    one = queued_job(ad, 3600)
    assert (one.cpus, one.walltime_s, one.memory_mb) == (4, 100, 0.0)


def test_the_project_is_the_accounting_group_else_the_project_name():
    def project(ad: dict[str, object]) -> str | None:
        one = queued_job(ad, 3600)
        assert one is not None
        return one.project

    assert project({**AD, "AccountingGroup": "phys", "ProjectName": "x"}) == "phys"
    assert project({**AD, "ProjectName": "x"}) == "x"
    assert project({**AD, "AccountingGroup": ""}) is None


def test_walltime_is_allowed_job_duration_else_the_default():
    assert walltime_of({"AllowedJobDuration": 7200}, 3600) == 7200
    assert walltime_of({"AllowedJobDuration": 0}, 3600) == 3600
    assert walltime_of({}, 60) == 60


def test_a_running_job_started_when_it_was_claimed():
    ad = {**AD, "FetchworkState": "RUNNING", "JobStatus": 2, "EnteredCurrentStatus": 2000,
          "RequestCpus": 2, "AllowedJobDuration": 1000}
    one = queued_job(ad, 3600)
    assert one.started_at == 2000 and one.idle_since is None
    assert one.running_ps(2500) == 1000
    assert queued_job({**ad, "JobCurrentStartDate": 2100}, 3600).started_at == 2100


def test_blocked_jobs_keep_their_reason_and_soft_mark():
    ad = {**AD, "FetchworkState": "BLOCKED", "BlockedReason": "why", "BlockedBySoftLimit": True}
    one = queued_job(ad, 3600)
    assert (one.state, one.blocked_reason, one.soft_blocked) == (State.BLOCKED, "why", True)
    assert one.queue_time_s(5000) == 0


def test_finished_jobs_are_not_in_the_snapshot():
    ads = [AD, {**AD, "ProcId": 4, "FetchworkState": "COMPLETED", "JobStatus": 4},
           {**AD, "ProcId": 5, "FetchworkState": None, "JobStatus": 5}]
    assert [(one.job_id, one.state) for one in build_snapshot(ads, 3600)] == [
        ("12.3", State.IDLE), ("12.5", State.HELD)]


def test_a_finished_job_reports_its_usage():
    record = usage_of({**AD, "JobCurrentStartDate": 100, "CompletionDate": 400,
                       "RequestCpus": 2, "AccountingGroup": "phys"})
    assert (record.owner, record.project, record.cpus, record.start_s, record.end_s) == (
        "alice", "phys", 2, 100, 400)
    assert usage_of(AD) is None
