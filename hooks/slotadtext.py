"""The slot ad a fetch hook reads, parsed once per distinct text.

A startd hands its fetch hook the same slot ad text until the slot changes
(or the second of MyCurrentTime does), and classad2 keeps a little memory
from every expression it parses and every attribute it hands out: an
in-process (`python:`) fetch hook that parsed the text and wrote its
published shape at every fetch made the startd grow with every job. Ads
from here are shared: read them, do not change them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import classad2

from fetchwork.config import ads

# Distinct texts kept (a few per slot of the startd).
KEPT = 64

_lock = threading.Lock()
_ads: dict[str, classad2.ClassAd] = {}
# id of a kept ad -> its shape (the ads are alive while kept, so ids are not reused).
_shapes: dict[int, str] = {}


def parsed(text: str, source: str) -> classad2.ClassAd:
    """ads.parse_ad(text), once per distinct text."""
    with _lock:
        ad = _ads.get(text)
    if ad is None:
        ad = ads.parse_ad(text, source=source)
        with _lock:
            if len(_ads) >= KEPT:
                _ads.clear()
                _shapes.clear()
            _ads[text] = ad
    return ad


def shape(ad: classad2.ClassAd, write: Callable[[classad2.ClassAd], str]) -> str:
    """write(ad), once per kept ad (any other ad: each time)."""
    with _lock:
        known = _shapes.get(id(ad))
    if known is not None:
        return known
    text = write(ad)
    with _lock:
        if any(other is ad for other in _ads.values()):
            _shapes[id(ad)] = text
    return text
