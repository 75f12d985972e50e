"""The autocluster index of the idle set: a claim evaluates one job per autocluster.

Jobs whose match-relevant attributes are equal (broker/autoclusters.py) share
an autocluster. The submitter gives each job its id (FetchworkAutocluster)
and writes the autocluster's representative once in `ac:reps`; the Lua
scripts keep `ac:groups` and `ac:members` in step with the idle set, in the
same script as every change of it (lua/acindex.lua idle_add, idle_remove), so
the policy pass, holds, claims and releases never leave the index stale.

A claim reads the autoclusters with idle jobs and evaluates each
representative against its slot once; its candidates are then the idle jobs
of the matching autoclusters, merged in priority order (the same order as the
idle set's). A slot that matches nothing costs one read of the autoclusters.
A representative decides for all its jobs only when the slot's START reads
nothing of a job beyond it; otherwise each job of an autocluster whose
Requirements accept the slot is evaluated, as are jobs without an
autocluster. When the index does not cover the idle set (jobs queued before
it existed), a claim walks the idle set itself.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import classad2
from redis.client import Pipeline

from fetchwork.broker.autoclusters import start_job_reads
from fetchwork.broker.store import Store, calls, codec
from fetchwork.broker.store.acmembers import SEPARATOR, order_text, parse_member
from fetchwork.config.ads import values_of
from fetchwork.config.keptad import KeptAd
from fetchwork.config.matching import job_refuses, matches
from fetchwork.errors import AdError

log = logging.getLogger(__name__)

Rows = list[tuple[bytes, float]]
# Representatives a claimer keeps decoded (they never change for an id).
REPS_KEPT = 10_000
# Slots whose verdicts per autocluster a claimer keeps, each for the last text of its
# ad (a startd hands the same slot ad until the slot changes, or the second of
# MyCurrentTime does; cleared when full). One entry per slot, not per text: a
# startd's slot ad text changes at every job, and an entry per text grew the
# startd by a few MB before each clearing.
SLOTS_KEPT = 4096
# One past the separator: the end of an autocluster's range of members.
_AFTER = chr(ord(SEPARATOR) + 1)
# The first read also brings the heads of this many autoclusters (the best
# placed), this many jobs each: a claim whose job is among them saves a round trip.
PREFETCH_GROUPS = 16
PREFETCH_JOBS = 8


class IdleWalk:
    """Candidates without the index: the idle set in order, each job evaluated."""

    def __init__(self, store: Store, first: Rows):
        self.store = store
        self.first = first
        self.prechecked: set[str] = set()

    def rows_after(self, score: float | None, batch: int) -> Rows:
        if score is None:
            return self.first
        return self.store.scored(self.store.keys.idle, f"({score!r}", count=batch)


class GroupWalk:
    """Candidates through the index: the idle jobs of the autoclusters `judge` lets
    match, merged by idle score. `gids` come best first (`bests`: each one's best
    score), so an autocluster whose best comes after a full batch is not judged nor
    read. Jobs of autoclusters whose representative decided match already
    (`prechecked` gathers their ids)."""

    def __init__(self, store: Store, gids: list[str], bests: dict[str, float],
                 judge: Callable[[str], tuple[bool, bool]], heads: dict[str, list[bytes]]):
        self.store = store
        self.gids = gids
        self.bests = bests
        self.judge = judge
        self.prechecked: set[str] = set()
        # Prefetched first members (PREFETCH_JOBS at most) of the first autoclusters.
        self.heads = heads
        self._trusted: set[str] = set()

    def rows_after(self, score: float | None, batch: int) -> Rows:
        floor = float("-inf") if score is None else int(score) + 1
        rows: Rows = []
        for first in range(0, len(self.gids), PREFETCH_GROUPS):
            if len(rows) >= batch:
                rows = sorted(rows, key=lambda row: row[1])[:batch]
                if max(self.bests.get(self.gids[first], floor), floor) > rows[-1][1]:
                    break
            chunk = [gid for gid in self.gids[first:first + PREFETCH_GROUPS] if self._fits(gid)]
            rows += self._members(chunk, score, batch)
        return sorted(rows, key=lambda row: row[1])[:batch]

    def _fits(self, gid: str) -> bool:
        alone, fits = self.judge(gid)
        if fits and alone:
            self._trusted.add(gid)
        return fits

    def _members(self, gids: list[str], score: float | None, batch: int) -> Rows:
        """The first `batch` idle jobs after `score` of each of `gids`."""
        known = score is None and batch <= PREFETCH_JOBS
        replies = {gid: self.heads[gid] for gid in gids if known and gid in self.heads}
        missing = [gid for gid in gids if gid not in replies]
        if missing:
            pipe = self.store.client.pipeline(transaction=False)
            for gid in missing:
                low = "" if score is None else order_text(gid, int(score) + 1)
                pipe.zrangebylex(self.store.keys.ac_members, f"[{gid}{SEPARATOR}{low}",
                                 f"({gid}{_AFTER}", start=0, num=batch)
            replies.update(zip(missing, pipe.execute(), strict=True))
        rows: Rows = []
        for reply in replies.values():
            for raw in reply:
                gid, order, job_id = parse_member(codec.text(raw))
                rows.append((job_id.encode(), float(order)))
                if gid in self._trusted:
                    self.prechecked.add(job_id)
        return rows


class SlotVerdicts:
    """One slot ad's verdicts per autocluster, judged once and kept for both steps of
    the claim: the full claim's walk reads them one by one, the quiet claim hands
    claim_quiet.lua the autoclusters by verdict (`args`)."""

    def __init__(self) -> None:
        # id -> (the representative decides for every job, the autocluster may match).
        self._by_id: dict[str, tuple[bool, bool]] = {}
        self._args: tuple[str, str, str] | None = ("", "", "")
        self._lock = threading.Lock()

    def get(self, gid: str) -> tuple[bool, bool] | None:
        return self._by_id.get(gid)

    def learn(self, verdicts: list[tuple[str, bool, bool]]) -> None:
        """Keep (id, the representative decides, the autocluster may match) verdicts."""
        with self._lock:
            for gid, alone, fits in verdicts:
                self._by_id[gid] = (alone, fits)
            self._args = None

    def args(self) -> tuple[str, str, str]:
        """claim_quiet.lua's autoclusters, space-separated: those whose representative
        matches the slot for all their jobs, those that cannot match, those whose jobs
        must be judged one by one."""
        with self._lock:
            if self._args is None:
                matching: list[str] = []
                refusing: list[str] = []
                judged: list[str] = []
                for gid, (alone, fits) in self._by_id.items():
                    (matching if fits and alone else judged if fits else refusing).append(gid)
                self._args = (" ".join(matching), " ".join(refusing), " ".join(judged))
            return self._args


class GroupIndex:
    """The claim side of the index for one pool's store (shared by a claimer's threads)."""

    def __init__(self, store: Store):
        self.store = store
        # id -> (representative ad, its attribute names), or None when unusable.
        self._reps: dict[str, tuple[classad2.ClassAd, frozenset[str]] | None] = {}
        # The slot's Name -> a digest of its ad's text and its verdicts per autocluster
        # (str() of an ad costs classad2 no memory; evaluations do).
        self._slots: dict[str, tuple[bytes, SlotVerdicts]] = {}
        self._lock = threading.Lock()

    def read(self, pipe: Pipeline) -> None:
        """Add the index's first read (read_groups.lua) to a claim's first pipeline."""
        calls.read_groups(self.store, pipe, heads_of=PREFETCH_GROUPS, jobs_each=PREFETCH_JOBS)

    def verdicts(self, slot: classad2.ClassAd) -> SlotVerdicts:
        """The verdicts per autocluster kept for this slot ad (cleared when SLOTS_KEPT
        slot ads are kept)."""
        text = hashlib.blake2b(str(slot).encode(), digest_size=16).digest()
        name = slot.get("Name")
        key = name if isinstance(name, str) else ""
        with self._lock:
            kept = self._slots.get(key)
            if kept is None or kept[0] != text:
                if kept is None and len(self._slots) >= SLOTS_KEPT:
                    self._slots.clear()
                kept = self._slots[key] = (text, SlotVerdicts())
            return kept[1]

    def walk(self, slot: classad2.ClassAd, first: Rows, reply: list[Any]) -> IdleWalk | GroupWalk:
        """Where the claim of `slot` finds its candidates (`first`: the idle set's head,
        `reply`: read_groups.lua's, both from the claim's first read)."""
        groups, idle_count, member_count, heads = reply
        if idle_count != member_count:
            return IdleWalk(self.store, first)
        gids = [codec.text(gid) for gid in groups[0::2]]
        bests = {gid: float(best) for gid, best in zip(gids, groups[1::2], strict=True)}
        self._load([gid for gid in gids if gid and gid not in self._reps])
        verdicts = self.verdicts(slot)
        reads: list[frozenset[str] | None] = []

        def judge(gid: str) -> tuple[bool, bool]:
            """(the representative decides, the autocluster may match); no
            representative: each job is evaluated."""
            verdict = verdicts.get(gid)
            if verdict is None:
                if not reads:
                    reads.append(start_job_reads(slot))
                verdict = self._verdict(gid, slot, reads[0])
                verdicts.learn([(gid, *verdict)])
            return verdict

        return GroupWalk(self.store, gids, bests, judge, dict(zip(gids, heads, strict=False)))

    def judge(self, slot: classad2.ClassAd, gids: list[str]) -> int:
        """Judge `gids` for `slot`, in order up to the first that may match (the quiet
        claim's lazy judging), and keep the verdicts; how many were judged."""
        verdicts = self.verdicts(slot)
        gids = [gid for gid in gids if verdicts.get(gid) is None]
        self._load([gid for gid in gids if gid and gid not in self._reps])
        reads = start_job_reads(slot)
        judged = []
        for gid in gids:
            alone, fits = self._verdict(gid, slot, reads)
            judged.append((gid, alone, fits))
            if fits:
                break
        verdicts.learn(judged)
        return len(judged)

    def _verdict(self, gid: str, slot: classad2.ClassAd, reads: frozenset[str] | None
                 ) -> tuple[bool, bool]:
        """(the representative decides, the autocluster may match); no representative
        (or no autocluster): each job is evaluated."""
        rep = self._reps.get(gid) if gid else None
        return (False, True) if rep is None else _verdict(rep, slot, reads)

    def _load(self, gids: list[str]) -> None:
        if not gids:
            return
        if len(self._reps) + len(gids) > REPS_KEPT:
            self._reps.clear()
        for gid, raw in zip(gids, self.store.client.hmget(self.store.keys.ac_reps, gids),
                            strict=True):
            self._reps[gid] = None if raw is None else _decoded(gid, raw)


def _verdict(rep: tuple[classad2.ClassAd, frozenset[str]], slot: classad2.ClassAd,
             reads: frozenset[str] | None) -> tuple[bool, bool]:
    """(whether the representative decides for every job of its autocluster, whether
    the autocluster may match the slot)."""
    ad, names = rep
    if reads is not None and reads <= names:
        return True, matches(ad, slot)
    return False, not job_refuses(ad, slot)


def _decoded(gid: str, raw: bytes | str) -> tuple[classad2.ClassAd, frozenset[str]] | None:
    try:
        rep = codec.unpack(codec.as_bytes(raw).split(b"\n", 1)[1])
        # A kept ad: a slot ad's text changes at every job, and judging it reads the
        # representative's Requirements back without making an ExprTree each time.
        return KeptAd(values_of(rep)), frozenset(name.lower() for name in rep)
    except (AdError, IndexError, ValueError) as exc:
        log.warning("autocluster %s: unreadable representative (%s); its jobs are "
                    "evaluated one by one", gid, exc)
        return None

