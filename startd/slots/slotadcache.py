"""One ClassAd per slot, changed in place where its attributes change.

The loop looks at a slot's ad several times per job (START, FetchWorkDelay,
the fetch hook's input, the starter's machine ad), and its attributes change
several times per job (State, Activity, the claim, MyCurrentTime). classad2
keeps a little memory (about 0.14 KB) from every ClassAd object made, even
once it is freed, so a startd that made a new ad at each change grew with
every job it ran. Here each slot has one ad for its whole life: the
attributes are built as plain values, compared with the last ones, and only
those that differ are set (or deleted) in the kept ad. Its text for the hooks
is formatted once per change. Nothing outside the loop's thread may keep the
ad itself across a change: hooks get its text.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import classad2

from fetchwork.config import ads

_NOTHING = object()


def same_value(old: Any, new: Any) -> bool:
    """Whether `new` would set the attribute to what `old` set it to. A policy
    expression is one parsed object per text, so the same object means the same
    expression; plain values compare by type and value (True is not 1)."""
    if old is new:
        return True
    if isinstance(new, classad2.ExprTree) or type(old) is not type(new):
        return False
    return bool(old == new)


def changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What to set and what to delete to turn attributes `old` into `new`."""
    to_set = {name: value for name, value in new.items()
              if not same_value(old.get(name, _NOTHING), value)}
    return to_set, [name for name in old if name not in new]


def apply_changes(ad: MutableMapping[str, Any], old: Mapping[str, Any],
                  new: Mapping[str, Any]) -> bool:
    """Make `ad` (holding `old`) hold `new`; whether anything changed."""
    to_set, to_delete = changes(old, new)
    for name, value in to_set.items():
        ad[name] = value
    for name in to_delete:
        del ad[name]
    return bool(to_set or to_delete)


@dataclass
class _Kept:
    ad: classad2.ClassAd = field(default_factory=classad2.ClassAd)
    inputs: Hashable = _NOTHING
    attrs: Mapping[str, Any] = field(default_factory=dict)
    text: str | None = None


class SlotAdCache:
    """The current ad (and its text) of each slot of one startd."""

    def __init__(self) -> None:
        self._slots: dict[Hashable, _Kept] = {}

    def ad(self, slot_id: Hashable, inputs: Hashable,
           build: Callable[[], Mapping[str, Any]]) -> classad2.ClassAd:
        """The slot's ad, brought up to date with `build()` when `inputs` changed."""
        kept = self._slots.get(slot_id)
        if kept is None:
            kept = self._slots[slot_id] = _Kept()
        elif kept.inputs == inputs:
            return kept.ad
        attrs = build()
        if apply_changes(kept.ad, kept.attrs, attrs):
            kept.text = None
        kept.inputs, kept.attrs = inputs, attrs
        return kept.ad

    def text(self, slot_id: Hashable, ad: classad2.ClassAd) -> str:
        """format_ad of the slot's current `ad`, formatted once per change."""
        kept = self._slots.get(slot_id)
        if kept is None or kept.ad is not ad:
            return ads.format_ad(ad)
        if kept.text is None:
            kept.text = ads.format_ad(ad)
        return kept.text

    def forget(self, slot_id: Hashable) -> None:
        """A slot that is gone (a dynamic slot reaped) keeps no ad here."""
        self._slots.pop(slot_id, None)
