"""Several users, many slots racing, limits set: the policy holds at every moment.

Slot threads claim and finish jobs through the broker API while a broker
service leads and runs policy passes. Afterwards the event stream, which
records every transition in order, is replayed: at no event does a user have
more idle jobs than MAX_IDLE_JOBS_PER_USER, more running and idle jobs than
MAX_JOBS_PER_USER, or running jobs whose remaining PS passes MAXPS_HARD.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.broker.store import codec, eventbatch
from fetchwork.config.loader import Config
from tests.support.rules import publish_rules
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

USERS = ("alice", "bob", "carol")
JOBS_PER_USER = 12
SLOTS = 6
MAX_IDLE, MAX_JOBS, SOFT, HARD = 2, 4, 300, 400
WALLTIME_S = 100


def slot_loop(broker: Broker, name: str, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    slot = {"Name": name, "Cpus": 2, "Memory": 1024}
    while not stop.is_set():
        ad = broker.claim(slot, wait_s=0.2)
        if ad is None:
            continue
        job = f"{ad['ClusterId']}.{ad['ProcId']}"
        stop.wait(rng.uniform(0.0, 0.03))  # the job's run
        broker.finish(job, ad["FetchworkClaim"], "exit")


def replay(broker: Broker, owners: dict[str, str], sizes: dict[str, int]) -> list[str]:
    """Every moment a limit was broken, from the event stream."""
    state: dict[str, str] = {}
    started_ms: dict[str, int] = {}
    idle: Counter[str] = Counter()
    running: dict[str, set[str]] = defaultdict(set)
    broken = []
    entries = [(codec.text(entry_id), {codec.text(k): codec.text(v) for k, v in fields.items()})
               for entry_id, fields in broker.client.xrange(broker.keys.events)]
    for event_id, fields in eventbatch.expand_all(entries):
        job, new = fields["job"], fields["state"]
        user, now_ms = owners[job], int(event_id.split("-")[0])
        old = state.get(job)
        idle[user] += (new == "IDLE") - (old == "IDLE")
        if new == "RUNNING" and old != "RUNNING":
            running[user].add(job)
            started_ms[job] = now_ms
        elif old == "RUNNING" and new != "RUNNING":
            running[user].discard(job)
        state[job] = new
        ps = sum(max(0.0, WALLTIME_S - (now_ms - started_ms[one]) / 1000) * sizes[one]
                 for one in running[user])
        if idle[user] > MAX_IDLE or idle[user] + len(running[user]) > MAX_JOBS or ps > HARD + 1:
            broken.append(f"{event_id!r} {fields}: {user} idle {idle[user]}, "
                          f"running {len(running[user])}, PS {ps:.0f}")
    return broken


def test_no_user_ever_exceeds_a_limit(redis_client, pool_name):
    config = Config.load(environ={}).with_values(
        MAX_IDLE_JOBS_PER_USER=MAX_IDLE, MAX_JOBS_PER_USER=MAX_JOBS, MAXPS_SOFT=SOFT,
        MAXPS_HARD=HARD, POLICY_INTERVAL=0.2, BROKER_REAPER_INTERVAL=1)
    publish_rules(redis_client, pool_name, config)  # the pool's leader has run
    broker = Broker(redis_client, pool_name, config)
    owners: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for user in USERS:
        ads = [{"Cmd": "x", "RequestCpus": 1 + n % 2, "AllowedJobDuration": WALLTIME_S}
               for n in range(JOBS_PER_USER)]
        for job, ad in zip(broker.submit(ads, owner=user), ads, strict=True):
            owners[job], sizes[job] = user, ad["RequestCpus"]
    stop = threading.Event()
    service = BrokerService.from_config(broker, config)
    threads = [threading.Thread(target=service.run, args=(stop,))]
    threads += [threading.Thread(target=slot_loop, args=(broker, f"slot{n}@stress", stop, n))
                for n in range(SLOTS)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: broker.client.zcard(broker.keys.history) == len(owners),
                   timeout_s=90, what="every job finishing")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert replay(broker, owners, sizes) == []
    assert all(ad["FetchworkState"] == "COMPLETED" for ad in broker.history())
