"""Backfill in a real pool, without startds: slot ads published as the reference
hooks publish them, real claims, the leader's backfill pass (BackfillLeader),
BypassCount, strict order with BACKFILL = false, and `q -analyze`."""

from __future__ import annotations

import os
import time

import click
import pytest
from click.testing import CliRunner

from fetchwork.broker.backfill.leader import BackfillLeader
from fetchwork.broker.claim.backfill import BackfillCheck
from fetchwork.broker.client import Broker
from fetchwork.broker.scheduling.showq import date_text
from fetchwork.cli import FetchworkGroup
from fetchwork.config.loader import Config
from fetchwork.submit import usercli
from tests.support.backfill import job, slot, tag

pytestmark = pytest.mark.timeout(60)

class Pool:
    """Machine `big` (16 CPUs) runs an 8-CPU job with 15 minutes left; machine `small`
    (4 CPUs) is empty. Waiting, best first: HEAD (16 CPUs), then smaller jobs."""

    def __init__(self, redis_client, pool_name: str, **knobs):
        config = Config.load(environ={}).with_values(**knobs)
        self.broker = Broker(redis_client, pool_name, config)
        self.leader = BackfillLeader.from_config(self.broker.store, config)
        self.broker.publish_slot(slot("big", 16, 16), 60)
        self.broker.publish_slot(slot("small", 4, 4), 60)
        (self.busy,) = self.broker.submit([job("busy", 8, 900)])
        assert tag(self.broker.claim(slot("big", 16, 16))) == "busy"
        self.broker.publish_slot(slot("big", 8, 16), 60)
        self.ids = dict(zip(("head", "window", "long", "wide", "two"), self.broker.submit([
            job("head", 16, 3600), job("window", 8, 600), job("long", 8, 1200),
            job("wide", 4, 5000), job("two", 2, 5000)]), strict=True))
        self.leader.run_pass()

    def bypasses(self) -> int:
        return self.broker.get(self.ids["head"]).get("BypassCount", 0)


@pytest.fixture
def pool(redis_client, pool_name):
    return Pool(redis_client, pool_name)


def test_the_head_job_is_reserved_the_machine_when_the_running_job_ends(pool):
    reservation = BackfillCheck.reservation_of(
        pool.broker.client.get(pool.broker.keys.backfill))
    assert reservation is not None
    assert (reservation.job_id, reservation.machine) == (pool.ids["head"], "big")
    started = pool.broker.get(pool.busy)["EnteredCurrentStatus"]
    assert reservation.start_at == pytest.approx(started + 900, abs=1)
    assert reservation.window.free.cpus == 8


def test_a_job_that_fits_the_window_starts_and_one_that_does_not_waits(pool):
    got = pool.broker.claim(slot("big", 8, 16))
    assert tag(got) == "window" and got["RemoteHost"] == "slot1@big"
    # Eight CPUs are still free there (as far as this slot ad says): "long" would outlast
    # the window, "wide" and "two" would outlast it on CPUs the head job needs.
    assert pool.broker.claim(slot("big", 8, 16)) is None
    assert pool.broker.get(pool.ids["long"])["FetchworkState"] == "IDLE"


def test_another_machine_takes_lower_jobs_freely(pool):
    assert tag(pool.broker.claim(slot("small", 4, 4))) == "wide"


def test_each_lower_job_started_ahead_grows_the_bypass_count(pool):
    assert pool.bypasses() == 0
    pool.broker.claim(slot("big", 8, 16))
    pool.leader.run_pass()
    assert pool.bypasses() == 1
    pool.broker.claim(slot("small", 4, 4))
    pool.broker.claim(slot("small", 4, 4))
    pool.leader.run_pass()
    assert pool.bypasses() == 3
    assert pool.leader.is_backfill_start(pool.ids["long"])
    assert not pool.leader.is_backfill_start(pool.ids["head"])


def test_the_head_job_takes_the_machine_once_it_has_room(pool):
    pool.broker.finish(pool.busy, pool.broker.get(pool.busy)["FetchworkClaim"], "exit")
    result = pool.leader.run_pass()
    # The head fits now (so it goes first); the next 8-CPU job then waits for it.
    assert result.ahead == (pool.ids["head"],)
    assert result.reservation is not None and result.reservation.job_id == pool.ids["window"]
    assert tag(pool.broker.claim(slot("big", 16, 16))) == "head"


def test_with_backfill_off_no_lower_job_starts_anywhere(redis_client, pool_name):
    strict = Pool(redis_client, pool_name, BACKFILL=False)
    assert strict.broker.claim(slot("big", 8, 16)) is None
    assert strict.broker.claim(slot("small", 4, 4)) is None
    strict.broker.finish(strict.busy, strict.broker.get(strict.busy)["FetchworkClaim"], "exit")
    strict.leader.run_pass()
    assert tag(strict.broker.claim(slot("big", 16, 16))) == "head"
    strict.leader.run_pass()
    # "window" (8 CPUs) now waits for the head's machine: "wide" still may not pass it.
    assert strict.broker.claim(slot("small", 4, 4)) is None


def test_a_job_no_machine_can_take_reserves_nothing(redis_client, pool_name):
    broker = Broker(redis_client, pool_name, Config.load(environ={}))
    leader = BackfillLeader.from_config(broker.store, Config.load(environ={}))
    broker.publish_slot(slot("small", 4, 4), 60)
    broker.submit([job("huge", 64, 60), job("fits", 2, 60)])
    assert leader.run_pass().reservation is None
    assert tag(broker.claim(slot("small", 4, 4))) == "fits"


def test_an_exclusive_head_job_drains_the_machine_whose_jobs_end_soonest(redis_client,
                                                                       pool_name):
    config = Config.load(environ={})
    broker = Broker(redis_client, pool_name, config)
    leader = BackfillLeader.from_config(broker.store, config)
    for machine, walltime_s in (("a", 3000), ("b", 600), ("c", 1800)):
        broker.publish_slot(slot(machine, 4, 4), 60)
        broker.submit([job(f"on-{machine}", 1, walltime_s)])
        assert tag(broker.claim(slot(machine, 4, 4))) == f"on-{machine}"
    (alone,) = broker.submit([job("alone", 1, 600, Exclusive=True)])
    result = leader.run_pass()
    assert result.reservation is not None
    assert (result.reservation.job_id, result.reservation.machine) == (alone, "b")
    assert result.reservation.start_at == pytest.approx(time.time() + 600, abs=5)


@click.group(cls=FetchworkGroup)
def cli() -> None:
    """q alone."""


cli.add_command(usercli.q_command)


def test_q_analyze_shows_the_reserved_machine_and_the_expected_start(pool, redis_url,
                                                                     pool_name, tmp_path):
    pool.broker.claim(slot("small", 4, 4))
    pool.leader.run_pass()
    env = {"FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
           "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path / "state")}
    result = CliRunner().invoke(cli, ["q", "-analyze", pool.ids["head"]], env=env)
    assert result.exit_code == 0, result.output
    start = pool.broker.get(pool.busy)["EnteredCurrentStatus"] + 900
    assert f"Reserved: machine big, expected to start {date_text(start)}, in 0:1" in (
        result.output)
    assert "Backfill window there: 8 CPUs for 0:1" in result.output
    assert "1 lower job has started ahead of it (BypassCount)." in result.output
    other = CliRunner().invoke(cli, ["q", "-analyze", pool.ids["long"]], env=env)
    assert f"Job {pool.ids['head']} holds the reservation on big" in other.output


def _stored(pool: Pool):
    return BackfillCheck.reservation_of(pool.broker.client.get(pool.broker.keys.backfill))


def test_the_reservation_stands_until_its_job_has_started(pool):
    pool.broker.finish(pool.busy, pool.broker.get(pool.busy)["FetchworkClaim"], "exit")
    result = pool.leader.run_pass()
    assert result.reservation is not None and result.reservation.job_id == pool.ids["window"]
    # The plan has the head start at once; until it has, claims still see its reservation
    # (its slots may not have asked yet, and "window" must not take them first).
    stored = _stored(pool)
    assert stored is not None and stored.job_id == pool.ids["head"]
    assert tag(pool.broker.claim(slot("big", 16, 16))) == "head"
    pool.leader.run_pass()
    stored = _stored(pool)
    assert stored is None or stored.job_id != pool.ids["head"]


def test_a_reservation_whose_job_does_not_start_lapses(pool, monkeypatch):
    from fetchwork.broker.backfill import leader

    pool.broker.finish(pool.busy, pool.broker.get(pool.busy)["FetchworkClaim"], "exit")
    pool.leader.run_pass()
    assert _stored(pool).job_id == pool.ids["head"]
    monkeypatch.setattr(leader, "STICKY_S", 0.0)
    pool.leader.run_pass()
    assert _stored(pool).job_id == pool.ids["window"]


def _hashes_read(pool, monkeypatch) -> list[str]:
    """The ids whose hashes the leader reads from now on, in order."""
    asked: list[str] = []
    real = pool.leader.store.hashes

    def counting(ids):
        asked.extend(ids)
        return real(ids)

    monkeypatch.setattr(pool.leader.store, "hashes", counting)
    return asked


def test_a_running_job_is_read_once_while_it_runs(pool, monkeypatch):
    asked = _hashes_read(pool, monkeypatch)
    pool.leader.run_pass()
    pool.leader.run_pass()
    assert pool.busy not in asked  # read by the fixture's pass, not again
    got = pool.broker.claim(slot("small", 4, 4))
    started = f"{got['ClusterId']}.{got['ProcId']}"
    asked.clear()
    pool.leader.run_pass()
    pool.leader.run_pass()
    assert asked.count(started) == 1  # a new start: read once, then known
    reservation = _stored(pool)
    assert reservation is not None and reservation.job_id == pool.ids["head"]


def test_the_idle_head_is_read_once_until_an_event_names_a_job(pool, monkeypatch):
    from fetchwork.broker.backfill import leader

    asked = _hashes_read(pool, monkeypatch)
    pool.leader.run_pass()
    pool.leader.run_pass()
    waiting = set(pool.ids.values())
    assert not waiting & set(asked)  # the fixture's pass read them
    pool.broker.hold([pool.ids["window"]])
    pool.broker.release([pool.ids["window"]])
    asked.clear()
    result = pool.leader.run_pass()
    assert asked == [pool.ids["window"]]  # named by the hold and release events
    assert result.reservation is not None and result.reservation.job_id == pool.ids["head"]
    monkeypatch.setattr(leader, "IDLE_REFRESH_S", 0.0)
    asked.clear()
    pool.leader.run_pass()
    assert waiting <= set(asked)  # everything read again after the refresh interval


def test_a_reservation_whose_job_left_the_queue_holds_no_claim_back(pool):
    pool.broker.remove([pool.ids["window"]])  # "long" is then the best job big could take
    assert pool.broker.claim(slot("big", 8, 16)) is None  # it would delay the head
    # The head leaves the idle set (it started elsewhere, or was removed) before the
    # leader's next pass: the reservation claims read is about a job no longer waiting.
    pool.broker.remove([pool.ids["head"]])
    assert _stored(pool).job_id == pool.ids["head"]
    assert tag(pool.broker.claim(slot("big", 8, 16))) == "long"


def test_with_backfill_off_a_lapsed_reservation_holds_no_claim_back(redis_client, pool_name):
    strict = Pool(redis_client, pool_name, BACKFILL=False)
    assert strict.broker.claim(slot("small", 4, 4)) is None
    strict.broker.remove([strict.ids["head"]])
    assert tag(strict.broker.claim(slot("small", 4, 4))) == "wide"
