"""Where a startd's memory goes per job: classad2 objects made, and heap growth.

    python bench/startd_memory.py [--iterations 10000] [--jobs 2000] [--warmup 300]
                                  [--trace] [--no-suspects]

classad2 keeps about 0.14 KB of every ClassAd and ExprTree object it makes,
even once the object is freed; tracemalloc does not see it (C++ allocations).
Two parts:

1. Suspects in isolation: each call `--iterations` times after a warm-up,
   with the heap in use (glibc `mallinfo2`), the resident memory (VmRSS)
   and the classad2 objects made, per call.
2. A real pool (embedded Redis, broker, a 2-slot startd with the reference
   `python:` hooks, as bench/startd_bench.py runs it) whose fetch hook
   counts, inside the startd, every classad2 object made and where (the
   first frame outside classad2 and the ad plumbing, with its caller). After
   a warm-up, `--jobs` `/bin/true` jobs: the objects made per job by site,
   the startd's heap in use and RSS per job, then `malloc_trim(0)` in the
   startd to tell freed-but-kept heap (fragmentation) from memory in use.
   The startd's live objects by type that grew meanwhile (`gc.get_objects()`),
   its threads and pymalloc's arenas (`sys._debugmallocstats()`).
   `--trace`: the startd's Python allocations that grew most meanwhile
   (tracemalloc, which sees Python's allocations but not classad2's).

Prints figures only; the machine may be shared, so RSS figures move a little.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import json
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import classad2

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR.parent) not in sys.path:  # run as a script: bench/ is not a package then
    sys.path.insert(0, str(BENCH_DIR.parent))

from bench.startd_bench import StartdRun, run_jobs  # noqa: E402
from fetchwork.config import ads  # noqa: E402
from fetchwork.config.keptad import KeptAd  # noqa: E402
from fetchwork.config.matching import mismatch  # noqa: E402
from fetchwork.startd.acceptance import decide  # noqa: E402
from fetchwork.startd.fetchoutput import read_fetch_output  # noqa: E402
from fetchwork.startd.states import initial_status  # noqa: E402


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = _MallInfo2


def heap_in_use() -> int:
    """Bytes glibc malloc has handed out and not had back (small and mmapped blocks)."""
    info = LIBC.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Made:
    """Counts classad2 ClassAd and ExprTree objects made (the library's own too)."""

    def __init__(self) -> None:
        self.count = 0
        for cls in (classad2.ClassAd, classad2.ExprTree):
            self._wrap(cls)

    def _wrap(self, cls: type) -> None:
        original = cls.__init__

        def counted(obj: Any, *args: Any, **kwargs: Any) -> None:
            self.count += 1
            original(obj, *args, **kwargs)

        cls.__init__ = counted  # type: ignore[misc]


# -- part 1: suspects in isolation ------------------------------------------------

JOB = {"Cmd": "/bin/true", "Iwd": "/tmp", "Owner": "bench", "QDate": 1795864240,
       "ProcId": 0, "ClusterId": 1, "JobStatus": 2, "RemoteHost": "slot1@h",
       "Rerunnable": True, "GlobalJobId": "p#1.0#1795864240", "JobPrio": 0,
       "FetchworkClaim": "4155995bb7ba4a88990ef999d9a7357c", "JobLeaseDuration": 2400,
       "FetchworkLeaseExpiry": 1795866640.361, "RequestMemory": 64,
       "Requirements": {"$expr": "TARGET.Memory >= RequestMemory"}}


def suspects() -> dict[str, Callable[[], Any]]:
    """The calls a startd makes per job, old way and new way, by name."""
    start = ads.parse_expr('TARGET.Owner =!= "nobody" && TARGET.RequestMemory <= Memory')
    plain = classad2.ClassAd()
    kept = KeptAd()
    for ad in (plain, kept):
        ad.update({"Name": "slot1@h", "Cpus": 1, "Memory": 2048, "Start": start,
                   "Rank": ads.parse_expr("TARGET.JobPrio")})
    plain_job = ads.from_dict(JOB)
    kept_job = KeptAd(ads.values_of(JOB))
    text = ads.format_ad(plain_job)
    status = initial_status(0.0)
    numbers = iter(range(10**9))

    def in_place() -> None:
        number = next(numbers)
        kept_job.load({**ads.values_of(JOB), "FetchworkClaim": f"{number:032x}",
                       "FetchworkLeaseExpiry": 1795866640.0 + number / 1000})

    return {
        "classad2.ClassAd()": classad2.ClassAd,
        "ads.from_dict(job) (the claim's ad)": lambda: ads.from_dict(JOB),
        "ads.parse_ad(job text)": lambda: ads.parse_ad(text),
        "ads.parse_values(job text)": lambda: ads.parse_values(text),
        "ads.AdText(stored values)": lambda: ads.AdText(JOB),
        "ads.AdText(ClassAd)": lambda: ads.AdText(plain_job),
        "ad[expr attr] read back (ClassAd)": lambda: plain_job["Requirements"],
        "ad[expr attr] read back (KeptAd)": lambda: kept_job["Requirements"],
        "ad[literal] = new value, in place": lambda: plain.__setitem__(
            "MyCurrentTime", next(numbers)),
        "KeptAd.load(next job), in place": in_place,
        "ads.format_ad(ClassAd job)": lambda: ads.format_ad(plain_job),
        "ads.format_ad(KeptAd job)": lambda: ads.format_ad(kept_job),
        "mismatch(ClassAd slot, ClassAd job)": lambda: mismatch(plain, plain_job),
        "mismatch(KeptAd slot, KeptAd job)": lambda: mismatch(kept, kept_job),
        "decide(KeptAd slot, KeptAd job)": lambda: decide(status, kept, kept_job, None),
        "read_fetch_output(AdText) (job ad pool)": lambda: read_fetch_output(
            ads.AdText(JOB)),
        "ExprTree.eval(slot, job)": lambda: start.eval(kept, kept_job),
    }


def measure(made: Made, call: Callable[[], Any], iterations: int) -> tuple[float, float, float]:
    """(heap bytes, RSS bytes, classad2 objects) kept per call."""
    for _ in range(1000):
        call()
    gc.collect()
    heap, rss, count = heap_in_use(), rss_kb(), made.count
    for _ in range(iterations):
        call()
    gc.collect()
    return ((heap_in_use() - heap) / iterations, (rss_kb() - rss) * 1024 / iterations,
            (made.count - count) / iterations)


def part_one(iterations: int) -> None:
    made = Made()
    print(f"suspects in isolation, {iterations} calls each (after 1000 to warm up):")
    print(f"  {'call':<42} {'heap B':>8} {'RSS B':>8} {'objects':>8}   per call")
    for name, call in suspects().items():
        heap, rss, objects = measure(made, call, iterations)
        print(f"  {name:<42} {heap:8.1f} {rss:8.1f} {objects:8.2f}")


# -- part 2: the startd of a real pool --------------------------------------------

COUNTING_HOOK = '''\
import collections, ctypes, gc, json, os, sys, threading, tracemalloc

import classad2

from fetchwork.hooks import reference

REPORT, TRIM, SNAPSHOT = {report!r}, {trim!r}, {snapshot!r}
if {trace!r}:
    tracemalloc.start(16)
_SKIP = ("/classad2/", "/config/ads.py", "/config/keptad.py")
_made = collections.Counter()
_jobs = [0]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def _where(frame):
    while frame is not None and any(part in frame.f_code.co_filename for part in _SKIP):
        frame = frame.f_back
    names = []
    for _ in range(2):
        if frame is None:
            break
        where = "/".join(frame.f_code.co_filename.rsplit("/", 2)[-2:])
        names.append("%s:%d %s" % (where, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return " <- ".join(names)


def _wrap(cls):
    original = cls.__init__

    def counted(obj, *args, **kwargs):
        _made[cls.__name__ + " at " + _where(sys._getframe(1))] += 1
        original(obj, *args, **kwargs)

    cls.__init__ = counted


_wrap(classad2.ClassAd)
_wrap(classad2.ExprTree)


def _rss_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def _report(trimmed=None):
    info = _libc.mallinfo2()
    with open(REPORT + ".new", "w") as out:
        json.dump({{"jobs": _jobs[0], "rss_kb": _rss_kb(),
                    "heap": info.uordblks + info.hblkhd, "arena": info.arena,
                    "made": dict(_made), "trimmed": trimmed}}, out)
    os.replace(REPORT + ".new", REPORT)


def _census():
    """The startd's live objects by type, its threads and pymalloc's arenas, now."""
    gc.collect()
    types = collections.Counter(type(obj).__qualname__ for obj in gc.get_objects())
    arenas = None
    if hasattr(sys, "_debugmallocstats"):
        import tempfile
        with tempfile.TemporaryFile("w+") as err:
            saved = os.dup(2)
            os.dup2(err.fileno(), 2)
            try:
                sys._debugmallocstats()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            err.seek(0)
            for line in err:
                if line.startswith("# arenas allocated current"):
                    arenas = int(line.split("=")[1].replace(",", ""))
    with open(SNAPSHOT + ".census", "w") as out:
        json.dump({{"types": dict(types), "threads": threading.active_count(),
                    "arenas": arenas, "maps": _maps(), "blocks": sys.getallocatedblocks(),
                    "sizes": _sizes(), "arenas_in_use": _arenas_in_use()}}, out)


_libc.fopen.restype = ctypes.c_void_p
_libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]


def _arenas_in_use():
    """Bytes in use and mapped in each glibc malloc arena (malloc_info: mallinfo2
    sees the main arena only, not those of the threads)."""
    import re
    path = SNAPSHOT + ".malloc"
    stream = _libc.fopen(path.encode(), b"w")
    _libc.malloc_info(0, stream)
    _libc.fclose(stream)
    text = open(path).read()
    found = []
    for heap in re.findall(r'<heap nr="\\d+">(.*?)</heap>', text, re.S):
        free = sum(int(n) for n in re.findall(
            r'<total type="(?:fast|rest)" count="\\d+" size="(\\d+)"', heap))
        mapped = re.search(r'<system type="current" size="(\\d+)"', heap)
        found.append([int(mapped.group(1)) if mapped else 0, free])
    return found


def _sizes():
    """The length of every dict, list, set and deque of 64 entries or more, by id,
    with what holds it and a few of its keys."""
    found = {{}}
    for obj in gc.get_objects():
        if isinstance(obj, (dict, list, set, collections.deque)) and len(obj) >= 64:
            holders = [type(h).__qualname__ for h in gc.get_referrers(obj)[:4]
                       if h is not found]
            sample = repr(list(obj)[:3])[:120]
            found[str(id(obj))] = [type(obj).__qualname__, len(obj), holders, sample]
    return found


def _maps():
    """Resident KB of each mapping of the process, by its start address (with its
    size in KB and what it maps: a file, [heap], [stack] or an anonymous map)."""
    found, current = {{}}, None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                start, end = (int(part, 16) for part in head[0].split("-"))
                what = head[5] if len(head) > 5 else "anonymous " + head[1]
                current = found[head[0].split("-")[0]] = [(end - start) // 1024, what, 0]
            elif head[0] == "Rss:" and current is not None:
                current[2] = int(head[1])
    return found


def fetch(args, stdin_text):
    out = reference.fetch_work(args, stdin_text)
    if out:
        _jobs[0] += 1
        if os.path.exists(SNAPSHOT + ".ask"):
            os.unlink(SNAPSHOT + ".ask")
            _census()
            if tracemalloc.is_tracing():
                tracemalloc.take_snapshot().dump(SNAPSHOT + ".new")
            else:
                open(SNAPSHOT + ".new", "w").close()
            os.replace(SNAPSHOT + ".new", SNAPSHOT)
        if os.path.exists(TRIM):
            os.unlink(TRIM)
            before = _rss_kb()
            _libc.malloc_trim(0)
            _report(trimmed=[before, _rss_kb()])
        elif _jobs[0] % 50 == 0:
            _report()
    return out
'''


def _report(path: Path, after_jobs: int, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            report: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            report = {}
        if report.get("jobs", -1) >= after_jobs:
            return report
        time.sleep(0.2)
    raise SystemExit(f"the startd's fetch hook reported nothing after {after_jobs} jobs")


def _snapshot(run: StartdRun, path: Path) -> tuple[tracemalloc.Snapshot | None, dict[str, Any]]:
    """The startd's Python allocations (when traced) and its census (live objects by
    type, threads, pymalloc arenas) now: its fetch hook dumps them at the next job."""
    path.unlink(missing_ok=True)
    Path(f"{path}.ask").touch()
    run_jobs(run, 2, timeout_s=120)
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    census: dict[str, Any] = json.loads(Path(f"{path}.census").read_text())
    traced = tracemalloc.Snapshot.load(str(path)) if path.stat().st_size else None
    return traced, census


def _print_census(before: dict[str, Any], after: dict[str, Any], jobs: int) -> None:
    grown = collections.Counter(after["types"])
    grown.subtract(before["types"])
    print(f"  threads {before['threads']} -> {after['threads']}; pymalloc arenas "
          f"{before['arenas']} -> {after['arenas']}; live objects by type that grew "
          f"(gc.get_objects(), over {jobs} jobs):")
    rising = [(name, count) for name, count in grown.most_common(8) if count > 0]
    print(f"  Python blocks allocated (sys.getallocatedblocks()): {before['blocks']} -> "
          f"{after['blocks']} ({(after['blocks'] - before['blocks']) / jobs:+.2f} a job)")
    for key, (kind, size, holders, sample) in after["sizes"].items():
        old = before["sizes"].get(key)
        if size - (old[1] if old and old[0] == kind else 0) >= jobs // 20:
            print(f"    a {kind} held by {', '.join(holders)}: "
                  f"{old[1] if old else 0} -> {size} entries, {sample}")
    print("  glibc arenas (malloc_info), in use (mapped - free) KB: " + ", ".join(
        f"{(b[0] - b[1]) // 1024} -> {(a[0] - a[1]) // 1024} (mapped {a[0] // 1024})"
        for b, a in zip(before["arenas_in_use"] + [[0, 0]] * 9, after["arenas_in_use"],
                        strict=False)))
    maps_before, maps_after = before["maps"], after["maps"]
    by_kind: collections.Counter[str] = collections.Counter()
    for start, (size_kb, what, rss) in maps_after.items():
        old = maps_before.get(start)
        kind = ("pymalloc arena or small map" if size_kb <= 1024 and what.startswith("anon")
                else "thread stack or malloc arena" if what.startswith("anon") else what)
        by_kind[kind] += rss - (old[2] if old else 0)
    for start, (_size_kb, _what, rss) in maps_before.items():
        if start not in maps_after:
            by_kind["(mappings gone)"] -= rss
    for start, (size_kb, what, rss) in sorted(
            maps_after.items(), key=lambda item: -(item[1][2] - maps_before.get(
                item[0], [0, 0, 0])[2]))[:6]:
        old = maps_before.get(start, [0, "", 0])
        print(f"    map {start} {what}: {old[0]} -> {size_kb} KB mapped, "
              f"{old[2]} -> {rss} KB resident")
    print("  resident memory grown by mapping: " + ", ".join(
        f"{kind.rsplit('/', 1)[-1]} {kb:+d} KB" for kind, kb in by_kind.most_common()
        if kb))
    for name, count in rising:
        print(f"    {count:+7d} {name} ({count / jobs:.3f} a job)")
    if not rising:
        print("    none")


def _ours(traceback: tracemalloc.Traceback) -> list[str]:
    """The frames of a traceback in the product (the innermost one whatever it is)."""
    inward = list(reversed(traceback))  # tracemalloc lists the oldest frame first
    frames = [f"{frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}" for frame in inward[1:]
              if "site-packages" not in frame.filename and "/lib/python" not in frame.filename]
    return [f"{inward[0].filename.rsplit('/', 2)[-1]}:{inward[0].lineno}", *frames[:4]]


def part_two(jobs: int, warmup: int, trace: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="fw-startd-memory-"))
    root.chmod(0o755)
    report, trim, snapshot = root / "report.json", root / "trim", root / "snapshot"
    run = StartdRun(root / "pool", 2)
    (run.root / "fwbench_hooks.py").write_text(COUNTING_HOOK.format(
        report=str(report), trim=str(trim), snapshot=str(snapshot), trace=trace))
    try:
        run.start()
        print(f"the startd of a 2-slot pool (STARTER_JOBS_PER_PROCESS = "
              f"{run.jobs_per_process}), /bin/true jobs:")
        run_jobs(run, warmup, timeout_s=600)
        first = _report(report, warmup - warmup % 50)
        before, census = _snapshot(run, snapshot)
        run_jobs(run, jobs, timeout_s=1800)
        last = _report(report, first["jobs"] + jobs - jobs % 50)
        after, census_after = _snapshot(run, snapshot)
        _print_census(census, census_after, jobs)
        if before is not None and after is not None:
            grown = after.compare_to(before, "traceback")
            print("  Python allocations grown most (tracemalloc, while the jobs ran):")
            for stat in grown[:8]:
                print(f"    {stat.size_diff / jobs:+8.1f} B a job, {stat.count_diff:+d} blocks: "
                      + " <- ".join(_ours(stat.traceback)))
        done = last["jobs"] - first["jobs"]
        made = collections.Counter(last["made"])
        made.subtract(first["made"])
        total = sum(made.values())
        print(f"  classad2 objects made per job: {total / done:.2f} (over {done} jobs)")
        for site, count in made.most_common():
            if count > 0:
                print(f"    {count / done:6.2f}  {site}")
        print(f"  heap in use: {first['heap'] / 2**20:.1f} -> {last['heap'] / 2**20:.1f} MB "
              f"({(last['heap'] - first['heap']) / done:+.0f} B a job); RSS "
              f"{first['rss_kb'] / 1024:.1f} -> {last['rss_kb'] / 1024:.1f} MB "
              f"({(last['rss_kb'] - first['rss_kb']) * 1024 / done:+.0f} B a job)")
        trim.touch()
        run_jobs(run, 2, timeout_s=120)
        trimmed = _report(report, last["jobs"] + 1)["trimmed"]
        if trimmed:
            print(f"  malloc_trim(0): RSS {trimmed[0] / 1024:.1f} -> {trimmed[1] / 1024:.1f} MB "
                  "(the difference was freed heap glibc had kept)")
    finally:
        run.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10000)
    parser.add_argument("--jobs", type=int, default=2000,
                        help="jobs the pool's startd runs after its warm-up (0: no pool)")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--trace", action="store_true",
                        help="also trace the startd's Python allocations (slower)")
    parser.add_argument("--no-suspects", action="store_true", help="skip part 1")
    args = parser.parse_args()
    if not args.no_suspects:
        part_one(args.iterations)
    if args.jobs > 0:
        part_two(args.jobs, args.warmup, args.trace)


if __name__ == "__main__":
    main()
