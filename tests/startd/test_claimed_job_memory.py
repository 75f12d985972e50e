"""The startd's handling of a claimed job makes no classad2 object per job.

classad2 keeps about 0.14 KB of every ClassAd and ExprTree object it makes,
even once it is freed, so one object per job is a leak that grows with
every job a startd runs. Here the startd's own steps for each job run
in-process against a real broker on the session's Redis: the slot's kept ad
and its text, the reference fetch hook (the claim), the reading of its
output (in-process values and a program's text), START/RANK and the job's
Requirements, the claim's job ad text for the starter, and the starter's
reports loaded into the claim. The classad2 objects made are counted over
many jobs after a few to warm the caches up; one per job would be dozens.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import classad2
import pytest

from fetchwork.broker.client import Broker
from fetchwork.config import ads
from fetchwork.hooks import reference
from fetchwork.startd.acceptance import Verdict, decide
from fetchwork.startd.fetchoutput import read_fetch_output
from fetchwork.startd.slots.slot import Claim, new_claim_id
from fetchwork.startd.slots.slotad import ClaimView, MachineFacts, SlotPolicy, slot_ad_attrs
from fetchwork.startd.slots.slotadcache import SlotAdCache
from fetchwork.startd.states import Activity, SlotStatus, State
from tests.support.hookenv import hook_environment

pytestmark = pytest.mark.timeout(120)

WARMUP, JOBS = 8, 40
# A few objects at most over JOBS jobs (a cache filling up); one a job would be JOBS.
MOST = 4
FACTS = MachineFacts("memtest", "LINUX", "X86_64", 2, 4096, 10**7, 0.1)
POLICY = SlotPolicy(start='TARGET.Owner =!= "nobody" && TARGET.RequestMemory <= Memory',
                    rank="TARGET.JobPrio + 1")


class Counter:
    """Counts the ClassAd and ExprTree objects made (the library's own ones too)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        for cls in (classad2.ClassAd, classad2.ExprTree):
            original = cls.__init__

            def counted(obj: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
                self.made += 1
                _original(obj, *args, **kwargs)

            monkeypatch.setattr(cls, "__init__", counted)


@pytest.fixture
def broker(redis_url, redis_client, pool_name, monkeypatch, tmp_path) -> Iterator[Broker]:
    with hook_environment(monkeypatch, {
            "FETCHWORK_BROKER": redis_url, "FETCHWORK_POOL": pool_name,
            "FETCHWORK_CONFIG": os.devnull, "FETCHWORK_STATE_DIR": str(tmp_path),
            "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "0"}):
        yield Broker(redis_client, pool=pool_name)


class StartdSide:
    """One slot's per-job steps, as the startd's loop takes them."""

    def __init__(self) -> None:
        self.ads = SlotAdCache()
        self.status = SlotStatus(State.UNCLAIMED, Activity.IDLE, time.time(), time.time())
        self.claim: Claim | None = None
        self.rounds = 0

    def slot_ad(self) -> classad2.ClassAd:
        self.rounds += 1
        now = time.time() + self.rounds  # MyCurrentTime changes each round
        view = self.claim.view() if self.claim is not None else None
        inputs = (self.status, view, int(now))
        return self.ads.ad("slot1", inputs, lambda: slot_ad_attrs(
            1, "memtest", 1, FACTS, self.status, POLICY, now, view))

    def one_job(self, as_program: bool) -> str:
        """Fetch, read, match and claim one job, then end it; its id."""
        slot_ad = self.slot_ad()
        out = reference.fetch_work([], self.ads.text("slot1", slot_ad))
        assert out, "the fetch hook found no job"
        fetched = read_fetch_output(str(out) if as_program else out)
        job_ad = fetched.job_ad
        assert fetched.found_work and job_ad is not None
        job_ad["HookKeyword"] = "FETCHWORK"
        decision = decide(self.status, slot_ad, job_ad, None,
                          self.ads.value("slot1", slot_ad, "Rank"))
        assert decision.verdict is Verdict.ACCEPT, decision.reason
        assert decision.rank == job_ad["JobPrio"] + 1
        job_ad["ClaimId"] = new_claim_id("slot1@memtest", 0.0)
        self.claim = Claim(claim_id=job_ad["ClaimId"], job_ad=job_ad, rank=decision.rank)
        text = self.claim.job_ad_text()  # what the starter is given
        assert "Requirements = " in text and f'ClaimId = "{job_ad["ClaimId"]}"' in text
        self.slot_ad()  # the slot shows its claim
        reported = {**ads.to_dict(self.claim.current_ad()), "JobPid": 4242, "ImageSize": 900,
                    "RemoteUserCpu": 0.0125}
        self.claim.report(reported)
        assert self.claim.current_ad()["JobPid"] == 4242
        assert "JobPid = 4242" in self.claim.job_ad_text()
        self.claim.report({**reported, "ExitCode": 0}, exited=True)
        assert self.claim.current_ad()["ExitCode"] == 0
        job = self.claim.job_id
        self.claim = None
        return job


def test_the_startd_makes_no_classad_per_claimed_job(broker, monkeypatch):
    broker.submit([{"Cmd": "/bin/true", "Iwd": "/tmp", "RequestMemory": 64,
                    "JobPrio": 3, "Requirements": {"$expr": "TARGET.Memory >= RequestMemory"}}]
                  * (WARMUP + JOBS), owner="tester")
    side = StartdSide()
    seen = [side.one_job(as_program=number % 2 == 1) for number in range(WARMUP)]
    counter = Counter(monkeypatch)
    seen += [side.one_job(as_program=number % 2 == 1) for number in range(JOBS)]
    assert len(set(seen)) == WARMUP + JOBS  # every job claimed once, none twice
    assert counter.made <= MOST, \
        f"{counter.made} classad2 objects made over {JOBS} claimed jobs"


def test_a_counter_sees_the_objects_a_claimed_job_ad_made_per_job_would_cost(monkeypatch):
    """The count above can fail: making the job's ad the old way is counted."""
    counter = Counter(monkeypatch)
    for _ in range(JOBS):
        ads.from_dict({"Cmd": "/bin/true", "JobPrio": 3})
        ClaimView(job_id=None, rank=0.0, job_started_at=None)
    assert counter.made >= JOBS
