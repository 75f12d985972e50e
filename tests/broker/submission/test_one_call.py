"""A submission of one batch is staged and queued by one script call (stage.lua with
queueing.lua), on a real Redis: what it leaves is what the two steps leave, a refused
one leaves nothing, one whose index entries need the second step still takes it, and
a call sent again after its reply was lost queues nothing twice."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.broker.store import calls, codec, scripts
from fetchwork.broker.submission import submitter
from fetchwork.config.loader import Config
from fetchwork.errors import SubmitError
from tests.support.rules import publish_rules

pytestmark = pytest.mark.timeout(60)

SLOT = {"Name": "slot1@once", "Cpus": 4, "Memory": 1024}


@pytest.fixture
def broker(redis_client, pool_name) -> Broker:
    config = Config.load(environ={})
    publish_rules(redis_client, pool_name, config)
    return Broker(redis_client, pool_name, config)


def script_calls(client: redis.Redis) -> dict[str, int]:
    """How many EVALSHA and MULTI commands the server has run (its command statistics)."""
    stats = client.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0)
            for name in ("evalsha", "multi")}


def events_naming(broker: Broker, job: str) -> list[dict[str, str]]:
    return [fields for _id, fields in broker.store.events("0", count=10_000)
            if fields.get("job") == job]


def test_one_batch_takes_one_script_call_and_no_transaction(broker):
    broker.submit([{"Cmd": "warm"}])  # the scripts are loaded
    before = script_calls(broker.client)
    jobs = broker.submit([{"Cmd": "/bin/true", "N": n} for n in range(3)])
    after = script_calls(broker.client)
    assert after["evalsha"] - before["evalsha"] == 1
    assert after["multi"] == before["multi"]
    client, keys = broker.client, broker.keys
    assert [codec.text(job) for job in client.zrange(keys.idle, 0, -1)][-3:] == jobs
    assert [codec.text(job) for job in client.zrange(keys.queue, 0, -1)][-3:] == jobs
    assert [data["FetchworkState"] for data in broker.job_data(jobs)] == ["IDLE"] * 3
    # One entry names the three jobs, as submit.lua writes it.
    assert [events_naming(broker, job)[0]["state"] for job in jobs] == ["IDLE"] * 3
    assert [broker.claim(SLOT)["Cmd"] for _ in range(2)] == ["warm", "/bin/true"]


def test_two_batches_still_stage_then_queue_in_one_transaction(broker):
    broker.submit([{"Cmd": "warm"}])
    before = script_calls(broker.client)
    jobs = broker.submit([{"Cmd": "x", "N": n} for n in range(submitter.BATCH + 1)])
    after = script_calls(broker.client)
    # Two stage.lua calls, then one MULTI with two submit.lua calls.
    assert after["evalsha"] - before["evalsha"] == 4
    assert after["multi"] - before["multi"] == 1
    assert broker.client.zcard(broker.keys.idle) == len(jobs) + 1


@pytest.mark.parametrize(("extra", "index"), [
    ({"PeriodicRemove": {"$expr": "JobStatus == 5"}}, "periodic"),
    ({"UserLog": "/tmp/once.log"}, "userlog"),
])
def test_a_job_whose_queueing_writes_more_takes_the_two_steps(broker, extra, index):
    broker.submit([{"Cmd": "warm"}])
    before = script_calls(broker.client)
    (job,) = broker.submit([{"Cmd": "x", **extra}])
    after = script_calls(broker.client)
    assert after["multi"] - before["multi"] == 1
    keys, client = broker.keys, broker.client
    if index == "periodic":
        assert client.zscore(keys.periodic, job) is not None
    else:
        assert client.get(keys.userlog_used) is not None
    assert broker.job_data([job])[0]["FetchworkState"] == "IDLE"


def test_a_dependent_job_takes_the_two_steps_and_waits_blocked(broker):
    (first,) = broker.submit([{"Cmd": "a"}])
    before = script_calls(broker.client)
    (second,) = broker.submit([{"Cmd": "b", "Depends": first}])
    after = script_calls(broker.client)
    assert after["multi"] - before["multi"] == 1
    assert broker.job_data([second])[0]["FetchworkState"] == "BLOCKED"
    assert broker.client.sismember(broker.keys.dep_waiting, second)


def test_a_refused_one_batch_submission_leaves_the_owners_jobs_as_they_were(broker):
    cluster = broker.next_cluster()
    (job,) = broker.submit([{"Cmd": "a"}], cluster_id=cluster)
    entries = broker.client.xlen(broker.keys.events)
    with pytest.raises(SubmitError, match="already holds jobs of another submission"):
        broker.submit([{"Cmd": "b"}], cluster_id=cluster)
    assert broker.client.xlen(broker.keys.events) == entries
    assert broker.get(job)["Cmd"] == "a"
    assert broker.select([str(cluster)]) == [job]


def test_a_call_sent_again_queues_nothing_twice_and_leaves_a_claimed_job_alone(broker):
    store = broker.store
    cluster = broker.next_cluster()
    job = f"{cluster}.0"
    submission = broker._submitter  # the calls a one-job submission makes, made by hand

    def call() -> list[Any]:
        pipe = store.client.pipeline(transaction=False)
        calls.stage(store, pipe, cluster=cluster, nonce="n1", job_ids=[job],
                    runs=runs, queue=queue, autoclusters=reps)
        return list(pipe.execute()[0])

    runs, queue, reps = _one_job_arguments(submission, cluster)
    first = call()
    assert first[0] == 1 and int(first[2]) == 1
    claimed = broker.claim(SLOT)
    assert claimed is not None and claimed["ProcId"] == 0
    entries = broker.client.xlen(broker.keys.events)
    again = call()
    assert int(again[2]) == 0
    assert broker.client.xlen(broker.keys.events) == entries
    assert broker.get(job)["FetchworkState"] == "RUNNING"
    assert broker.client.zscore(broker.keys.idle, job) is None


def test_submit_lua_sent_again_queues_nothing_twice(broker):
    store = broker.store
    cluster = broker.next_cluster()
    job = f"{cluster}.0"
    runs, queue, reps = _one_job_arguments(broker._submitter, cluster)

    def run(name: str) -> Any:
        pipe = store.client.pipeline(transaction=False)
        if name == "stage":
            calls.stage(store, pipe, cluster=cluster, nonce="n1", job_ids=[job], runs=runs)
        else:
            calls.submit(store, pipe, batch=queue, mode="", autoclusters=reps)
        return pipe.execute()[0]

    run("stage")
    assert run("submit") == 1
    entries = broker.client.xlen(broker.keys.events)
    assert broker.claim(SLOT)["ProcId"] == 0
    assert run("submit") == 0
    assert broker.client.xlen(broker.keys.events) == entries + 1  # the claim's own
    assert broker.client.zscore(broker.keys.idle, job) is None


def _one_job_arguments(submission: submitter.Submitter,
                       cluster: int) -> tuple[bytes, bytes, bytes]:
    """stage.lua's runs and the queue arguments for a one-job cluster, as submit() makes
    them (its own steps, with the job's identity for `cluster`)."""
    from fetchwork.broker.store.jobads import identity, place
    from fetchwork.broker.submission.shape import SubmissionShape

    store = submission.store
    shape = SubmissionShape(600, False)
    jobs = shape.prepare([{"Cmd": "x"}], 1_700_000_000)
    seq = int(store.client.incr(store.keys.seq_counter))
    placed = [(place(jobs[0], identity(store.pool, cluster, 0, 1_700_000_000, seq,
                                       jobs[0].prio, "me", jobs[0].ad_owner, "me")), seq)]
    runs = codec.pack_for_lua(shape.fields([job for job, _seq in placed]).runs(0, 1))
    queue, reps = submission._queue_args(placed, shape.groups)
    return runs, queue, reps


@contextmanager
def reply_lost(first_only: bool = True, check_fails: bool = False) -> Iterator[list[int]]:
    """Pipelines whose stage.lua call runs on the server and whose reply is then lost
    (a ConnectionError, as a connection dropped after sending); with `check_fails`, the
    submitter's look at the queue that follows fails too."""
    real = redis.client.Pipeline.execute
    lost = [0]
    stage_sha = scripts.sha("stage")

    def execute(self: redis.client.Pipeline, raise_on_error: bool = True) -> Any:
        names = [str(args[1]) if len(args) > 1 else "" for args, _options in self.command_stack]
        if stage_sha in names and (not first_only or lost[0] == 0):
            real(self, raise_on_error)
            lost[0] += 1
            raise redis.ConnectionError("connection lost after the call was sent")
        if check_fails and lost[0] and any(str(args[0]).upper() == "ZSCORE"
                                           for args, _options in self.command_stack):
            self.reset()
            raise redis.ConnectionError("server gone")
        return real(self, raise_on_error)

    redis.client.Pipeline.execute = execute  # type: ignore[method-assign]
    try:
        yield lost
    finally:
        redis.client.Pipeline.execute = real  # type: ignore[method-assign]


def test_a_lost_reply_of_a_call_that_ran_is_a_submission_that_landed(broker):
    broker.submit([{"Cmd": "warm"}])
    entries = broker.client.xlen(broker.keys.events)
    with reply_lost() as lost:
        (job,) = broker.submit([{"Cmd": "landed"}])
    assert lost == [1]
    assert broker.get(job)["Cmd"] == "landed"
    assert broker.job_data([job])[0]["FetchworkState"] == "IDLE"
    assert broker.client.xlen(broker.keys.events) == entries + 1


def test_a_lost_reply_that_cannot_be_checked_deletes_nothing_and_says_so(broker):
    broker.submit([{"Cmd": "warm"}])
    with reply_lost(check_fails=True), pytest.raises(SubmitError) as failed:
        broker.submit([{"Cmd": "unknown"}])
    message = str(failed.value)
    assert "got no answer" in message and "cannot be told now" in message
    job = message.split("look for job ", 1)[1].split()[0]
    # The call ran: the job is queued, and nothing of it was deleted.
    assert broker.get(job)["Cmd"] == "unknown"
    assert broker.client.zscore(broker.keys.queue, job) is not None
