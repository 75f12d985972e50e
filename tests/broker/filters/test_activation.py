"""Activation filters in the broker service, with a real Redis and real filter
programs: every row of the activation table, the environment a filter sees,
blocks and reservations, timed holds released by the leader, and a service
that dies mid-activation."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fetchwork.broker.client import Broker
from fetchwork.broker.leader.service import BrokerService
from fetchwork.config.loader import Config
from tests.support.filterprogs import calls, log_lines, write_filter
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

SLOT1 = {"Name": "slot1@act", "Cpus": 3, "Memory": 1024}
SLOT2 = {"Name": "slot2@act", "Cpus": 1, "Memory": 1024}


def ident(ad) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


class Site:
    """A pool whose activation chain is GATE (its code read from a file per job Tag)."""

    def __init__(self, redis_client, pool_name: str, tmp_path: Path, extra: str = ""):
        self.tmp = tmp_path
        code = f'$(cat {tmp_path}/code.$tag 2>/dev/null || cat {tmp_path}/code)'
        write_filter(tmp_path, "gate", code=code.replace("$tag", "$(echo $tag | tr -d '\"')"),
                     body=f'[ -f {tmp_path}/until ] && echo "HoldUntil = $(cat {tmp_path}/until)"'
                          f' >> "$file"; cp "$FETCHWORK_SLOT_AD" {tmp_path}/slot.ad; true')
        write_filter(tmp_path, "first", code=0)
        self.answer(0)
        conf = tmp_path / "site.conf"
        conf.write_text(f"""
ACTIVATION_FILTER_NAMES = FIRST, GATE
ACTIVATION_FILTER_FIRST = {tmp_path}/first
ACTIVATION_FILTER_GATE = {tmp_path}/gate
ACTIVATION_FILTER_TIMEOUT = 2
ACTIVATION_FILTER_INTERVAL = 0.5
BROKER_LEADER_LEASE = 3
BROKER_REAPER_INTERVAL = 0.5
{extra}
""")
        self.config = Config.load(environ={"FETCHWORK_CONFIG": str(conf),
                                           "FETCHWORK_STATE_DIR": str(tmp_path / "state")})
        self.broker = Broker(redis_client, pool_name, self.config)
        self.service = BrokerService.from_config(self.broker, self.config)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.service.run, args=(self.stop,), daemon=True)
        self.thread.start()
        wait_until(lambda: self.service.is_leader, 30, what="the service leading")

    def answer(self, code: int | str, tag: str | None = None) -> None:
        (self.tmp / (f"code.{tag}" if tag else "code")).write_text(f"{code}\n")

    def submit(self, *tags: str, prio: int = 0) -> list[str]:
        return self.broker.submit([{"Cmd": "/bin/true", "Tag": tag, "JobPrio": prio}
                                   for tag in tags])

    def state(self, job: str) -> str:
        return self.broker.get(job)["FetchworkState"]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


@pytest.fixture
def site(redis_client, pool_name, tmp_path):
    site = Site(redis_client, pool_name, tmp_path)
    yield site
    site.close()


def test_code_0_starts_the_job_on_the_asking_slot(site):
    (job,) = site.submit("a")
    ad = site.broker.claim(SLOT1)
    assert ad is not None and ident(ad) == job and ad["RemoteHost"] == "slot1@act"
    assert site.state(job) == "RUNNING"
    assert calls(site.tmp) == ['first activate "a"', 'gate activate "a"']


def test_the_filter_sees_the_slot_and_the_facts(site):
    site.submit("x", "y")
    site.broker.claim(SLOT1)
    line = log_lines(site.tmp)[-1]
    assert "pass=1 index=0 backfill=0 cpus=3 slot=" in line
    assert 'Name = "slot1@act"' in (site.tmp / "slot.ad").read_text()
    site.broker.claim(SLOT2)
    assert "pass=2 index=0 backfill=0 cpus=1" in log_lines(site.tmp)[-1]


def test_code_1_blocks_equal_and_lower_priorities_until_it_passes(site):
    site.answer(1, "blocker")
    (blocker,) = site.submit("blocker", prio=5)
    (same,) = site.submit("same", prio=5)
    (lower,) = site.submit("lower")
    (higher,) = site.submit("higher", prio=9)
    assert ident(site.broker.claim(SLOT1)) == higher  # higher priorities go on
    assert site.broker.claim(SLOT1) is None  # the blocker said 1
    assert site.state(blocker) == "IDLE"
    assert site.broker.get(blocker)["FetchworkActivationReason"] == (
        "activation filter GATE blocks the queue: exit 1")
    assert site.broker.claim(SLOT2) is None  # equal and lower wait, on every slot
    assert site.state(same) == "IDLE" and site.state(lower) == "IDLE"
    site.answer(0, "blocker")
    started = wait_until(lambda: site.broker.claim(SLOT2), 30, what="the blocker passing")
    assert ident(started) == blocker
    assert ident(site.broker.claim(SLOT2)) == same
    assert ident(site.broker.claim(SLOT2)) == lower


def test_code_1_reverts_the_filters_that_passed(site):
    site.answer(1)
    site.submit("r")
    site.broker.claim(SLOT1)
    wait_until(lambda: 'first revert "r"' in calls(site.tmp), 10, what="the revert")
    assert calls(site.tmp) == ['first activate "r"', 'gate activate "r"', 'first revert "r"']


def test_code_2_reserves_the_asking_slot_and_others_go_on(site):
    site.answer(2, "wants")
    (wants,) = site.submit("wants", prio=1)
    (other,) = site.submit("other")
    assert site.broker.claim(SLOT1) is None
    assert site.broker.get(wants)["FetchworkReservedSlot"] == "slot1@act"
    assert site.broker.claim(SLOT1) is None  # reserved: no other job for slot1
    got = site.broker.claim(SLOT2)
    assert got is not None and ident(got) == other
    site.answer(0, "wants")
    started = wait_until(lambda: site.broker.claim(SLOT1), 30, what="the reserved job starting")
    assert ident(started) == wants and started["RemoteHost"] == "slot1@act"
    assert "FetchworkReservedSlot" not in started


@pytest.mark.parametrize("code", ["7", "sleep"])
def test_other_codes_and_timeouts_count_as_2(site, code):
    if code == "sleep":
        write_filter(site.tmp, "gate", body="sleep 30")
    else:
        site.answer(code)
    (job,) = site.submit("z")
    started = time.monotonic()
    assert site.broker.claim(SLOT1) is None
    assert time.monotonic() - started < 2 * 2 + 1 + 3  # the chain's timeouts, plus a little
    assert site.broker.get(job)["FetchworkReservedSlot"] == "slot1@act"


def test_a_missing_program_counts_as_2(site):
    (site.tmp / "gate").unlink()
    (job,) = site.submit("m")
    assert site.broker.claim(SLOT1) is None
    ad = site.broker.get(job)
    assert ad["FetchworkReservedSlot"] == "slot1@act"
    assert ad["FetchworkActivationReason"] == f"activation filter GATE not found: {site.tmp}/gate"


def test_code_3_holds_for_the_default_duration(site):
    site.answer(3)
    (job,) = site.submit("h")
    before = time.time()
    assert site.broker.claim(SLOT1) is None
    ad = site.broker.get(job)
    assert ad["FetchworkState"] == "HELD" and ad["HoldReason"].startswith(
        "activation filter GATE held the job")
    assert before + 900 - 1 <= ad["HoldUntil"] <= time.time() + 900 + 1


def test_code_3_takes_the_filters_holduntil_and_the_leader_releases_it(site):
    site.answer(3)
    (site.tmp / "until").write_text(str(int(time.time()) + 2))
    (job,) = site.submit("t")
    assert site.broker.claim(SLOT1) is None
    until = site.broker.get(job)["HoldUntil"]
    assert site.state(job) == "HELD" and until == int((site.tmp / "until").read_text())
    (site.tmp / "until").unlink()
    site.answer(0)
    wait_until(lambda: site.state(job) == "IDLE", 30, what="the leader releasing the job")
    assert time.time() >= until
    started = wait_until(lambda: site.broker.claim(SLOT1), 30, what="the job starting")
    assert ident(started) == job and "HoldUntil" not in started


def test_code_4_fails_the_job_into_history(site):
    site.answer(4)
    (job,) = site.submit("f")
    assert site.broker.claim(SLOT1) is None
    ad = site.broker.get(job)
    assert ad["FetchworkState"] == "FAILED"
    assert ad["RemoveReason"] == "activation filter GATE failed the job: exit 4"
    assert [ident(a) for a in site.broker.history()] == [job]


def test_a_job_removed_while_activating_never_starts(site):
    write_filter(site.tmp, "gate", body="sleep 1")
    (job,) = site.submit("gone")
    box = {}
    claim = threading.Thread(target=lambda: box.setdefault("ad", site.broker.claim(SLOT1)))
    claim.start()
    wait_until(lambda: site.state(job) == "ACTIVATING", 10, what="the job activating")
    assert site.broker.remove([job]) == [job]
    claim.join(timeout=30)
    assert box["ad"] is None and site.state(job) == "REMOVED"


def test_a_reservation_lapses_when_its_slot_stays_away(redis_client, pool_name, tmp_path):
    site = Site(redis_client, pool_name, tmp_path, extra="ACTIVATION_RESERVATION_TIMEOUT = 1")
    try:
        site.answer(2)
        (job,) = site.submit("away")
        assert site.broker.claim(SLOT1) is None
        assert site.broker.get(job)["FetchworkReservedSlot"] == "slot1@act"
        assert site.broker.claim(SLOT2) is None  # reserved for slot1
        site.answer(0)
        wait_until(lambda: "FetchworkReservedSlot" not in site.broker.get(job), 30,
                   what="the reservation lapsing")
        started = wait_until(lambda: site.broker.claim(SLOT2), 30, what="another slot")
        assert ident(started) == job and started["RemoteHost"] == "slot2@act"
    finally:
        site.close()
