"""The reference fetch hook's slot ads: one per slot, changed in place, the same as parsed."""

from __future__ import annotations

import threading

import psutil
import pytest

from fetchwork.config import ads
from fetchwork.errors import AdError
from fetchwork.hooks.referenceslotad import SlotAds, lines_of, value_of
from fetchwork.startd.slots.slotad import MachineFacts, SlotPolicy
from fetchwork.startd.states import Activity, SlotStatus, State
from tests.support.slotads import build_slot_ad

FACTS = MachineFacts("m.example", "LINUX", "X86_64", 4, 8192, 10**8, 0.5)
POLICY = SlotPolicy(start="TARGET.RequestMemory <= 4096", rank="TARGET.JobPrio",
                    extra_attrs={"Site": '"here"'})


def _text(state: State, activity: Activity, now: float) -> str:
    status = SlotStatus(state, activity, now, now)
    return ads.format_ad(build_slot_ad(1, "m", 2, FACTS, status, POLICY, now))


def _same(ad: object, text: str) -> None:
    assert ads.to_dict(ad) == ads.to_dict(ads.parse_ad(text))  # type: ignore[arg-type]


def test_each_text_gives_what_parsing_it_gives_and_the_same_ad_object() -> None:
    kept = SlotAds()
    texts = [_text(State.UNCLAIMED, Activity.IDLE, 100.0),
             _text(State.CLAIMED, Activity.BUSY, 101.0),
             _text(State.UNCLAIMED, Activity.IDLE, 102.0) + 'Extra = "x"\nMore = Memory * 2\n',
             _text(State.UNCLAIMED, Activity.IDLE, 103.0)]
    seen = []
    for text in texts:
        with kept.lend(text, "slot ad") as ad:
            _same(ad, text)
            seen.append(ad)
    assert all(ad is seen[0] for ad in seen)
    assert "Extra" not in seen[0] and "More" not in seen[0]


def test_values_are_read_as_parse_ad_reads_them() -> None:
    for text in ("0", "-12", "123456789012345678901", '"plain"', '"a\\"b"', "true",
                 "FALSE", "1.5", "undefined", "Memory > 2", "{ 1, 2 }"):
        parsed = ads.parse_ad(f"X = {text}\n")
        value = value_of(text)
        holder = ads.from_dict({})
        holder["X"] = value
        assert ads.to_dict(holder) == ads.to_dict(parsed), text


def test_a_text_that_is_not_plain_lines_is_parsed_whole() -> None:
    assert lines_of("[ Name = \"s\"; A = 1 ]") is None
    assert lines_of('Name = "s"\n# a comment\n') is None
    assert lines_of('Name = "s"\nname = "t"\n') is None
    kept = SlotAds()
    with kept.lend("[ Name = \"s\"; A = 1 ]", "slot ad") as ad:
        assert ad["A"] == 1
    with pytest.raises(AdError, match="slot ad"):
        with kept.lend('Name = "s"\nA = (((\n', "slot ad"):
            pass


def test_a_bad_line_after_a_good_text_raises_and_the_next_good_text_is_whole() -> None:
    kept = SlotAds()
    good = _text(State.UNCLAIMED, Activity.IDLE, 100.0)
    with kept.lend(good, "slot ad"):
        pass
    with pytest.raises(AdError, match="slot ad"):
        with kept.lend(good + "Bad = (((\n", "slot ad"):
            pass
    later = _text(State.CLAIMED, Activity.BUSY, 101.0)
    with kept.lend(later, "slot ad") as ad:
        _same(ad, later)


def test_a_slot_ad_lent_out_is_not_changed_under_its_borrower() -> None:
    kept = SlotAds()
    first = _text(State.UNCLAIMED, Activity.IDLE, 100.0)
    second = _text(State.CLAIMED, Activity.BUSY, 101.0)
    with kept.lend(first, "slot ad") as held:
        done = threading.Event()

        def other() -> None:
            with kept.lend(second, "slot ad") as ad:
                assert ad is not held
                _same(ad, second)
            done.set()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(10)
        assert done.is_set()
        _same(held, first)


def test_changing_the_kept_ads_does_not_grow_the_process() -> None:
    kept = SlotAds()
    texts = [_text(state, activity, 1000.0 + index)
             for index in range(50)
             for state, activity in ((State.UNCLAIMED, Activity.IDLE),
                                     (State.CLAIMED, Activity.BUSY))]
    me = psutil.Process()
    for text in texts * 20:
        with kept.lend(text, "slot ad"):
            pass
    before_kb = me.memory_info().rss // 1024
    for _ in range(100):
        for text in texts:
            with kept.lend(text, "slot ad"):
                pass
    # 10,000 new ads would keep some 1.4 MB.
    assert me.memory_info().rss // 1024 - before_kb < 512
