"""A long-running startd must not grow with every slot ad it builds.

The slot ad is rebuilt many times per job (START, FetchWorkDelay, every
hook's input). Parsing its policy expressions afresh each time kept about
2 KB per build inside classad2: 20,000 builds grew the process by ~38 MB.
"""

from __future__ import annotations

import time

import psutil
import pytest

from fetchwork.startd.slots.slotad import MachineFacts, SlotPolicy
from fetchwork.startd.states import initial_status
from tests.support.slotads import build_slot_ad

pytestmark = pytest.mark.timeout(120)

BUILDS = 20_000
# Well above what the builds cost now (~3 MB) and well below the old growth.
LIMIT_KB = 12 * 1024


def test_building_slot_ads_does_not_grow_the_process():
    facts = MachineFacts("m.example", "LINUX", "X86_64", 4, 8192, 10**8, 0.5)
    policy = SlotPolicy(start='TARGET.Owner =!= "nobody" && TARGET.RequestMemory <= 4096',
                        rank="TARGET.JobPrio", extra_attrs={"Site": '"here"'})
    status = initial_status(time.time())
    me = psutil.Process()
    for _ in range(2_000):  # warm up the allocator and the interpreter's caches
        build_slot_ad(1, "m", 2, facts, status, policy, time.time())
    before_kb = me.memory_info().rss // 1024
    for _ in range(BUILDS):
        ad = build_slot_ad(1, "m", 2, facts, status, policy, time.time())
    grown_kb = me.memory_info().rss // 1024 - before_kb
    assert ad["Rank"] is not None and "Site" in ad
    assert grown_kb < LIMIT_KB, f"{BUILDS} slot ads grew the process by {grown_kb} KB"
