"""Slot ads built once per change of what they show, not at every look.

The loop looks at a slot's ad several times per job (START, FetchWorkDelay,
the fetch hook's input, the starter's machine ad), and classad2 keeps a
little memory from every ad it builds and every attribute it hands out, so a
startd that rebuilt the ad at each look grew with every job. An ad is kept
while its inputs are unchanged (slot state, claim, machine facts, policy, and
the second of MyCurrentTime), with its text for the hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import classad2

from fetchwork.config import ads


class SlotAdCache:
    """The current ad (and its text) of each slot of one startd."""

    def __init__(self) -> None:
        self._ads: dict[Hashable, tuple[Hashable, classad2.ClassAd, list[str]]] = {}

    def ad(self, slot_id: Hashable, inputs: Hashable,
           build: Callable[[], classad2.ClassAd]) -> classad2.ClassAd:
        """The slot's ad for `inputs`, built by `build` when they changed."""
        kept = self._ads.get(slot_id)
        if kept is not None and kept[0] == inputs:
            return kept[1]
        ad = build()
        self._ads[slot_id] = (inputs, ad, [])
        return ad

    def text(self, slot_id: Hashable, ad: classad2.ClassAd) -> str:
        """format_ad of the slot's current `ad`, formatted once."""
        kept = self._ads.get(slot_id)
        if kept is None or kept[1] is not ad:
            return ads.format_ad(ad)
        if not kept[2]:
            kept[2].append(ads.format_ad(ad))
        return kept[2][0]
