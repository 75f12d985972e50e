"""A ClassAd that reads its attributes back without making classad2 objects.

classad2 keeps about 0.14 KB of every ClassAd and ExprTree object it makes,
even once the object is freed, and reading an expression attribute back
(`ad["Start"]`, `ad.get`, `in`, `lookup`) makes a new ExprTree object each
time. A daemon that reads its ads at every job grows with every job.

A `KeptAd` is a ClassAd that also remembers, in Python, the value each
attribute was set to: a plain literal, or an expression object parsed once
per process by `ads.parse_expr`. Reading such an attribute back returns that
value and makes nothing; evaluating it (`ads.evaluate_attr`) evaluates the
kept object with the ad as MY. Any other value (a list, a nested ad, an
expression object made elsewhere) is read from the ad itself, as before.

`load` brings a kept ad to a set of values in place, setting only those that
changed and deleting those that are gone, so one ad serves one job after the
other (classad2's assignment into an existing ad keeps nothing). `version`
counts the changes, for callers that keep something derived from the ad.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import classad2

from fetchwork.config import ads

_UNKEPT = object()


def _kept_form(value: Any) -> Any:
    """What to remember of `value`: itself when reading it back from the ad would give
    it (a scalar literal, an expression of parse_expr's), else _UNKEPT."""
    if isinstance(value, classad2.Value):
        return _UNKEPT
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, classad2.ExprTree) and ads.is_parsed_expression(value):
        return value
    return _UNKEPT


def _same(old: Any, new: Any) -> bool:
    if old is new:
        return True
    if old is _UNKEPT or isinstance(new, classad2.ExprTree) or type(old) is not type(new):
        return False
    return bool(old == new)


class KeptAd(classad2.ClassAd):
    """A ClassAd whose literal and parsed-expression values are read back from Python."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        # Attribute names are case-insensitive: lower-cased name -> (name, value kept).
        self._kept: dict[str, tuple[str, Any]] = {}
        self.version = 0
        if values:
            self.load(values)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._kept[key.lower()] = (key, _kept_form(value))
        self.version += 1

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._kept.pop(key.lower(), None)
        self.version += 1

    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str):
            raise TypeError("ClassAd keys are strings")
        kept = self._kept.get(key.lower())
        if kept is None:
            raise KeyError(key)
        return super().__getitem__(key) if kept[1] is _UNKEPT else kept[1]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._kept

    def lookup(self, attr: str) -> classad2.ExprTree:
        kept = self._kept.get(attr.lower()) if isinstance(attr, str) else None
        if kept is not None and isinstance(kept[1], classad2.ExprTree):
            return kept[1]
        return super().lookup(attr)

    def load(self, values: Mapping[str, Any], keep: Iterable[str] = ()) -> None:
        """Make the ad hold exactly `values` (and the attributes named in `keep` it
        already has), changing in place only what differs."""
        wanted = {name.lower() for name in values}
        wanted.update(name.lower() for name in keep)
        for lowered, (name, _value) in list(self._kept.items()):
            if lowered not in wanted:
                del self[name]
        for name, value in values.items():
            kept = self._kept.get(name.lower())
            if kept is None or kept[0] != name or not _same(kept[1], _kept_form(value)):
                self[name] = value

    def attrs(self) -> dict[str, Any]:
        """The ad's attributes by name, as they read back (a new dict)."""
        return {name: self[name] for _lowered, (name, _value) in self._kept.items()}
