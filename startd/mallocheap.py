"""The startd's C heap: one malloc arena for all its threads, trimmed as jobs go by.

glibc gives each thread that allocates while another does an arena of its
own (up to eight a core) and keeps, inside each, the pages freed there. A
startd's hook threads take turns at the jobs' fetches, replies and reports,
so each of its half-dozen arenas held a few hundred KB it had freed, and
the mapped size of each crept up with the jobs run while what was in use
there stayed at tens of KB (`bench/startd_memory.py` prints both, arena by
arena). Its threads spend their time waiting on Redis and on hooks, so they
lose nothing by sharing one arena, whose freed memory every thread reuses.

`one_arena()` is called before the startd starts any thread; `HeapTrim`
gives the arena's free pages back to the system every `TRIM_EVERY_JOBS`
jobs (`malloc_trim(0)`, about a millisecond), so what fragmentation is left
cannot pile up either. Elsewhere than on glibc both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# mallopt's parameter for the most arenas glibc makes (malloc.h's M_ARENA_MAX).
_M_ARENA_MAX = -8
# Jobs fetched between two trims of the heap's free pages.
TRIM_EVERY_JOBS = 1000


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return None  # not glibc
    return libc


_LIBC = _libc()


def one_arena() -> bool:
    """Have every thread of this process allocate from the main arena; whether it took."""
    if _LIBC is None:
        return False
    done = bool(_LIBC.mallopt(_M_ARENA_MAX, 1))
    if not done:
        log.debug("mallopt(M_ARENA_MAX, 1) was refused; threads keep arenas of their own")
    return done


class HeapTrim:
    """Counts jobs; gives the heap's free pages back every `every_jobs` of them."""

    def __init__(self, every_jobs: int = TRIM_EVERY_JOBS):
        self.every_jobs = every_jobs
        self._jobs = 0

    def job(self) -> bool:
        """Note one job; whether the heap was trimmed now."""
        self._jobs += 1
        if self._jobs < self.every_jobs or _LIBC is None:
            return False
        self._jobs = 0
        _LIBC.malloc_trim(0)
        return True
