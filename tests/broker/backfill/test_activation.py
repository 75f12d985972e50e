"""A backfill start through activation filters: the chain sees FETCHWORK_BACKFILL=1,
code 0 starts the job in the window, and any code that would block the queue or
keep the slot (1, 2, ...) only sends the job back to wait, with the real broker
service (its backfill and filter threads) and a real filter program."""

from __future__ import annotations

import threading

import pytest

from fetchwork.broker.claim.backfill import BackfillCheck
from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.config.loader import Config
from tests.support.backfill import job, slot, tag
from tests.support.filterprogs import log_lines, write_filter
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def site(redis_client, pool_name, tmp_path):
    code = f'$(cat {tmp_path}/code.$(echo $tag | tr -d \'"\') 2>/dev/null || echo 0)'
    write_filter(tmp_path, "gate", code=code)
    conf = tmp_path / "site.conf"
    conf.write_text(f"""
ACTIVATION_FILTER_NAMES = GATE
ACTIVATION_FILTER_GATE = {tmp_path}/gate
ACTIVATION_FILTER_TIMEOUT = 5
ACTIVATION_FILTER_INTERVAL = 60
BROKER_LEADER_LEASE = 3
BROKER_REAPER_INTERVAL = 0.5
POLICY_INTERVAL = 0.5
""")
    config = Config.load(environ={"FETCHWORK_CONFIG": str(conf),
                                  "FETCHWORK_STATE_DIR": str(tmp_path / "state")})
    broker = Broker(redis_client, pool_name, config)
    service = BrokerService.from_config(broker, config)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    wait_until(lambda: service.is_leader, 30, what="the service leading")
    broker.publish_slot(slot("big", 16, 16), 60)
    broker.publish_slot(slot("small", 4, 4), 60)
    broker.submit([job("busy", 8, 900)])
    assert tag(broker.claim(slot("big", 16, 16))) == "busy"
    broker.publish_slot(slot("big", 8, 16), 60)
    ids = dict(zip(("head", "window", "wide", "two"), broker.submit([
        job("head", 16, 3600), job("window", 8, 600), job("wide", 4, 5000),
        job("two", 2, 5000)]), strict=True))

    def reserved() -> bool:
        found = BackfillCheck.reservation_of(broker.client.get(broker.keys.backfill))
        return found is not None and found.job_id == ids["head"]

    wait_until(reserved, 30, what="the leader's reservation for the head job")
    yield broker, ids, tmp_path
    stop.set()
    thread.join(timeout=30)


def test_a_job_started_in_the_window_was_a_backfill_start(site):
    broker, _ids, tmp = site
    assert tag(broker.claim(slot("big", 8, 16))) == "window"
    lines = log_lines(tmp)
    assert "gate activate \"busy\"" in lines[0] and "backfill=0" in lines[0]
    assert "gate activate \"window\"" in lines[-1] and "backfill=1" in lines[-1]


def test_code_2_on_a_backfill_start_neither_reserves_the_slot_nor_blocks(site):
    broker, ids, tmp = site
    (tmp / "code.wide").write_text("2\n")
    assert broker.claim(slot("small", 4, 4)) is None
    ad = broker.get(ids["wide"])
    assert ad["FetchworkState"] == "IDLE" and "FetchworkReservedSlot" not in ad
    assert ad["FetchworkActivationReason"] == (
        "activation filter GATE answered exit 2 (a backfill start needs code 0)")
    assert broker.client.hlen(broker.keys.reservations) == 0
    assert tag(broker.claim(slot("small", 4, 4))) == "two", "the slot is not kept, nothing blocks"
