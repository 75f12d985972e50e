"""What the reference hooks compare of a slot ad before publishing it again."""

from __future__ import annotations

import time

import psutil

from fetchwork.config import ads
from fetchwork.hooks import slotads
from fetchwork.startd.slots.slotad import MachineFacts, SlotPolicy, slot_ad_attrs
from fetchwork.startd.slots.slotadcache import SlotAdCache
from fetchwork.startd.states import Activity, SlotStatus, State
from tests.support.slotads import build_slot_ad

FACTS = MachineFacts("m.example", "LINUX", "X86_64", 4, 8192, 10**8, 0.5)
POLICY = SlotPolicy(start="TARGET.RequestMemory <= 4096", rank="TARGET.JobPrio",
                    extra_attrs={"Site": '"here"'})


def _ad_shape(ad: object) -> str:
    return "\n".join(sorted(f"{key.lower()}={ads.attr_text(ad, key)}"  # type: ignore[arg-type]
                            for key in ad.keys()  # type: ignore[attr-defined]
                            if key.lower() not in slotads._VOLATILE))


def _text(state: State, now: float) -> str:
    cache = SlotAdCache()
    status = SlotStatus(state, Activity.IDLE, now, now)
    ad = cache.ad("s", 1, lambda: slot_ad_attrs(1, "m", 2, FACTS, status, POLICY, now))
    return cache.text("s", ad)


def test_the_shape_of_a_startds_text_is_the_shape_of_its_ad() -> None:
    text = _text(State.UNCLAIMED, 100.0)
    assert slotads.text_shape(text) == _ad_shape(ads.parse_ad(text))


def test_the_shape_ignores_clocks_and_sees_the_state() -> None:
    assert slotads.text_shape(_text(State.UNCLAIMED, 100.0)) == \
        slotads.text_shape(_text(State.UNCLAIMED, 205.0))
    assert slotads.text_shape(_text(State.UNCLAIMED, 100.0)) != \
        slotads.text_shape(_text(State.CLAIMED, 100.0))


def test_shaping_texts_does_not_grow_the_process() -> None:
    now = time.time()
    texts = [ads.format_ad(build_slot_ad(1, "m", 2, FACTS, SlotStatus(
        State.UNCLAIMED, Activity.IDLE, now, now), POLICY, now + index)) for index in range(50)]
    me = psutil.Process()
    for text in texts * 40:
        slotads.text_shape(text)
    before_kb = me.memory_info().rss // 1024
    for _ in range(400):
        for text in texts:
            slotads.text_shape(text)
    assert me.memory_info().rss // 1024 - before_kb < 512


def test_the_machines_count_of_running_jobs_is_no_change_of_shape() -> None:
    """FetchworkRunningJobs moves with every job of any slot of the machine (the
    other slot's job starting or ending), as the load does: a slot ad that differs
    only there is not published again before a third of its lifetime."""
    text = _text(State.CLAIMED, 100.0)  # the startd's carving adds the count
    one, two = text + "FetchworkRunningJobs = 1\n", text + "FetchworkRunningJobs = 2\n"
    assert slotads.text_shape(one) == slotads.text_shape(two)
    assert slotads.text_shape(one) != slotads.text_shape(text + "FetchworkExclusive = true\n")
