"""A running startd keeps one malloc arena, and neither threads nor objects grow per job.

A startd's hook threads each used a glibc arena of their own, and each kept
the memory freed in it: the startd's resident memory grew with the jobs it
ran while its Python objects did not. Here a real pool (`fetchwork up`, its
own Redis, the reference hooks) runs its startd's real code; the fetch hook,
a wrapper of the reference one written into the test's folder, counts inside
the startd after a warm-up and again after many more jobs: glibc's arenas
(`malloc_info`), the threads, and the objects the garbage collector tracks, by type.
"""

from __future__ import annotations

import ctypes
import json
import textwrap
from pathlib import Path

import pytest

from tests.support.pools import fw, pool_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

WARMUP, JOBS = 30, 150

PROBE = '''\
import collections, ctypes, gc, json, re, threading

from fetchwork.hooks import reference

OUT, MALLOC, AT = {out!r}, {malloc!r}, {at!r}
_libc = ctypes.CDLL("libc.so.6")
_libc.fopen.restype = ctypes.c_void_p
_libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
_fetched = [0]
_lock = threading.Lock()


def _arenas():
    stream = _libc.fopen(MALLOC.encode(), b"w")
    _libc.malloc_info(0, stream)
    _libc.fclose(stream)
    with open(MALLOC) as text:
        return len(re.findall(r'<heap nr="', text.read()))


def fetch(args, stdin_text):
    out = reference.fetch_work(args, stdin_text)
    if out:
        with _lock:  # the two slots' fetches may run at once
            _fetched[0] += 1
            fetched = _fetched[0]
        if fetched in AT:
            gc.collect()
            with open(OUT, "a") as counts:
                counts.write(json.dumps({{"jobs": fetched, "arenas": _arenas(),
                                          "threads": threading.active_count(),
                                          "types": collections.Counter(
                                              type(o).__qualname__
                                              for o in gc.get_objects())}}) + "\\n")
    return out
'''


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "malloc_info")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc arenas only")
def test_the_startd_keeps_one_arena_and_grows_no_thread_or_object_per_job(
        job_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = job_tmp / "hooks"
    hooks.mkdir()
    counts = job_tmp / "counts.jsonl"
    (hooks / "heapprobe.py").write_text(PROBE.format(
        out=str(counts), malloc=str(job_tmp / "malloc.xml"), at=(WARMUP, WARMUP + JOBS)))
    monkeypatch.setenv("PYTHONPATH", str(hooks))
    with pool_up(job_tmp, 2, FETCHWORK_HOOK_FETCH_WORK="python:heapprobe:fetch") as pool:
        work = pool.folder("work")
        (work / "many.sub").write_text(textwrap.dedent(f"""\
            executable = /bin/true
            queue {WARMUP + JOBS + 5}
        """))
        fw(pool.env, "submit", "many.sub", cwd=work)
        wait_until(lambda: counts.exists() and len(counts.read_text().splitlines()) >= 2,
                   timeout_s=240, fail_if=pool.up.died,
                   what=f"the startd's counts after {WARMUP} and {WARMUP + JOBS} jobs")
    before, after = (json.loads(line) for line in counts.read_text().splitlines()[:2])
    assert after["jobs"] - before["jobs"] == JOBS
    # Every thread allocates from the main arena (without it: one a hook thread).
    assert before["arenas"] == after["arenas"] == 1, (before["arenas"], after["arenas"])
    # Hook threads are reused: none is left behind per job (a busy moment may
    # start a few more, each ending once idle).
    assert after["threads"] < before["threads"] + JOBS // 10, (before["threads"], after["threads"])
    # A structure kept per job makes its type grow by JOBS; the threads' own
    # objects (cells, locks, functions) come and go by a few dozen.
    grown = {name: count - before["types"].get(name, 0)
             for name, count in after["types"].items()}
    most = max(grown, key=lambda name: grown[name])
    assert grown[most] < JOBS // 2, f"{grown[most]} more {most} objects over {JOBS} jobs"
