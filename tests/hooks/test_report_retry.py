"""The reference hooks through a Redis outage: retries with backoff, clear errors.

A real redis-server of the test's own is stopped and started again; the
hooks run in-process against it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fetchwork.broker.client import Broker
from fetchwork.config import ads
from fetchwork.config.loader import Config
from fetchwork.errors import RedisUnavailableError
from fetchwork.hooks import reference
from fetchwork.hooks.retrying import delays_s, through_outage
from tests.support.hookenv import hook_environment
from tests.support.poolprocs import RedisProcess
from tests.support.rules import publish_rules

pytestmark = pytest.mark.timeout(60)

SLOT = 'Name = "slot1@retry"\nSlotID = 1\nState = "Claimed"\nActivity = "{activity}"\n'


def test_the_waits_back_off_within_the_budget():
    assert delays_s(0) == []
    assert delays_s(0.35) == [0.1, 0.2]
    waits = delays_s(20)
    assert waits[:5] == [0.1, 0.2, 0.4, 0.8, 1.6] and max(waits) == 2.0
    assert sum(waits) <= 20 < sum(waits) + 2.0


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path / "redis")
    server.start()
    with hook_environment(monkeypatch, {
            "FETCHWORK_BROKER": server.url, "FETCHWORK_POOL": "retry",
            "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path),
            "_FETCHWORK_FETCHWORK_REPORT_RETRY_TIME": "1"}):
        yield server
    server.stop()


def _claimed(server: RedisProcess) -> tuple[Broker, str, str]:
    broker = Broker(redis.Redis(unix_socket_path=server.socket), "retry",
                    Config.load(environ={}))
    publish_rules(broker.client, "retry")  # as the pool's leader would
    [job] = broker.submit([{"Cmd": "/bin/true"}])
    ad = broker.claim({"Name": "slot1@retry"})
    assert ad is not None
    return broker, job, ads.format_ad(ad)


def test_a_call_succeeds_once_redis_is_back(server: RedisProcess):
    broker, job, _text = _claimed(server)
    token = broker.get(job)["FetchworkClaim"]
    server.kill()
    restart = threading.Timer(0.5, server.start)
    restart.start()
    try:
        finished = through_outage(lambda: broker.finish(job, token, "exit"), "test", 20)
    finally:
        restart.join()
    assert finished and broker.get(job)["JobStatus"] == 4


def test_evict_claim_with_redis_down_gives_a_clear_error_or_none(server: RedisProcess):
    _broker, _job, job_text = _claimed(server)
    server.kill()
    busy = f"{job_text}-----\n{SLOT.format(activity='Busy')}"
    assert reference.evict_claim([], busy) is None  # advisory: nothing to give back
    idle = f"{job_text}-----\n{SLOT.format(activity='Idle')}"
    with pytest.raises(RedisUnavailableError, match="could not be reached for 1s"):
        reference.evict_claim([], idle)


def test_job_exit_with_redis_down_fails_clearly_after_retrying(server: RedisProcess):
    _broker, _job, job_text = _claimed(server)
    server.kill()
    with pytest.raises(RedisUnavailableError, match="reporting exit"):
        reference.job_exit(["exit"], job_text)
