"""The slot ad the reference fetch hook claims with: one ClassAd per slot, changed in place.

A startd hands its fetch hook a slot ad text that differs from the previous
one in a few lines per job (State, Activity, the times, the claim), and
classad2 keeps a little memory from every ClassAd object made, even once it
is freed: a fetch hook that parsed each text into a new ad made an in-process
(`python:`) startd grow with every job. Here each slot (by its `Name` line)
keeps one ad; a new text is compared line by line with the last one, and only
the lines that differ are set (or deleted) in it. Values are read as
`ads.parse_ad` reads them: a plain integer, string or boolean directly, any
other expression through `ads.parse_expr`, which parses each text once per
process, so no new object is made for a line seen before. A text that is not
one `Name = value` per line (a new-format ad, a comment, a repeated name, a
line that does not parse) is parsed whole, as before.

The kept ad is lent to one fetch at a time (`lend`); a second fetch for the
same slot while the first still holds it gets an ad of its own.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import classad2

from fetchwork.config import ads
from fetchwork.config.keptad import KeptAd
from fetchwork.errors import AdError

# Slots kept (a startd has a few; more means several startds share this process).
KEPT = 64

_LINE_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=(.*)\Z")


def lines_of(text: str) -> dict[str, str] | None:
    """The `Name = value` lines of `text` by name (value text stripped), in order; None
    when the text is anything else."""
    if text.lstrip().startswith("["):
        return None
    found: dict[str, str] = {}
    lowered: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE_RE.match(line)
        if match is None:
            return None
        name, value = match.group(1), match.group(2).strip()
        if not value or name.lower() in lowered:
            return None
        lowered.add(name.lower())
        found[name] = value
    return found


def value_of(text: str) -> Any:
    """The value of one attribute's text, as `ads.parse_ad` sets it."""
    return ads.plain_literal(text)


@dataclass
class _Kept:
    ad: classad2.ClassAd
    lines: dict[str, str]
    lent: bool = False


class SlotAds:
    """The kept ad of each slot a fetch hook of this process was called for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[str, _Kept] = {}

    @contextmanager
    def lend(self, text: str, source: str) -> Iterator[classad2.ClassAd]:
        """The slot ad `text` describes, for the length of the `with` block; AdError
        (naming `source` and the line) when it is not an ad."""
        kept = self._borrow(text)
        if kept is None:
            yield ads.parse_ad(text, source=source)
            return
        try:
            yield kept.ad
        finally:
            with self._lock:
                kept.lent = False

    def _borrow(self, text: str) -> _Kept | None:
        """The slot's kept ad brought up to `text` and marked lent; None when the text
        is to be parsed whole (then the ad it gives is kept for the next text)."""
        lines = lines_of(text)
        name = lines.get("Name") if lines is not None else None
        if lines is None or name is None:
            return None
        with self._lock:
            kept = self._slots.get(name)
            if kept is None:
                if len(self._slots) >= KEPT:
                    self._slots.clear()
                try:
                    # A kept ad: the claim reads the slot's START back without
                    # making an ExprTree object each time (config/keptad.py).
                    ad = KeptAd(ads.parse_values(text))
                except AdError:
                    return None  # parsed again, to raise with the source named
                kept = self._slots[name] = _Kept(ad, lines, lent=True)
                return kept
            if kept.lent:
                return None  # another fetch of this slot holds it: an ad of its own
            kept.lent = True
        try:
            _update(kept, lines)
        except AdError:
            with self._lock:
                self._slots.pop(name, None)
            return None
        return kept


def _update(kept: _Kept, lines: dict[str, str]) -> None:
    """Set the lines of `lines` that differ from the kept ones, delete those gone;
    every value is read before the ad is touched, so a bad one changes nothing."""
    values = {name: value_of(value) for name, value in lines.items()
              if kept.lines.get(name) != value}
    for name in [name for name in kept.lines if name not in lines]:
        del kept.ad[name]
    for name, value in values.items():
        kept.ad[name] = value
    kept.lines = lines
