"""One ClassAd per slot, changed in place where its attributes change.

The loop looks at a slot's ad several times per job (START, FetchWorkDelay,
the fetch hook's input, the starter's machine ad), and its attributes change
several times per job (State, Activity, the claim, MyCurrentTime). classad2
keeps a little memory (about 0.14 KB) from every ClassAd object made, even
once it is freed, so a startd that made a new ad at each change grew with
every job it ran. Here each slot has one ad for its whole life: the
attributes are built as plain values, compared with the last ones, and only
those that differ are set (or deleted) in the kept ad. Nothing outside the
loop's thread may keep the ad itself across a change: hooks get its text.

The ad is a kept ad (config/keptad.py): reading an attribute back out of it
(`ad["Start"]`, which evaluate_attr does) gives the value it was set to and
makes no ExprTree object, which would leak the same way. The text is written
from the built values, one line per attribute and only the changed lines
again, and what the loop evaluates of the ad at every round (whether START is
false) is kept until the ad changes (`derived`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.config.keptad import KeptAd

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


class _LineWriter:
    """`Name = value` lines of built values, without reading them back from an ad: a
    literal is written from its value, an expression is unparsed from the object the
    value is, once (the policy expressions are few objects)."""

    def __init__(self) -> None:
        self._unparsed: dict[int, tuple[Any, str]] = {}

    def line(self, name: str, value: Any) -> str:
        if isinstance(value, classad2.ExprTree):
            kept = self._unparsed.get(id(value))
            if kept is None or kept[0] is not value:
                if len(self._unparsed) >= 256:
                    self._unparsed.clear()
                kept = self._unparsed[id(value)] = (value, ads.unparse(value))
            return f"{name} = {kept[1]}"
        return f"{name} = {ads.value_text(value)}"


@dataclass
class _Kept:
    ad: classad2.ClassAd = field(default_factory=KeptAd)
    inputs: Hashable = _NOTHING
    attrs: Mapping[str, Any] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    derived: dict[str, Any] = field(default_factory=dict)


class SlotAdCache:
    """The current ad (and its text) of each slot of one startd."""

    def __init__(self) -> None:
        self._slots: dict[Hashable, _Kept] = {}
        self._writer = _LineWriter()

    def ad(self, slot_id: Hashable, inputs: Hashable,
           build: Callable[[], Mapping[str, Any]]) -> classad2.ClassAd:
        """The slot's ad, brought up to date with `build()` when `inputs` changed."""
        kept = self._slots.get(slot_id)
        if kept is None:
            kept = self._slots[slot_id] = _Kept()
        elif kept.inputs == inputs:
            return kept.ad
        attrs = build()
        to_set, to_delete = changes(kept.attrs, attrs)
        for name, value in to_set.items():
            kept.ad[name] = value
            kept.lines[name] = self._writer.line(name, value)
        for name in to_delete:
            del kept.ad[name]
            del kept.lines[name]
        if to_set or to_delete:
            kept.text = None
            kept.derived.clear()
        kept.inputs, kept.attrs = inputs, attrs
        return kept.ad

    def text(self, slot_id: Hashable, ad: classad2.ClassAd) -> str:
        """The text of the slot's current `ad` (as format_ad writes it), once per change."""
        kept = self._slots.get(slot_id)
        if kept is None or kept.ad is not ad:
            return ads.format_ad(ad)
        if kept.text is None:
            kept.text = "".join(line + "\n" for line in kept.lines.values())
        return kept.text

    def value(self, slot_id: Hashable, ad: classad2.ClassAd, name: str) -> Any:
        """The value attribute `name` of the slot's current `ad` was set to (an
        expression object or a literal), to evaluate rather than read back; None when
        `ad` is not the slot's current one or has no such attribute."""
        kept = self._slots.get(slot_id)
        if kept is None or kept.ad is not ad:
            return None
        return kept.attrs.get(name)

    def derived(self, slot_id: Hashable, ad: classad2.ClassAd, what: str,
                compute: Callable[[classad2.ClassAd, Mapping[str, Any]], Any]) -> Any:
        """`compute(ad, attrs)` for the slot's current `ad` and the values it was built
        from (evaluate those rather than read expressions back), once per change."""
        kept = self._slots.get(slot_id)
        if kept is None or kept.ad is not ad:
            return compute(ad, {})
        if what not in kept.derived:
            kept.derived[what] = compute(ad, kept.attrs)
        return kept.derived[what]

    def forget(self, slot_id: Hashable) -> None:
        """A slot that is gone (a dynamic slot reaped) keeps no ad here."""
        self._slots.pop(slot_id, None)
