"""Autoclusters: idle jobs grouped by what a match can read of them (HTCondor's autoclusters).

Two jobs whose *significant* attributes are equal match exactly the same
slots, so a claim evaluates one representative per group instead of every
job. The significant attributes of a job are:

- `SIGNIFICANT_ATTRS`: Requirements, Rank, RequestCpus, RequestMemory,
  RequestDisk and Owner (the attributes HTCondor's negotiator and the usual
  slot policies read), Exclusive, MemoryUsage, ImageSize and DiskUsage (the
  rest of what the match rule reads of a job), plus the site's extra attributes (what its
  slots' START expressions read of a job, e.g. AccountingGroup);
- every attribute of the job that its Requirements or Rank read, through
  other attributes too (`Requirements = TARGET.Memory >= MY.Need * 2`,
  `Need = RequestMemory + 10`: Need and RequestMemory).

The representative holds only those attributes, which is enough to evaluate
the job's Requirements against a slot. The slot's START is evaluated
against the representative only when every job attribute it reads is among
the common significant ones (`start_job_reads`); otherwise the claimer
evaluates each member, as without groups, so a group never hides a job a
slot would refuse or accept on another attribute.

Redis representation (one pool; all keys through store/keys.py and KEYS):

    fw:{P}:ac:groups   zset  group id -> best (lowest) FetchworkOrder of its idle jobs
    fw:{P}:ac:members  zset  every idle job, all scores 0, member
                             "<group id>|<order, fixed width>|<job id>" (store/acmembers.py),
                             so a ZRANGEBYLEX on "[<gid>|" gives a group's idle jobs
                             in priority order and its head in O(log N)
    fw:{P}:ac:reps     hash  group id -> watched names and the representative (rep_entry)

The submit script adds members and lowers group scores; claim, hold,
remove and finish remove members and raise a group's score to its new head
(or drop the group when it empties); every script that makes a job IDLE
adds it back. A claim walks `ac:groups` in score order, evaluates each
group's representative once, and claims the head of the first that
matches: with G groups, at most G evaluations and one claim call, whatever
the number of idle jobs (broker/claim/index.py). This module is the pure
part: names, signatures, group ids and representatives.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import classad2

from fetchwork.broker.store import codec
from fetchwork.config.ads import EXPR_KEY

SIGNIFICANT_ATTRS = ("Requirements", "Rank", "RequestCpus", "RequestMemory", "RequestDisk",
                     "Owner",
                     # What the one match rule (config/matching.py) also reads of a job:
                     # exclusivity, and the sizes that stand in for absent requests.
                     "Exclusive", "MemoryUsage", "ImageSize", "DiskUsage")
# Expressions whose references join the significant attributes.
_REFERRING = ("requirements", "rank")
# Bytes of a group id before base64.
GROUP_ID_BYTES = 8
def _ref_names(expr_text: str) -> tuple[str, ...]:
    """Attribute names (lower case, without MY.) an expression may read of its own ad."""
    return _refs_cached(expr_text)


@lru_cache(maxsize=4096)
def _refs_cached(expr_text: str) -> tuple[str, ...]:
    holder = classad2.ClassAd()
    try:
        holder["x"] = classad2.ExprTree(expr_text)
        refs = list(holder.externalRefs(holder.lookup("x")))
        refs += list(holder.internalRefs(holder.lookup("x")))
    except Exception:  # an unparsable expression: it reads nothing we can name
        return ()
    names = []
    for ref in refs:
        lowered = str(ref).lower()
        if not lowered or lowered.startswith("target."):
            continue
        names.append(lowered[3:] if lowered.startswith("my.") else lowered)
    return tuple(sorted(set(names)))


def _text(value: Any) -> str | None:
    if isinstance(value, Mapping) and EXPR_KEY in value:
        return str(value[EXPR_KEY])
    return None


def significant_names(attrs: Mapping[str, Any], extra: Sequence[str] = ()) -> list[str]:
    """The job's significant attribute names (as spelled in `attrs`, else as given), sorted
    case-insensitively."""
    by_lower = {name.lower(): name for name in attrs}
    chosen = {name.lower(): name for name in (*SIGNIFICANT_ATTRS, *extra)}
    todo = [name for name in _REFERRING if name in by_lower]
    seen: set[str] = set()
    while todo:
        lower = todo.pop()
        if lower in seen:
            continue
        seen.add(lower)
        text = _text(attrs[by_lower[lower]])
        for ref in _ref_names(text) if text is not None else ():
            if ref in by_lower:
                chosen.setdefault(ref, by_lower[ref])
                todo.append(ref)
    return [by_lower.get(lower, name) for lower, name in sorted(chosen.items())]


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return (EXPR_KEY, str(value.get(EXPR_KEY)))
    if isinstance(value, list | tuple):
        return tuple(_canonical(item) for item in value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return (type(value).__name__, value)


def signature(attrs: Mapping[str, Any], extra: Sequence[str] = ()) -> tuple[Any, ...]:
    """What a match can read of the job: (lower-case name, canonical value) pairs,
    absent attributes left out."""
    by_lower = {name.lower(): name for name in attrs}
    pairs = []
    for name in significant_names(attrs, extra):
        actual = by_lower.get(name.lower())
        if actual is not None:
            pairs.append((name.lower(), _canonical(attrs[actual])))
    return tuple(pairs)


@lru_cache(maxsize=65536)
def group_id(sig: tuple[Any, ...]) -> str:
    """A short stable id of a signature (11 characters of URL-safe base64, the same
    on every client)."""
    text = json.dumps(sig, separators=(",", ":"), default=str)
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=GROUP_ID_BYTES).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def watched_names(rep: Mapping[str, Any]) -> list[str]:
    """Lower-case names whose change would change what a match reads of a job of this
    representative: its own attributes and every name its expressions read."""
    names = {name.lower() for name in rep}
    for value in rep.values():
        text = _text(value)
        if text is not None:
            names.update(_ref_names(text))
    return sorted(names)


def rep_entry(rep: Mapping[str, Any]) -> bytes:
    """The `ac:reps` value: watched names (lua/acindex.lua ac_watch), a newline, the
    representative (msgpack)."""
    return " ".join(watched_names(rep)).encode() + b"\n" + codec.pack(dict(rep))


def start_job_reads(slot_ad: classad2.ClassAd) -> frozenset[str] | None:
    """Lower-case names of the job attributes the slot's START reads; None when that
    cannot be told.

    A reference counts as the job's when it says TARGET., or when it names
    nothing in the slot ad (an unscoped name falls through to the job).
    """
    # The names, not `"Start" in slot_ad`: that looks START up, an ExprTree object made.
    slot_names = frozenset(name.lower() for name in slot_ad.keys())
    if "start" not in slot_names:
        return frozenset()
    key = _start_key(slot_ad, slot_names)
    if key is not None:
        known = _start_reads.get(key, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
    reads = _start_reads_of(slot_ad, slot_names)
    if key is not None:
        if len(_start_reads) >= START_READS_KEPT:
            _start_reads.clear()
        _start_reads[key] = reads
    return reads


# What the START of each slot ad shape reads (a claim judges its groups again for
# every new slot ad text, a few a job): reading START out of the ad makes an ExprTree
# object, and classad2 keeps a little memory from each one made, even once freed.
START_READS_KEPT = 256
_start_reads: dict[tuple[frozenset[str], tuple[str, ...]], frozenset[str] | None] = {}
_UNKNOWN = object()
# A printed literal value: a number, a string, a boolean (it can refer to nothing).
_LITERAL_RE = re.compile(r'\s*(?:-?[0-9][0-9.eE+-]*|"(?:[^"\\]|\\.)*"|true|false)\s*\Z',
                         re.IGNORECASE)


def _start_key(slot_ad: classad2.ClassAd, slot_names: frozenset[str]
               ) -> tuple[frozenset[str], tuple[str, ...]] | None:
    """What decides `start_job_reads` of `slot_ad`, read from the ad as the library
    prints it (a string, no object): the names of its attributes and every line whose
    value is not a literal (START and whatever it refers to are among them, while the
    clocks and states that change at every job are literals). None when a value of
    the ad spans lines."""
    lines = slot_ad.printOld().splitlines()
    if len(lines) != len(slot_names):
        return None
    return slot_names, tuple(sorted(line for line in lines
                                    if not _LITERAL_RE.match(line.partition("=")[2])))


def _start_reads_of(slot_ad: classad2.ClassAd,
                    slot_names: frozenset[str]) -> frozenset[str] | None:
    try:
        expr = slot_ad.lookup("Start")
        refs = list(slot_ad.externalRefs(expr)) + list(slot_ad.internalRefs(expr))
    except Exception:  # cannot tell what it reads: evaluate each job
        return None
    reads = set()
    for ref in refs:
        lowered = str(ref).lower()
        if not lowered or lowered.startswith("my."):
            continue
        if lowered.startswith("target."):
            reads.add(lowered[7:])
        elif lowered not in slot_names:
            reads.add(lowered)
    return frozenset(reads)


class Grouper:
    """Group ids and representatives for many jobs, each distinct shape worked out once."""

    def __init__(self, extra: Sequence[str] = ()):
        self.extra = tuple(extra)
        self.reps: dict[str, dict[str, Any]] = {}
        self._spelled: dict[tuple[str, ...], tuple[str | None, ...]] = {}
        self._names: dict[tuple[Any, ...], tuple[str, ...]] = {}
        self._gids: dict[tuple[Any, ...], str] = {}

    def gid(self, attrs: Mapping[str, Any]) -> str:
        """The job's group id; its representative is kept in `reps`."""
        keys = tuple(attrs)
        referring = self._spelled.get(keys)
        if referring is None:
            by_lower = {name.lower(): name for name in keys}
            referring = tuple(by_lower.get(name) for name in _REFERRING)
            self._spelled[keys] = referring
        # The significant names depend on which attributes exist and on the
        # texts of Requirements and Rank.
        shape = (keys, *(_text(attrs[name]) if name else None for name in referring))
        names = self._names.get(shape)
        if names is None:
            present = {name.lower() for name in keys}
            names = tuple(name for name in significant_names(attrs, self.extra)
                          if name.lower() in present)
            self._names[shape] = names
        values = (names, *(_hashable(attrs[name]) for name in names))
        gid = self._gids.get(values)
        if gid is None:
            gid = group_id(signature({name: attrs[name] for name in names}, self.extra))
            self._gids[values] = gid
            self.reps.setdefault(gid, {name: attrs[name] for name in names})
        return gid


def _hashable(value: Any) -> Any:
    """A key for a value that tells apart what its canonical form tells apart."""
    if isinstance(value, Mapping):
        return (EXPR_KEY, str(value.get(EXPR_KEY)))
    if isinstance(value, list | tuple):
        return tuple(_hashable(item) for item in value)
    return (type(value), value)
