"""The policy layer in a real pool: the leader's pass blocks and unblocks jobs with
Lua, submission places jobs BLOCKED, and a claim refuses what policy no longer allows."""

from __future__ import annotations

import time

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.scheduling.leaderpass import SchedulingRunner
from fetchwork.broker.scheduling.settings import scheduling_settings
from fetchwork.config.loader import Config
from fetchwork.errors import SubmitError
from tests.support.rules import publish_rules

pytestmark = pytest.mark.timeout(60)

SLOT = {"Name": "slot1@policy", "Cpus": 64, "Memory": 1}


def pool(redis_client, pool_name, **knobs):
    config = Config.load(environ={}).with_values(**knobs)
    publish_rules(redis_client, pool_name, config)  # the pool's leader has run
    broker = Broker(redis_client, pool_name, config)
    return broker, SchedulingRunner(broker.store, scheduling_settings(config))


def states(broker):
    return {f"{ad['ClusterId']}.{ad['ProcId']}": ad["FetchworkState"] for ad in broker.query()}


def count(broker, state):
    return list(states(broker).values()).count(state)


def test_ten_jobs_of_one_user_are_eight_idle_and_two_blocked(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, MAX_IDLE_JOBS_PER_USER=8)
    ids = broker.submit([{"Cmd": "x"}] * 10, owner="alice")
    assert count(broker, "BLOCKED") == 10, "submission waits for the policy's pass"
    runner.run_pass()
    assert [states(broker)[job] for job in ids] == ["IDLE"] * 8 + ["BLOCKED"] * 2
    ad = broker.get(ids[8])
    assert ad["BlockedReason"] == "user alice has 8 idle jobs (MAX_IDLE_JOBS_PER_USER = 8)"
    assert ad["JobStatus"] == 1
    assert broker.claim(SLOT) is not None
    runner.run_pass()
    assert states(broker)[ids[8]] == "IDLE" and states(broker)[ids[9]] == "BLOCKED"


def test_no_slot_is_handed_a_blocked_job(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, MAX_IDLE_JOBS_PER_USER=3)
    broker.submit([{"Cmd": "x"}] * 5, owner="alice")
    runner.run_pass()
    claimed = [broker.claim(SLOT) for _ in range(4)]
    assert [ad is not None for ad in claimed] == [True, True, True, False]


def test_per_project_limits_count_every_user(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, MAX_IDLE_JOBS_PER_PROJECT=3)
    broker.submit([{"Cmd": "x", "AccountingGroup": "phys"}] * 2, owner="alice")
    broker.submit([{"Cmd": "x", "AccountingGroup": "phys"}] * 2, owner="bob")
    broker.submit([{"Cmd": "x"}] * 2, owner="carol")
    runner.run_pass()
    assert count(broker, "IDLE") == 5 and count(broker, "BLOCKED") == 1


def test_two_racing_claims_do_not_break_maxps(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, MAXPS_SOFT=72000, MAXPS_HARD=72000)
    broker.submit([{"Cmd": "x", "AllowedJobDuration": 40000}] * 2, owner="alice")
    runner.run_pass()
    assert count(broker, "IDLE") == 2, "each fits alone"
    assert broker.claim(SLOT) is not None
    assert broker.claim(SLOT) is None, "the second would make 80000 > 72000"


def test_between_soft_and_hard_a_job_takes_a_slot_nothing_else_can_use(redis_client,
                                                                      pool_name):
    broker, runner = pool(redis_client, pool_name, MAXPS_SOFT=72000, MAXPS_HARD=1080000)
    (first,) = broker.submit([{"Cmd": "x", "RequestCpus": 2, "AllowedJobDuration": 34948}],
                             owner="user1")
    runner.run_pass()
    assert broker.claim(SLOT)["ProcId"] == 0
    wide = broker.submit([{"Cmd": "x", "RequestCpus": 8, "AllowedJobDuration": 3600}],
                         owner="user1")[0]
    narrow = broker.submit([{"Cmd": "x", "RequestCpus": 1, "AllowedJobDuration": 1000}],
                           owner="user1")[0]
    runner.run_pass()
    assert states(broker)[wide] == "BLOCKED" and states(broker)[narrow] == "IDLE"
    reason = broker.get(wide)["BlockedReason"]
    assert "+ 28800 of this job" in reason and "> MAXPS_SOFT = 72000" in reason
    claimed = broker.claim(SLOT)
    assert f"{claimed['ClusterId']}.{claimed['ProcId']}" == narrow
    claimed = broker.claim(SLOT)
    assert claimed is not None, "no other job is eligible: the soft one may start"
    assert f"{claimed['ClusterId']}.{claimed['ProcId']}" == wide


def test_above_hard_a_job_never_starts(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, MAXPS_SOFT=1000, MAXPS_HARD=2000)
    broker.submit([{"Cmd": "x", "AllowedJobDuration": 3000}], owner="alice")
    runner.run_pass()
    assert broker.claim(SLOT) is None
    assert "MAXPS_HARD = 2000" in broker.query()[0]["BlockedReason"]


def test_max_walltime_refuses_the_submission(redis_client, pool_name):
    broker, _runner = pool(redis_client, pool_name, MAX_WALLTIME=432000)
    with pytest.raises(SubmitError, match="MAX_WALLTIME = 432000"):
        broker.submit([{"Cmd": "x"}, {"Cmd": "x", "AllowedJobDuration": 500000}])
    assert broker.query() == []


def test_with_every_knob_off_nothing_changes(redis_client, pool_name):
    broker, _runner = pool(redis_client, pool_name)
    broker.submit([{"Cmd": "x"}] * 3)
    assert count(broker, "IDLE") == 3
    service = BrokerService.from_config(broker, Config.load(environ={}))
    assert service.scheduling is None


def test_weights_reorder_the_idle_jobs(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, PRIORITY_RESOURCE_WEIGHT=1)
    broker.submit([{"Cmd": "x", "RequestCpus": 1}, {"Cmd": "x", "RequestCpus": 4}])
    runner.run_pass()
    claimed = broker.claim(SLOT)
    assert claimed["RequestCpus"] == 4 and claimed["FetchworkPriority"] == 4


def test_the_leader_runs_a_pass_when_a_job_changes(redis_client, pool_name):
    config = Config.load(environ={}).with_values(MAX_IDLE_JOBS_PER_USER=1,
                                                 POLICY_INTERVAL=3600)
    broker = Broker(redis_client, pool_name, config)
    service = BrokerService.from_config(broker, config)
    broker.submit([{"Cmd": "x"}] * 2, owner="alice")
    service.run_once()
    assert count(broker, "IDLE") == 1
    broker.claim(SLOT)
    service.run_once()
    assert count(broker, "IDLE") == 1 and count(broker, "BLOCKED") == 0


def test_a_job_past_its_walltime_is_stopped_and_fails(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, MAX_JOBS_PER_USER=10)
    (job,) = broker.submit([{"Cmd": "x", "AllowedJobDuration": 60}], owner="alice")
    runner.run_pass()
    ad = broker.claim(SLOT)
    token = ad["FetchworkClaim"]
    assert runner.run_pass().overrun == []
    assert runner.run_pass(now=time.time() + 61).overrun == [job]
    assert broker.get(job)["JobStatus"] == 3
    assert broker.renew(job, token) == "removed", "the execute side is told to stop it"
    assert broker.finish(job, token, "remove")
    (done,) = broker.history()
    assert done["FetchworkState"] == "FAILED"
    assert done["RemoveReason"] == "the job ran past its walltime (AllowedJobDuration) of 60 s"


def test_a_removal_while_running_still_ends_removed(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, MAX_JOBS_PER_USER=10)
    (job,) = broker.submit([{"Cmd": "x"}], owner="alice")
    runner.run_pass()
    ad = broker.claim(SLOT)
    broker.remove([job])
    assert broker.finish(job, ad["FetchworkClaim"], "remove")
    assert broker.history()[0]["FetchworkState"] == "REMOVED"


def test_with_the_policy_switched_off_blocked_jobs_are_released(redis_client, pool_name):
    broker, runner = pool(redis_client, pool_name, MAX_IDLE_JOBS_PER_USER=1)
    broker.submit([{"Cmd": "x"}] * 3, owner="alice")
    runner.run_pass()
    assert count(broker, "BLOCKED") == 2
    plain = Broker(redis_client, pool_name, Config.load(environ={}))
    service = BrokerService.from_config(plain, Config.load(environ={}))
    assert service.scheduling is None
    service.run_once()
    assert count(broker, "IDLE") == 3
    assert "BlockedReason" not in broker.get(f"{broker.query()[2]['ClusterId']}.2")


def test_a_job_a_submission_filter_admits_is_placed_by_the_policy(redis_client, pool_name,
                                                                   tmp_path):
    from tests.support.filterprogs import write_filter

    write_filter(tmp_path, "ok")
    conf = tmp_path / "site.conf"
    conf.write_text(f"SUBMIT_FILTER_NAMES = OK\nSUBMIT_FILTER_OK = {tmp_path}/ok\n"
                    "MAX_IDLE_JOBS_PER_USER = 1\n")
    config = Config.load(environ={"FETCHWORK_CONFIG": str(conf),
                                  "FETCHWORK_STATE_DIR": str(tmp_path / "state")})
    broker = Broker(redis_client, pool_name, config)
    service = BrokerService.from_config(broker, config)
    service.run_once()  # leads and publishes the filter summary
    broker.submit([{"Cmd": "x"}] * 2, owner="alice")
    assert count(broker, "VALIDATING") == 2
    service.run_once(scheduling_pass=False)
    assert count(broker, "BLOCKED") == 2, "admitted, they wait for the policy, not IDLE"
    service.run_once()
    assert count(broker, "IDLE") == 1 and count(broker, "BLOCKED") == 1
