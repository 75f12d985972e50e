"""An activation answer 2 keeps *the* slot: the job's reservation stays on the slot
it first reserved while other jobs come and go, its re-evaluations happen on that
slot only, and no other job starts there, whatever order the slots ask in.

Real Redis, real claims, a real filter program, and the leader's filter and
backfill passes driven by the test, so that the backfill pass that runs while the
reserved job is being evaluated (out of the idle set) comes every time: on a live
pool that pass comes only now and then.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import wait
from pathlib import Path
from typing import Any

import pytest

from fetchwork.broker.backfill.leader import BackfillLeader
from fetchwork.broker.client import Broker
from fetchwork.broker.filters.leader import FilterLeader
from fetchwork.broker.filters.settings import load_settings
from fetchwork.broker.store import calls, codec
from fetchwork.config.loader import Config
from tests.support.filterprogs import write_filter
from tests.support.rules import publish_rules
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

SLOTS = ("slot1@m", "slot2@m")
LATER = ("B", "C", "D", "E")


def slot(name: str) -> dict[str, Any]:
    """A static 1-CPU slot of the 2-CPU machine `m`."""
    return {"Name": name, "Machine": "m", "Cpus": 1, "Memory": 1000, "TotalSlotCpus": 1,
            "TotalSlotMemory": 1000, "TotalCpus": 2, "TotalMemory": 2000,
            "SlotType": "Static"}


def job(tag: str) -> dict[str, Any]:
    return {"Cmd": "/bin/true", "Tag": tag, "RequestCpus": 1, "RequestMemory": 100,
            "AllowedJobDuration": 600}


class Site:
    """A pool whose activation gate answers 2 for job A and 0 for the others; the
    leader's passes run when the test says."""

    def __init__(self, redis_client: Any, pool_name: str, folder: Path):
        body = (f'echo "$tag $(sed -n \'s/^Name = //p\' "$FETCHWORK_SLOT_AD")" '
                f'>> {folder}/evaluations')
        gate = write_filter(folder, "gate", code='$([ "$tag" = \'"A"\' ] && echo 2 || echo 0)',
                            body=body)
        self.evaluations = folder / "evaluations"
        config = Config.load(environ={}).with_values(
            ACTIVATION_FILTER_NAMES="GATE", ACTIVATION_FILTER_GATE=str(gate),
            ACTIVATION_FILTER_TIMEOUT="10", ACTIVATION_FILTER_INTERVAL="0")
        self.broker = Broker(redis_client, pool_name, config)
        self.filters = FilterLeader(self.broker.store, load_settings(config),
                                    self.broker.default_lease_s)
        self.backfill = BackfillLeader.from_config(self.broker.store, config)
        self.filters.is_backfill_start = self.backfill.is_backfill_start
        publish_rules(redis_client, pool_name, config)
        for name in SLOTS:
            self.broker.publish_slot(slot(name), 600)

    def ask(self, name: str, decide: Callable[[str], None] | None = None) -> Any:
        """One claim by slot `name`; an activation it starts is decided by `decide(job)`,
        else by the leader's filters after a backfill pass (the job out of the idle set
        meanwhile), as a busy leader may order them."""
        got: list[Any] = []
        claim = threading.Thread(target=lambda: got.append(self.broker.claim(slot(name))))
        claim.start()
        keys = self.broker.keys
        activating = wait_until(lambda: self.broker.client.zrange(keys.activating, 0, -1)
                                or (not claim.is_alive() and ["done"]), 30,
                                what=f"the claim of {name} to ask for a verdict")
        if activating != ["done"] and decide is not None:
            decide(codec.text(activating[0]))
        elif activating != ["done"]:
            self.backfill.run_pass()
            wait(self.filters.run_pass(), timeout=30)
        claim.join(timeout=30)
        assert not claim.is_alive(), f"the claim of {name} never ended"
        return got[0]

    def evaluated_on(self) -> list[str]:
        lines = self.evaluations.read_text().splitlines() if self.evaluations.exists() else []
        return [line.split()[1].strip('"') for line in lines if line.startswith('"A"')]

    def reservations(self) -> dict[str, str]:
        raw = self.broker.client.hgetall(self.broker.keys.reservations)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def close(self) -> None:
        self.filters.close()


def run(site: Site, order: Callable[[], list[str]]) -> dict[str, list[str]]:
    """Submit A, then B..E; let the slots ask in `order()` each round (a slot with a job
    finishes it instead) until B..E are done. Returns the jobs each slot got."""
    broker = site.broker
    (a_id,) = broker.submit([job("A")])
    later = dict(zip(broker.submit([job(tag) for tag in LATER]), LATER, strict=True))
    holding: dict[str, Any] = {}
    got: dict[str, list[str]] = {name: [] for name in SLOTS}
    first: str | None = None
    for _round in range(40):
        for name in order():
            if name in holding:
                ad = holding.pop(name)
                assert broker.finish(f"{ad['ClusterId']}.{ad['ProcId']}",
                                     ad["FetchworkClaim"], "exit", {"ExitCode": 0})
                continue
            ad = site.ask(name)
            if ad is not None:
                got[name].append(ad["Tag"])
                holding[name] = ad
            if first is None and site.evaluated_on():
                first = site.evaluated_on()[0]
            if first is not None:
                assert site.reservations() == {first: a_id}, (
                    f"A's reservation left {first}: {site.reservations()}; "
                    f"evaluated on {site.evaluated_on()}")
        if not holding and sum(len(tags) for tags in got.values()) == len(later):
            break
    return got


@pytest.mark.parametrize("seed", range(20))
def test_the_reserved_slot_is_kept_whatever_order_the_slots_ask_in(
        redis_client, pool_name, tmp_path, seed):
    site = Site(redis_client, pool_name, tmp_path)
    rng = random.Random(seed)
    try:
        got = run(site, lambda: rng.sample(SLOTS, len(SLOTS)))
    finally:
        site.close()
    evaluated = site.evaluated_on()
    assert len(evaluated) >= 2 and len(set(evaluated)) == 1, evaluated
    reserved = evaluated[0]
    (other,) = [name for name in SLOTS if name != reserved]
    assert got[reserved] == [], f"{got[reserved]} started on the slot reserved for A"
    assert sorted(got[other]) == list(LATER)
    a = site.broker.query("Tag == \"A\"")
    assert len(a) == 1 and a[0]["FetchworkReservedSlot"] == reserved


@pytest.mark.parametrize("later_answer", ["retry", "block"])
def test_a_later_answer_neither_moves_nor_drops_the_reservation(
        redis_client, pool_name, tmp_path, later_answer):
    """A held slot stays the job's when its next evaluation is a backfill start (which
    may neither reserve nor block) or answers 1: only a start, a failure, a hold or the
    reservation's timeout ends it."""
    site = Site(redis_client, pool_name, tmp_path)
    broker = site.broker
    try:
        (a_id,) = broker.submit([job("A")])

        def answer(action: str) -> Callable[[str], None]:
            def decide(job_id: str) -> None:
                token = broker.get(job_id)["FetchworkClaim"]
                assert calls.activate_defer(broker.store, job_id=job_id, token=token,
                                            action=action, reason=action, interval_ms=0,
                                            reply_ttl_ms=60_000)
            return decide

        assert site.ask("slot2@m", answer("reserve")) is None
        assert site.ask("slot2@m", answer(later_answer)) is None
        assert site.reservations() == {"slot2@m": a_id}
        assert broker.get(a_id)["FetchworkReservedSlot"] == "slot2@m"
        (b_id,) = broker.submit([job("B")])
        assert site.ask("slot2@m", answer("reserve")) is None  # A again, not B
        assert broker.get(b_id)["FetchworkState"] == "IDLE"
        assert site.ask("slot1@m")["Tag"] == "B"
        assert site.reservations() == {"slot2@m": a_id}
    finally:
        site.close()
