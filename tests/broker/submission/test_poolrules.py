"""The pool's rules decide a submission, never the submitter's configuration: on a real
Redis, with the rules published as the pool's leader publishes them, stage.lua and
submit.lua refuse, block or hold back jobs; with none published every new job waits
for the leader, which admits it against its own rules."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fetchwork.broker.client import Broker
from fetchwork.broker.filters.gate import Summary
from fetchwork.broker.leader.publish import pool_rules
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.store import calls, codec, poolrules
from fetchwork.config.loader import Config
from fetchwork.errors import EditError, SubmitError
from tests.support.rules import publish_rules

pytestmark = pytest.mark.timeout(60)

SLOT = {"Name": "slot1@rules", "Cpus": 4, "Memory": 1024}


def config(**knobs: object) -> Config:
    return Config.load(environ={}).with_values(**knobs)


def client_broker(redis_client, pool_name, **knobs: object) -> Broker:
    """A submitter whose own configuration says `knobs`."""
    return Broker(redis_client, pool_name, config(**knobs))


def nothing_queued(broker: Broker) -> None:
    keys = broker.keys
    assert broker.client.zcard(keys.queue) == 0 and broker.client.zcard(keys.idle) == 0
    assert broker.client.xlen(keys.events) == 0 if broker.client.exists(keys.events) else True
    assert not list(broker.client.scan_iter(match=keys.job("*")))
    assert not list(broker.client.scan_iter(match=keys.cluster("*")))
    assert broker.client.hlen(keys.clusters) == 0


def states(broker: Broker, jobs: list[str]) -> list[str]:
    return [data["FetchworkState"] for data in broker.job_data(jobs)]


# -- MAX_WALLTIME and DEFAULT_JOB_WALLTIME: the pool's, not the client's ----------------


def test_a_client_without_a_cap_is_refused_by_the_pools_max_walltime(redis_client, pool_name):
    publish_rules(redis_client, pool_name, config(MAX_WALLTIME=100))
    broker = client_broker(redis_client, pool_name, MAX_WALLTIME=0)
    with pytest.raises(SubmitError) as refused:
        broker.submit([{"Cmd": "x", "AllowedJobDuration": 50},
                       {"Cmd": "x", "AllowedJobDuration": 5000}])
    message = str(refused.value)
    assert "the pool refused the submission to cluster 1" in message
    assert ("job 1.1: the job asks for 5000 s of wall-clock time (AllowedJobDuration), "
            "more than the pool's MAX_WALLTIME = 100 s; nothing was queued") in message
    nothing_queued(broker)


def test_a_job_without_a_walltime_meets_the_pools_default(redis_client, pool_name):
    publish_rules(redis_client, pool_name, config(MAX_WALLTIME=60, DEFAULT_JOB_WALLTIME=3600))
    broker = client_broker(redis_client, pool_name, DEFAULT_JOB_WALLTIME=10)
    with pytest.raises(SubmitError, match="3600 s of wall-clock time \\(the pool's "
                                          "DEFAULT_JOB_WALLTIME\\)"):
        broker.submit([{"Cmd": "x"}])
    nothing_queued(broker)


def test_a_refusal_in_a_later_batch_leaves_nothing_of_the_earlier_ones(redis_client,
                                                                       pool_name):
    publish_rules(redis_client, pool_name, config(MAX_WALLTIME=100))
    broker = client_broker(redis_client, pool_name)
    ads = [{"Cmd": "x", "AllowedJobDuration": 10}] * 2500 + [{"Cmd": "x",
                                                               "AllowedJobDuration": 101}]
    with pytest.raises(SubmitError, match="job 1.2500: .*MAX_WALLTIME = 100 s"):
        broker.submit(ads)
    nothing_queued(broker)


def test_jobs_within_the_cap_are_queued(redis_client, pool_name):
    publish_rules(redis_client, pool_name, config(MAX_WALLTIME=100))
    broker = client_broker(redis_client, pool_name)
    jobs = broker.submit([{"Cmd": "x", "AllowedJobDuration": 100}] * 3)
    assert states(broker, jobs) == ["IDLE"] * 3


# -- SUBMIT_MAX_JOB_ATTRS ----------------------------------------------------------------


def test_the_pools_attribute_cap_refuses_a_job_with_more(redis_client, pool_name):
    publish_rules(redis_client, pool_name, config(SUBMIT_MAX_JOB_ATTRS=3))
    broker = client_broker(redis_client, pool_name, SUBMIT_MAX_JOB_ATTRS=100000)
    [job] = broker.submit([{"Cmd": "x", "A": 1, "B": 2}])
    assert states(broker, [job]) == ["IDLE"]
    with pytest.raises(SubmitError, match="job 2.0: the job has 4 attributes, more than the "
                                          "pool's SUBMIT_MAX_JOB_ATTRS = 3; nothing was queued"):
        broker.submit([{"Cmd": "x", "A": 1, "B": 2, "C": 3}])


def test_a_job_differing_only_in_its_own_fields_is_counted_alone(redis_client, pool_name):
    publish_rules(redis_client, pool_name, config(SUBMIT_MAX_JOB_ATTRS=3))
    broker = client_broker(redis_client, pool_name)
    with pytest.raises(SubmitError, match="job 1.2: the job has 4 attributes"):
        broker.submit([{"Cmd": "x", "A": 1}, {"Cmd": "x", "A": 1},
                       {"Cmd": "x", "A": 1, "B": 2, "C": 3}])


# -- scheduling limits: the pool's decide BLOCKED ------------------------------------------


def test_under_the_pools_limits_jobs_start_blocked_whatever_the_client_says(redis_client,
                                                                          pool_name):
    publish_rules(redis_client, pool_name, config(MAX_IDLE_JOBS_PER_USER=1))
    broker = client_broker(redis_client, pool_name, MAX_IDLE_JOBS_PER_USER=0)
    jobs = broker.submit([{"Cmd": "x"}] * 3, owner="alice")
    held = broker.submit([{"Cmd": "x", "hold": True}], owner="alice")
    assert states(broker, jobs) == ["BLOCKED"] * 3 and states(broker, held) == ["HELD"]
    reasons = {data["BlockedReason"] for data in broker.job_data(jobs)}
    assert reasons == {"waiting for the scheduling policy's first look"}
    assert broker.claim(SLOT) is None
    # The leader's policy pass places them by its own configuration.
    pool_config = config(MAX_IDLE_JOBS_PER_USER=1)
    BrokerService.from_config(Broker(redis_client, pool_name, pool_config),
                              pool_config).run_once()
    assert sorted(states(broker, jobs)) == ["BLOCKED", "BLOCKED", "IDLE"]


def test_without_limits_a_client_that_sets_some_blocks_nothing(redis_client, pool_name):
    broker = client_broker(redis_client, pool_name, MAX_IDLE_JOBS_PER_USER=1,
                           MAX_WALLTIME=10)
    jobs = broker.submit([{"Cmd": "x", "AllowedJobDuration": 50}] * 2, owner="alice")
    assert states(broker, jobs) == ["IDLE", "IDLE"]


# -- defaults and caps of the pool ------------------------------------------------------


def test_a_job_gets_the_pools_defaults_not_the_clients(redis_client, pool_name):
    publish_rules(redis_client, pool_name, config(JOB_DEFAULT_LEASE_DURATION=77,
                                                  DEFAULT_JOB_EXCLUSIVE=True))
    broker = client_broker(redis_client, pool_name, JOB_DEFAULT_LEASE_DURATION=5,
                           DEFAULT_JOB_EXCLUSIVE=False)
    [job] = broker.submit([{"Cmd": "x"}])
    [data] = broker.job_data([job])
    assert data["JobLeaseDuration"] == 77 and data["Exclusive"] is True


# -- nothing published: every new job waits for the leader ------------------------------


def unpublished(redis_client, broker: Broker) -> None:
    redis_client.delete(broker.keys.settings)


def test_with_no_published_rules_new_jobs_wait_for_the_leader(redis_client, pool_name):
    broker = client_broker(redis_client, pool_name)
    unpublished(redis_client, broker)
    submitted = broker.submit_cluster([{"Cmd": "x"}] * 3 + [{"Cmd": "y"}])
    assert submitted.validating and submitted.unpublished
    assert states(broker, submitted.job_ids) == ["VALIDATING"] * 4
    assert broker.claim(SLOT) is None
    assert broker.pool_rules() is None
    # The leader publishes, then admits them under its rules.
    BrokerService.from_config(broker, Config.load(environ={})).run_once()
    assert broker.pool_rules() is not None
    assert states(broker, submitted.job_ids) == ["IDLE"] * 4
    assert broker.claim(SLOT) is not None


def test_the_leader_admits_a_waiting_job_only_within_its_rules(redis_client, pool_name):
    broker = client_broker(redis_client, pool_name, MAX_WALLTIME=0)
    unpublished(redis_client, broker)
    ok, long, wide = broker.submit([{"Cmd": "x", "AllowedJobDuration": 50},
                                    {"Cmd": "x", "AllowedJobDuration": 5000},
                                    {"Cmd": "x", "AllowedJobDuration": 50,
                                     **{f"A{n}": n for n in range(4)}}])
    pool_config = config(MAX_WALLTIME=100, SUBMIT_MAX_JOB_ATTRS=4, MAX_JOBS_PER_USER=10,
                         DEFAULT_JOB_EXCLUSIVE=True)
    BrokerService.from_config(Broker(redis_client, pool_name, pool_config),
                              pool_config).run_once()
    assert broker.verdicts([ok, long, wide]) == {
        ok: None,
        long: "refused: the job asks for 5000 s of wall-clock time (AllowedJobDuration), "
              "more than the pool's MAX_WALLTIME = 100 s",
        wide: "refused: the job has 6 attributes, more than the pool's "
              "SUBMIT_MAX_JOB_ATTRS = 4"}
    [data] = broker.job_data([ok])
    assert data["Exclusive"] is True and data["FetchworkState"] in ("BLOCKED", "IDLE")


def test_a_job_queued_as_if_unfiltered_after_filters_appeared_still_waits(redis_client,
                                                                          pool_name):
    """Rules published between stage.lua and submit.lua: submit.lua makes the batch wait
    whatever the caller says, and the leader admits the job from there."""
    broker = client_broker(redis_client, pool_name)
    store = broker.store
    cluster = broker.next_cluster()
    seq = int(redis_client.incr(store.keys.seq_counter))
    job = f"{cluster}.0"
    ad = {"Cmd": "x", "ClusterId": cluster, "ProcId": 0, "FetchworkState": "IDLE",
          "JobStatus": 1, "FetchworkOrder": seq, "QDate": 1, "Owner": "alice"}
    pipe = redis_client.pipeline(transaction=False)
    calls.stage(store, pipe, cluster=cluster, nonce="n", job_ids=[job],
                runs=codec.pack_for_lua([[codec.fields_of(ad), [[]], False]]))
    assert [codec.text(mode) for _count, mode in pipe.execute()] == [""]
    unpublished(redis_client, broker)  # as if the pool now fails closed
    pipe = redis_client.pipeline(transaction=True)
    calls.submit(store, pipe, batch=codec.pack_for_lua([[job, seq, str(seq), False, False, ""]]),
                 mode="", autoclusters=codec.pack_for_lua([]))
    pipe.execute()
    assert redis_client.zscore(store.keys.validating, job) is not None
    assert redis_client.zscore(store.keys.idle, job) is None
    BrokerService.from_config(broker, Config.load(environ={})).run_once()
    assert states(broker, [job]) == ["IDLE"]
    assert redis_client.zscore(store.keys.validating, job) is None


# -- publication --------------------------------------------------------------------------


def test_a_changed_configuration_takes_effect_when_the_leader_publishes_it(redis_client,
                                                                          pool_name):
    broker = client_broker(redis_client, pool_name)
    first = publish_rules(redis_client, pool_name, config(MAX_WALLTIME=0))
    assert publish_rules(redis_client, pool_name, config(MAX_WALLTIME=0)) == first
    broker.submit([{"Cmd": "x", "AllowedJobDuration": 5000}])
    assert publish_rules(redis_client, pool_name, config(MAX_WALLTIME=100)) == first + 1
    published = broker.pool_rules()
    assert published is not None and published.rules.max_walltime_s == 100
    assert published.version == first + 1 and published.published_by == "tests"
    with pytest.raises(SubmitError, match="MAX_WALLTIME = 100 s"):
        broker.submit([{"Cmd": "x", "AllowedJobDuration": 5000}])


def test_the_leader_publishes_its_rules_on_its_tick(redis_client, pool_name):
    pool_config = config(MAX_WALLTIME=100, BROKER_REPLICA_NAME="leader-a")
    broker = Broker(redis_client, pool_name, pool_config)
    unpublished(redis_client, broker)
    service = BrokerService.from_config(broker, pool_config)
    assert service.run_once().leader
    published = broker.pool_rules()
    assert published is not None and published.published_by == "leader-a"
    assert published.rules.max_walltime_s == 100
    assert redis_client.hget(broker.keys.filters, "submit") == b""


def test_a_new_leader_with_another_configuration_publishes_a_new_version(redis_client,
                                                                        pool_name):
    submitter = client_broker(redis_client, pool_name, MAX_WALLTIME=0)
    before = BrokerService.from_config(Broker(redis_client, pool_name, config()), config())
    before.run_once()
    first = submitter.pool_rules()
    submitter.submit([{"Cmd": "x", "AllowedJobDuration": 5000}])
    before.resign()
    capped = config(MAX_WALLTIME=100, BROKER_REPLICA_NAME="after")
    after = BrokerService.from_config(Broker(redis_client, pool_name, capped), capped)
    assert after.run_once().leader
    second = submitter.pool_rules()
    assert first is not None and second is not None
    assert second.version == first.version + 1 and second.published_by == "after"
    assert second.knobs["MAX_WALLTIME"] == "100"
    with pytest.raises(SubmitError, match="the pool's MAX_WALLTIME = 100 s"):
        submitter.submit([{"Cmd": "x", "AllowedJobDuration": 5000}])
    # The same rules again are no new version.
    after.run_once()
    again = submitter.pool_rules()
    assert again is not None and again.version == second.version


# -- the submit script and the leader's admission decide alike ---------------------------

_WALLTIMES = st.one_of(st.none(), st.integers(-10, 400), st.floats(-1, 400, allow_nan=False),
                       st.booleans(), st.text(max_size=3),
                       st.builds(lambda text: {"$expr": text}, st.sampled_from(["60*2", "x"])))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(walltime=_WALLTIMES, extra=st.integers(0, 6), cap=st.sampled_from([0, 100, 300]),
       default_s=st.sampled_from([50, 200]), spelling=st.sampled_from(
           ["AllowedJobDuration", "allowedjobduration", "ALLOWEDJOBDURATION"]))
def test_stage_refuses_exactly_what_the_leaders_admission_refuses(
        redis_client, pool_name, walltime, extra, cap, default_s, spelling):
    ad = {"Cmd": "x", **{f"A{n}": n for n in range(extra)}}
    if walltime is not None:
        ad[spelling] = walltime
    broker = client_broker(redis_client, pool_name)
    # The job as stored, under rules that refuse nothing; the leader's decision on it.
    publish_rules(redis_client, pool_name, config())
    [job] = broker.submit([ad])
    [stored] = broker.job_data([job])
    broker.remove([job])
    strict = config(MAX_WALLTIME=cap, DEFAULT_JOB_WALLTIME=default_s, SUBMIT_MAX_JOB_ATTRS=4)
    expected = poolrules.refusal(stored, pool_rules(strict, Summary()))
    # The submit scripts' decision under the strict rules.
    publish_rules(redis_client, pool_name, strict)
    try:
        broker.submit([ad])
        refused = None
    except SubmitError as exc:
        refused = str(exc)
    if expected is None:
        assert refused is None
    else:
        assert refused is not None and expected in refused


# -- an edit meets the pool's MAX_WALLTIME as a submission does ---------------------------


def test_an_edit_past_the_pools_max_walltime_is_refused_and_changes_nothing(redis_client,
                                                                          pool_name):
    publish_rules(redis_client, pool_name, config(MAX_WALLTIME=100))
    broker = client_broker(redis_client, pool_name, MAX_WALLTIME=0)
    jobs = broker.submit([{"Cmd": "x", "AllowedJobDuration": 50}] * 2)
    with pytest.raises(EditError, match="AllowedJobDuration 5000 s is more than the pool's "
                                        "MAX_WALLTIME = 100 s; no job was edited"):
        broker.edit(jobs, "AllowedJobDuration", "5000")
    assert [data["AllowedJobDuration"] for data in broker.job_data(jobs)] == [50, 50]
    assert broker.edit(jobs, "allowedjobduration", "100") == jobs


def test_an_edit_of_the_walltime_waits_for_published_rules(redis_client, pool_name):
    broker = client_broker(redis_client, pool_name)
    [job] = broker.submit([{"Cmd": "x", "AllowedJobDuration": 50}])
    unpublished(redis_client, broker)
    with pytest.raises(EditError, match="has not published the pool's rules yet"):
        broker.edit([job], "AllowedJobDuration", "60")
    assert broker.edit([job], "MyTag", '"x"') == [job]
