"""Many claimers at once (threads and processes) never get one job twice; long-poll claims."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
import redis

from fetchwork.broker.claim.claimer import WAKE_COUNT
from fetchwork.broker.client import Broker
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from tests.support.rules import publish_rules
from tests.support.waiting import wait_until

JOBS = 2000
PROCESSES = 3
THREADS_PER_PROCESS = 2
LOCAL_THREADS = 4

# A claiming process: waits for the go signal, then claims with a few threads
# until the queue is empty, and prints one JSON line per claimed job.
CLAIMER = r'''
import json, sys, threading
import redis
from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config

url, pool, go_key, ready_key, name, threads = sys.argv[1:7]
client = redis.Redis.from_url(url)
broker = Broker(client, pool, Config.load(environ={}))
lock = threading.Lock()
claimed = []

def work(index):
    slot = {"Name": f"slot{index}@{name}", "Memory": 1024}
    while True:
        ad = broker.claim(slot)
        if ad is None:
            return
        with lock:
            job = f"{ad['ClusterId']}.{ad['ProcId']}"
            claimed.append((job, ad["FetchworkClaim"], slot["Name"]))

client.incr(ready_key)
client.blpop([go_key], timeout=60)
workers = [threading.Thread(target=work, args=(i,)) for i in range(int(threads))]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
for job, token, slot in claimed:
    print(json.dumps([job, token, slot]))
'''


@pytest.fixture(scope="module")
def stress(redis_server, tmp_path_factory):
    """Submit JOBS jobs, then claim them from threads here and in PROCESSES processes."""
    url = redis_server.url
    pool = "stress" + str(time.time_ns())
    client = redis.Redis.from_url(url)
    broker = Broker(client, pool, Config.load(environ={}))
    publish_rules(client, pool)  # the pool's leader has run
    ids = broker.submit([{"Cmd": "/bin/true", "N": n, "JobPrio": n % 3} for n in range(JOBS)])
    script = tmp_path_factory.mktemp("claimer") / "claimer.py"
    script.write_text(CLAIMER)
    go_key, ready_key = f"test:{pool}:go", f"test:{pool}:ready"
    processes = [subprocess.Popen(
        [sys.executable, str(script), url, pool, go_key, ready_key, f"p{i}",
         str(THREADS_PER_PROCESS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(PROCESSES)]
    try:
        wait_until(lambda: int(client.get(ready_key) or 0) == PROCESSES, timeout_s=60,
                   fail_if=lambda: [p.returncode for p in processes if p.poll() is not None],
                   what="claimer processes ready")
        local: list[tuple[str, str, str]] = []
        lock = threading.Lock()

        def work(index: int) -> None:
            slot = {"Name": f"slot{index}@local", "Memory": 1024}
            while (ad := broker.claim(slot)) is not None:
                with lock:
                    local.append((f"{ad['ClusterId']}.{ad['ProcId']}", ad["FetchworkClaim"],
                                  slot["Name"]))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(LOCAL_THREADS)]
        client.rpush(go_key, *["go"] * PROCESSES)
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        remote: list[tuple[str, str, str]] = []
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            remote += [tuple(json.loads(line)) for line in out.splitlines()]
        elapsed_s = time.monotonic() - started
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return {"broker": broker, "ids": ids, "local": local, "remote": remote,
            "elapsed_s": elapsed_s}


def test_every_job_claimed_exactly_once(stress):
    claims = Counter(job for job, _token, _slot in stress["local"] + stress["remote"])
    assert [job for job, n in claims.items() if n > 1] == []
    assert set(claims) == set(stress["ids"])


def test_both_threads_and_processes_took_part(stress):
    assert stress["local"] and stress["remote"]
    assert len({slot.split("@")[1] for _job, _token, slot in stress["remote"]}) > 1


def test_the_queue_agrees_with_the_claimers(stress):
    broker = stress["broker"]
    assert broker.client.zcard(broker.keys.idle) == 0
    assert broker.client.zcard(broker.keys.running) == JOBS
    by_job = {job: (token, slot) for job, token, slot in stress["local"] + stress["remote"]}
    for ad in broker.query("ProcId % 97 == 0"):
        job = f"{ad['ClusterId']}.{ad['ProcId']}"
        assert ad["JobStatus"] == 2 and ad["NumJobMatches"] == 1
        assert (ad["FetchworkClaim"], ad["RemoteHost"]) == by_job[job]


def test_claim_events_match_claims(stress):
    broker = stress["broker"]
    claims = [f for _id, f in broker.events("0-0", count=10 * JOBS) if f["type"] == "claim"]
    assert len(claims) == JOBS


# -- long poll ---------------------------------------------------------------------------

SLOT = parse_ad('Name = "slot1@poll"\nMemory = 512\n')


@pytest.fixture
def poller(redis_url, pool_name):
    """A broker on its own named connection, so the test can see it blocked in XREAD."""
    name = f"poll-{pool_name}"
    client = redis.Redis.from_url(redis_url, client_name=name)
    yield Broker(client, pool_name, Config.load(environ={})), name
    client.close()


def blocked(redis_client, name: str) -> bool:
    return any(entry.get("name") == name and "b" in entry.get("flags", "")
               for entry in redis_client.client_list())


def start_claim(broker, wait_s):
    result: dict[str, object] = {}

    def run() -> None:
        started = time.monotonic()
        result["ad"] = broker.claim(SLOT, wait_s=wait_s)
        result["waited_s"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_waiting_claim_wakes_for_a_new_job(poller, redis_client, pool_name):
    broker, name = poller
    submitter = Broker(redis_client, pool_name, Config.load(environ={}))
    thread, result = start_claim(broker, wait_s=60)
    wait_until(lambda: blocked(redis_client, name), timeout_s=30, what="claim blocked in XREAD")
    submitted_at = time.monotonic()
    (job,) = submitter.submit([{"Cmd": "x"}])
    thread.join(timeout=30)
    assert not thread.is_alive()
    ad = result["ad"]
    assert ad is not None and f"{ad['ClusterId']}.{ad['ProcId']}" == job
    assert time.monotonic() - submitted_at < 10


def test_waiting_claim_reads_past_a_burst_then_wakes_for_a_lone_job(poller, redis_client,
                                                                   pool_name):
    # More events than one wake-up reads (jobs it cannot run), then one job it can:
    # the claim reads on past the burst, waits again, and the lone job's event alone
    # wakes it.
    broker, name = poller
    submitter = Broker(redis_client, pool_name, Config.load(environ={}))
    thread, result = start_claim(broker, wait_s=60)
    wait_until(lambda: blocked(redis_client, name), timeout_s=30, what="claim blocked in XREAD")
    never = {"Cmd": "x", "Requirements": {"$expr": "TARGET.Memory > 100000"}}
    submitter.submit([never] * (WAKE_COUNT + 20))
    idle = submitter.keys.idle
    wait_until(lambda: blocked(redis_client, name) and redis_client.zcard(idle) > WAKE_COUNT,
               timeout_s=30, what="claim waiting again after the burst")
    (job,) = submitter.submit([{"Cmd": "x"}])
    thread.join(timeout=30)
    assert not thread.is_alive()
    ad = result["ad"]
    assert ad is not None and f"{ad['ClusterId']}.{ad['ProcId']}" == job


def test_waiting_claim_ignores_jobs_it_cannot_run(poller, redis_client, pool_name):
    broker, name = poller
    submitter = Broker(redis_client, pool_name, Config.load(environ={}))
    thread, result = start_claim(broker, wait_s=1.5)
    wait_until(lambda: blocked(redis_client, name), timeout_s=30, what="claim blocked in XREAD")
    submitter.submit([{"Cmd": "x", "Requirements": {"$expr": "TARGET.Memory > 100000"}}])
    thread.join(timeout=30)
    assert result["ad"] is None
    assert result["waited_s"] >= 1.4


def test_waiting_claim_gives_up_at_its_deadline(poller):
    broker, _name = poller
    started = time.monotonic()
    assert broker.claim(SLOT, wait_s=0.3) is None
    assert 0.25 <= time.monotonic() - started < 10


def test_waiting_claim_takes_an_existing_job_at_once(poller, redis_client, pool_name):
    broker, _name = poller
    Broker(redis_client, pool_name, Config.load(environ={})).submit([{"Cmd": "x"}])
    started = time.monotonic()
    assert broker.claim(SLOT, wait_s=30) is not None
    assert time.monotonic() - started < 10


def test_claims_rejects_and_finishes_racing_never_share_a_job(redis_client, pool_name):
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    ids = broker.submit([{"Cmd": "x", "JobPrio": n % 2} for n in range(400)])
    finished: list[str] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        slot = {"Name": f"slot{index}@race", "Memory": 1}
        count = 0
        while (ad := broker.claim(slot)) is not None:
            job, token = f"{ad['ClusterId']}.{ad['ProcId']}", ad["FetchworkClaim"]
            count += 1
            if count % 3 == 0:
                assert broker.reject(job, token)
            else:
                assert broker.finish(job, token, "exit", {"ExitCode": 0})
                with lock:
                    finished.append(job)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(finished) == sorted(ids)
    holders: Counter[str] = Counter()
    for _id, event in broker.events("0-0", count=100_000):
        if event["type"] == "claim":
            holders[event["job"]] += 1
            assert holders[event["job"]] == 1, f"job {event['job']} claimed twice at once"
        elif event["type"] in ("reject", "finish"):
            holders[event["job"]] -= 1
    assert set(holders.values()) == {0}
    assert len(broker.history()) == len(ids)
