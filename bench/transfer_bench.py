"""File transfer through the pool's Redis: throughput, memory and per-job cost.

    python bench/transfer_bench.py [--input-mb 1024] [--shared-jobs 1000]
                                   [--shared-mb 100] [--output-kb 1000]
                                   [--cost-jobs 100] [--slots 2]
                                   [--throughput-only] [--download-rounds N]

One private pool on one machine (embedded Redis, broker, a startd with the
reference hooks, delivery of outputs into the jobs' Iwd, as `fetchwork up`
runs them) in a temporary state directory. Jobs are submitted with
`fetchwork submit` (HTCondor's spooling: the inputs go into the pool at submit
time) and run with `should_transfer_files = YES`, so every byte goes through
Redis. Under root the submitter is `daemon` and the jobs run as `nobody`.

- one job with a big input (--input-mb, random bytes): submit-to-sandbox in
  MB/s (from starting `fetchwork submit` until the job's program runs with
  the file in its sandbox), split into the submit client's upload and the
  rest; the peak resident memory (VmHWM) of the submit client, the startd,
  the job's starter and the starter's transfer program; what the upload cost
  Redis (its CPU, user and system apart, and its minor page faults); when the
  starter began the transfer and its first GET, against the submit client's
  return;
- with --download-rounds N, the execute side's download alone (up to 512 MB of
  --input-mb), in this process on the pool's Redis: the fill of a new cache then
  the sandbox's copy from it, against the sandbox written as the cache fills, in
  turn N times, with the wall and CPU seconds of each;
- many jobs sharing one input (--shared-jobs jobs, one --shared-mb input,
  each returning --output-kb of random bytes): Redis's memory (used_memory)
  at its peak against the bytes of transferred files the pool held at their
  peak (fw:{P}:xfer:bytes), and after every output was delivered against
  where it started; the machine's chunk cache after the run;
- per-job cost: --cost-jobs jobs with two small inputs and one small output,
  against the same jobs without transfer (their files on the shared folder):
  the CPU each of the pool's processes, the submit client and the delivery
  (the thread of this process that delivers, not the bench's own waiting)
  spent a job.

Prints figures only; the pool's logs go to a file in the temporary folder.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config
from fetchwork.pool import Pool
from fetchwork.startd.starters.zygoteclient import ZYGOTE_MODULE
from fetchwork.transfer import safefiles
from fetchwork.transfer.cache import ChunkCache
from fetchwork.transfer.checkedfill import fill_checked
from fetchwork.transfer.chunkget import ChunkGetter
from fetchwork.transfer.chunks import CHUNK_BYTES, ChunkStore
from fetchwork.transfer.sandboxfill import SandboxFill

MB = 1 << 20
ROOT = os.geteuid() == 0
# Under root the jobs' submitter (whose outputs come back as it) and the folders it owns.
SUBMITTER = "daemon" if ROOT else pwd.getpwuid(os.geteuid()).pw_name


def vm_hwm_kb(pid: int) -> int:
    """A process's peak resident memory so far (VmHWM), in KB; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def minor_faults(pid: int) -> int:
    """A process's minor page faults so far (the kernel's cost of its new pages)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[7])
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class RedisUsage:
    """Redis's CPU (user, system) and minor page faults at one moment."""

    user_s: float
    system_s: float
    faults: int

    @staticmethod
    def of(process: psutil.Process) -> RedisUsage:
        times = process.cpu_times()
        return RedisUsage(times.user, times.system, minor_faults(process.pid))


def own(path: Path) -> None:
    """Give `path` (a tree) to the submitter."""
    if not ROOT:
        return
    entry = pwd.getpwnam(SUBMITTER)
    for folder, dirs, files in os.walk(path):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.lchown(name, entry.pw_uid, entry.pw_gid)


def random_file(path: Path, size: int) -> None:
    """`size` random bytes (no two chunks alike), written a piece at a time."""
    with open(path, "wb") as handle:
        left = size
        while left > 0:
            piece = os.urandom(min(left, 16 * MB))
            handle.write(piece)
            left -= len(piece)


@dataclass
class Submitted:
    cluster: int
    seconds: float
    max_rss_kb: int
    cpu_s: float
    stages: list[str] = field(default_factory=list)


@dataclass
class Peaks:
    """Peak resident memory (KB) by role, sampled from the startd's process tree."""

    by_role: dict[str, int] = field(default_factory=dict)

    def note(self, role: str, kb: int) -> None:
        self.by_role[role] = max(self.by_role.get(role, 0), kb)


class TransferRun:
    """A private pool whose jobs transfer their files."""

    def __init__(self, root: Path, slots: int, cache: bool):
        self.root = root
        self.state = root / "state"
        environ = {**os.environ, "FETCHWORK_STATE_DIR": str(self.state),
                   "FETCHWORK_POOL": "bench",
                   "_FETCHWORK_STARTER_INITIAL_UPDATE_INTERVAL": "3600",
                   "_FETCHWORK_STARTER_ALLOW_RUNAS_OWNER": "false"}
        if not cache:  # an empty folder: the transfers run without the machine's cache
            environ["_FETCHWORK_TRANSFER_CACHE_DIR"] = ""
        os.environ.update(environ)
        self.env = {**environ, "USER": SUBMITTER, "LOGNAME": SUBMITTER}
        self.config = Config.load(environ=environ)
        self.pool = Pool(self.config, slots=slots, log_path=root / "pool.log")

    def start(self) -> None:
        self.pool.start()
        self.client = redis.Redis.from_url(self.pool.url)
        self.broker = Broker(self.client, pool="bench", config=self.config)

    def stop(self) -> None:
        self.pool.stop()

    def startd(self) -> psutil.Process:
        return psutil.Process(self.pool.children["startd"].pid)

    def redis_process(self) -> psutil.Process:
        return psutil.Process(int(self.client.info("server")["process_id"]))

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def held_bytes(self) -> int:
        return int(self.client.get(self.broker.keys.xfer_bytes) or 0)

    def waiting_outputs(self) -> int:
        return int(self.client.zcard(self.broker.keys.xfer_outputs))

    def submit(self, work: Path, text: str, verbose: bool = False) -> Submitted:
        """`fetchwork submit` of `text` from `work`, timed, with its peak memory (and
        with `verbose`, its log lines about transfer stages in `Submitted.stages`)."""
        path = work / "job.sub"
        path.write_text(text)
        own(path)
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "fetchwork",
                                    *(["-v"] if verbose else []), "submit", path.name],
                                   cwd=work, env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stderr is not None
        # The client's own peak, sampled: the peak wait4 reports for a child counts
        # the memory of the process it was forked from, this one, until its exec.
        peak = Peaks()
        with sampling(0.005, lambda: peak.note("submit", vm_hwm_kb(process.pid))):
            out, err = process.stdout.read(), process.stderr.read()
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        if process.returncode != 0 or "cluster " not in out:
            raise SystemExit(f"fetchwork submit failed ({process.returncode}):\n{out}\n{err}")
        cluster = int(out.split("cluster ")[1].split(".")[0].split()[0])
        return Submitted(cluster, seconds, peak.by_role["submit"],
                         usage.ru_utime + usage.ru_stime,
                         [line.split(": ", 1)[1] for line in err.splitlines()
                          if " by stage: " in line])

    def states(self, cluster: int, count: int) -> list[tuple[object, object]]:
        jobs = [f"{cluster}.{proc}" for proc in range(count)]
        return [tuple(values) for values in self.broker.store.fields(
            jobs, ("JobStatus", "HoldReason"))]

    def wait_done(self, cluster: int, count: int, timeout_s: float,
                  also: Callable[[], bool] = lambda: True) -> None:
        """Until every job of `cluster` completed (and `also()`); exit on a hold."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.states(cluster, count)
            held = [reason for status, reason in states if status == 5]
            if held:
                raise SystemExit(f"{len(held)} job(s) held: {held[0]}")
            if all(status == 4 or status is None for status, _ in states) and also():
                return
            if time.monotonic() > deadline:
                done = sum(1 for status, _ in states if status == 4 or status is None)
                raise SystemExit(f"only {done} of {count} jobs done within {timeout_s:.0f}s")
            time.sleep(0.05)

    def remove_history(self, cluster: int, count: int) -> None:
        """Forget a finished cluster's jobs, so the next part starts clean."""
        keys = self.broker.keys
        jobs = [f"{cluster}.{proc}" for proc in range(count)]
        with self.client.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.zrem(keys.history, job)
                pipe.delete(keys.job(job))
            pipe.delete(keys.cluster(str(cluster)))
            pipe.execute()


@contextmanager
def sampling(every_s: float, sample: Callable[[], None]) -> Iterator[None]:
    """Call `sample()` every `every_s` in a thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                sample()
            except (psutil.Error, OSError, redis.RedisError):
                pass
            stop.wait(every_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sample()


def tree_peaks(run: TransferRun, peaks: Peaks) -> Callable[[], None]:
    """A sampler of the startd's tree: startd, zygote, starters and the transfer
    children a starter forks (a fork of a starter: the same command line)."""
    startd = run.startd()

    def sample() -> None:
        peaks.note("startd", vm_hwm_kb(startd.pid))
        parents: dict[int, int] = {}
        for child in startd.children(recursive=True):
            try:
                if ZYGOTE_MODULE in " ".join(child.cmdline()):
                    parents[child.pid] = child.ppid()
            except psutil.Error:
                continue
        for pid, parent in parents.items():
            depth = 1
            while parent in parents:
                parent, depth = parents[parent], depth + 1
            if parent == startd.pid:
                role = {1: "zygote", 2: "starter"}.get(depth, "transfer child")
                peaks.note(role, vm_hwm_kb(pid))
    return sample


# -- the parts -----------------------------------------------------------------------------

BIG_JOB = """#!/bin/sh
date +%s.%N > {marks}/started
ls -l big.bin >> {marks}/started
"""


def big_input(run: TransferRun, root: Path, size_mb: int) -> None:
    work = root / "big"
    marks = root / "marks-big"
    for folder in (work, marks):
        folder.mkdir()
    marks.chmod(0o777)
    print(f"one job with a {size_mb} MB input (random bytes):")
    random_file(work / "big.bin", size_mb * MB)
    (work / "job.sh").write_text(BIG_JOB.format(marks=marks))
    (work / "job.sh").chmod(0o755)
    own(work)
    peaks = Peaks()
    cpu_before = cpu_now(run)
    run.client.config_resetstat()
    run.client.config_set("latency-monitor-threshold", 10)
    run.client.execute_command("LATENCY", "RESET")
    redis_process = run.redis_process()
    redis_before = RedisUsage.of(redis_process)
    started_wall = time.time()
    with sampling(0.005, tree_peaks(run, peaks)):
        submitted = run.submit(work, "executable = job.sh\nshould_transfer_files = YES\n"
                                     "transfer_input_files = big.bin\nqueue\n", verbose=True)
        redis_upload = RedisUsage.of(redis_process)
        run.wait_done(submitted.cluster, 1, timeout_s=600,
                      also=lambda: run.waiting_outputs() == 0)
    stamp = (marks / "started").read_text().split()
    if str(size_mb * MB) not in stamp:
        raise SystemExit(f"the job did not see the whole input: {' '.join(stamp)}")
    to_sandbox_s = float(stamp[0]) - started_wall
    print(f"  submit-to-sandbox {to_sandbox_s:.2f} s: {size_mb / to_sandbox_s:.0f} MB/s "
          f"(the submit client's upload {submitted.seconds:.2f} s, "
          f"{size_mb / submitted.seconds:.0f} MB/s; then claim and download "
          f"{to_sandbox_s - submitted.seconds:.2f} s)")
    print(f"  peak resident memory (VmHWM): submit client {submitted.max_rss_kb / 1024:.0f} MB, "
          + ", ".join(f"{role} {kb / 1024:.0f} MB" for role, kb in peaks.by_role.items()))
    cpu_after = cpu_now(run)
    spent = {"submit client": submitted.cpu_s,
             **{role: cpu_after[role] - cpu_before[role] for role in ("starters", "Redis")}}
    # The machine is shared: CPU seconds a GiB say what the wall clock cannot.
    print("  CPU seconds spent on it: " + ", ".join(
        f"{role} {seconds:.2f} s ({size_mb / seconds:.0f} MB a CPU-second)"
        for role, seconds in spent.items() if seconds > 0))
    print_stages(run, submitted)
    print_upload_cost(run, size_mb, submitted, redis_before, redis_upload)
    print_start(run, started_wall + submitted.seconds)
    run.remove_history(submitted.cluster, 1)
    shutil.rmtree(work, ignore_errors=True)
    redis_both = redis_rates(run, min(size_mb, 256))
    sha = sha256_rate(min(size_mb, 256))
    written = disk_rate(run.state, min(size_mb, 256))
    # Every byte: a SET and a GET, four SHA-256 passes (chunk and file, at each end),
    # two writes on the execute side (the cache, the sandbox).
    in_turn = 1 / (1 / redis_both + 4 / sha + 2 / written)
    print(f"  ours {size_mb / to_sandbox_s:.0f} MB/s submit-to-sandbox, against those steps "
          f"at their own rates one after the other: {in_turn:.0f} MB/s (on two free cores "
          f"the hashing and the writes overlap the transfer, up to twice that)")


def print_stages(run: TransferRun, submitted: Submitted) -> None:
    """Where the big input's time went, by stage, as the submit client and the starter
    logged it (busy and CPU seconds of each stage; they overlap on several threads),
    and what Redis spent besides its commands (INFO persistence, commandstats)."""
    for line in submitted.stages:
        print(f"  upload, {line}")
    log_dir = Path(run.config.get("LOG") or run.state / "log")
    for path in sorted(log_dir.glob("StarterLog.slot*")):
        for line in path.read_text(errors="replace").splitlines():
            if "big.bin: into the machine's cache" in line or "big.bin: copied" in line:
                print(f"  download, {line.split('big.bin: ', 1)[1]}")
    persistence = run.client.info("persistence")
    print("  Redis: " + ", ".join(f"{name} {persistence.get(name)}" for name in (
        "aof_enabled", "aof_rewrites", "aof_rewrite_in_progress", "rdb_saves",
        "rdb_bgsave_in_progress", "aof_delayed_fsync")))
    stats = run.client.info("commandstats")
    busiest = sorted(stats.items(), key=lambda kv: -float(kv[1]["usec"]))[:5]
    print("  Redis commands by time: " + ", ".join(
        f"{name.removeprefix('cmdstat_')} {int(v['calls'])} calls {float(v['usec']) / 1e6:.2f} s"
        for name, v in busiest))


def print_upload_cost(run: TransferRun, size_mb: int, submitted: Submitted,
                      before: RedisUsage, after: RedisUsage) -> None:
    """What the upload cost Redis beside what it cost the client, from the submit's start
    to its exit (the job may be claimed just before the client exits): its CPU, user
    and system apart, and its minor page faults against the input's pages (one a page
    is the least: each value's pages are new; more are the append-only file's buffers
    made anew for each command); its slowest appends and fsyncs (LATENCY LATEST, events
    of 10 ms and more)."""
    faults = after.faults - before.faults
    print(f"  the upload's cost: submit client CPU {submitted.cpu_s:.2f} s; Redis user "
          f"{after.user_s - before.user_s:.2f} s, system {after.system_s - before.system_s:.2f} s, "
          f"{faults} minor page faults ({faults / (size_mb * MB / 4096):.2f} a 4 KiB page "
          "of the input)")
    latest = run.client.execute_command("LATENCY", "LATEST") or []
    print("  Redis's slow events (LATENCY LATEST, worst ms): " + (", ".join(
        f"{event[0].decode() if isinstance(event[0], bytes) else event[0]} {event[3]}"
        for event in latest) or "none"))
def _log_time(line: str) -> float:
    """The epoch seconds of a log line's local timestamp ("2026-01-02 03:04:05,678")."""
    stamp, _, millis = line[:23].partition(",")
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000


def print_start(run: TransferRun, submit_end_wall: float) -> None:
    """When the starter began the big input's transfer and its fill (its first GET),
    against the moment the submit client had returned: the claim and the starter's
    wake-up, as the StarterLog timed them (milliseconds)."""
    log_dir = Path(run.config.get("LOG") or run.state / "log")
    began = fill = None
    for path in sorted(log_dir.glob("StarterLog.slot*")):
        for line in path.read_text(errors="replace").splitlines():
            if "transferring the job's input files" in line:
                began = _log_time(line)
            elif "big.bin: into the machine's cache" in line:
                wall_s = float(line.split(" MB in ", 1)[1].split(" s", 1)[0])
                fill = _log_time(line) - wall_s
    if began is not None and fill is not None:
        print(f"  the starter began the input transfer {began - submit_end_wall:+.2f} s "
              f"after the submit client returned, the fill (its first GET) "
              f"{fill - submit_end_wall:+.2f} s after")


def download_ways(run: TransferRun, root: Path, size_mb: int, rounds: int) -> None:
    """The execute side's download alone, in this process on the pool's Redis, the
    two ways in turn: the fill of a new machine cache then the sandbox's copy from
    it (`copy_file_range`), and the fill writing the sandbox's file as it goes
    (transfer/sandboxfill.py, the cache's chunks past the page cache). Wall and CPU
    seconds of each round (this process: every thread of the fill), then medians."""
    store = run.broker.store
    work = root / "download-ways"
    work.mkdir()
    random_file(work / "big.bin", size_mb * MB)
    fd = os.open(work / "big.bin", os.O_RDONLY)
    try:
        entry = ChunkStore(store, 3_600_000).upload(fd, "big.bin", 0o644)
    finally:
        os.close(fd)
    (work / "big.bin").unlink()

    def fetch(digest: str) -> bytes | None:
        data = store.client.get(store.keys.xfer_chunk(digest))
        return data if isinstance(data, bytes) else None

    def one(early_writes: bool) -> tuple[float, float]:
        cache_dir, box = work / "cache", work / "sandbox"
        shutil.rmtree(cache_dir, ignore_errors=True)
        shutil.rmtree(box, ignore_errors=True)
        box.mkdir()
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        cache = ChunkCache(cache_dir, 1 << 40)
        getter = ChunkGetter(store)
        early = SandboxFill(str(box), nullcontext, 13) if early_writes else None
        try:
            fill_checked(cache, [entry], fetch, ahead=2, fetch_into=getter.get_into,
                         sandbox=early)
        finally:
            getter.close()
        if early is None or not early.place("big.bin"):
            def copy(fd: int) -> None:
                if not cache.copy_file(entry.sha256, entry.size, entry.chunks, fd):
                    raise SystemExit("the download's copy from the cache failed")
            safefiles.write_file(str(box), "big.bin", 0o644, copy, 13)
        wall_s = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        if (box / "big.bin").stat().st_size != entry.size:
            raise SystemExit("the download's sandbox file is not whole")
        return wall_s, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

    print(f"the download alone, {size_mb} MB from the pool into a new cache and a "
          f"sandbox, the two ways in turn:")
    ways: dict[str, list[tuple[float, float]]] = {"fill then copy": [],
                                                  "sandbox written as it fills": []}
    for number in range(rounds):
        for name, early_writes in (("fill then copy", False),
                                   ("sandbox written as it fills", True)):
            wall_s, cpu_s = one(early_writes)
            ways[name].append((wall_s, cpu_s))
            print(f"  round {number + 1}, {name}: {wall_s:.2f} s, CPU {cpu_s:.2f} s "
                  f"(load average {os.getloadavg()[0]:.1f})")
    for name, runs in ways.items():
        walls = sorted(wall for wall, _ in runs)
        cpus = sorted(cpu for _, cpu in runs)
        print(f"  {name}, medians: {walls[len(walls) // 2]:.2f} s "
              f"({size_mb / walls[len(walls) // 2]:.0f} MB/s), CPU {cpus[len(cpus) // 2]:.2f} s")
    shutil.rmtree(work, ignore_errors=True)


def redis_rates(run: TransferRun, size_mb: int) -> float:
    """The same Redis's own rate for values of a chunk's size, through redis-py from
    this process: SET (two a round trip) and GET, and what an upload then a download
    at those rates would give: the bound of ours. That rate."""
    value = os.urandom(CHUNK_BYTES)
    count = max(2, size_mb * MB // CHUNK_BYTES)
    keys = [f"bench-raw:{n}" for n in range(count)]
    started = time.perf_counter()
    for first in range(0, count, 2):
        with run.client.pipeline(transaction=False) as pipe:
            for key in keys[first:first + 2]:
                pipe.set(key, value)
            pipe.execute()
    set_s = time.perf_counter() - started
    started = time.perf_counter()
    for key in keys:
        run.client.get(key)
    get_s = time.perf_counter() - started
    run.client.delete(*keys)
    total_mb = count * CHUNK_BYTES / MB
    set_rate, get_rate = total_mb / set_s, total_mb / get_s
    both = 1 / (1 / set_rate + 1 / get_rate)
    print(f"  Redis itself (its append-only file on), {total_mb:.0f} MB in values of "
          f"{CHUNK_BYTES} bytes: SET {set_rate:.0f} MB/s, GET {get_rate:.0f} MB/s; an upload "
          f"then a download at those rates alone: {both:.0f} MB/s")
    return both


def sha256_rate(size_mb: int) -> float:
    """SHA-256 on one core over chunk-sized buffers (each side hashes every byte
    twice, its chunk's digest and its file's, on two threads)."""
    value = os.urandom(CHUNK_BYTES)
    count = max(2, size_mb * MB // CHUNK_BYTES)
    started = time.perf_counter()
    for _ in range(count):
        hashlib.sha256(value).digest()
    rate = count * CHUNK_BYTES / MB / (time.perf_counter() - started)
    print(f"  SHA-256 on one core: {rate:.0f} MB/s (two passes at each end: "
          f"{rate / 2:.0f} MB/s a side on one core)")
    return rate


def disk_rate(folder: Path, size_mb: int) -> float:
    """The state folder's file system: writing chunk-sized pieces (as the cache and
    the sandbox are written, into the page cache), then the same made durable
    (fdatasync, as Redis's append-only file is each second). The first rate."""
    value = os.urandom(CHUNK_BYTES)
    count = max(2, size_mb * MB // CHUNK_BYTES)
    path = folder / "bench-disk-rate"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(count):
            os.write(fd, value)
        written_s = time.perf_counter() - started
        os.fdatasync(fd)
        durable_s = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    total_mb = count * CHUNK_BYTES / MB
    cached, durable = total_mb / written_s, total_mb / durable_s
    print(f"  the state folder's disk, {total_mb:.0f} MB: written {cached:.0f} MB/s, "
          f"made durable {durable:.0f} MB/s (every byte is written three times: Redis's "
          f"append-only file, the machine's cache, the sandbox)")
    return cached


SHARED_JOB = """#!/bin/sh
test -f shared.bin || exit 3
head -c {output_bytes} /dev/urandom > out_$1.bin
"""


def shared_input(run: TransferRun, root: Path, jobs: int, shared_mb: int,
                 output_kb: int) -> None:
    work = root / "shared"
    work.mkdir()
    print(f"{jobs} jobs sharing one {shared_mb} MB input, each returning {output_kb} kB:")
    random_file(work / "shared.bin", shared_mb * MB)
    (work / "job.sh").write_text(SHARED_JOB.format(output_bytes=output_kb * 1000))
    (work / "job.sh").chmod(0o755)
    own(work)
    time.sleep(1.0)  # let the previous part's frees settle before the baseline
    baseline = run.used_memory()
    stream_before = int(run.client.memory_usage(run.broker.keys.events, samples=0) or 0)
    peak = {"used": baseline, "held": 0, "used_at_held": baseline}

    def sample() -> None:
        used, held = run.used_memory(), run.held_bytes()
        peak["used"] = max(peak["used"], used)
        if held > peak["held"]:
            peak["held"], peak["used_at_held"] = held, used

    started = time.perf_counter()
    with sampling(0.02, sample):
        submitted = run.submit(work, "executable = job.sh\narguments = $(Process)\n"
                                     "should_transfer_files = YES\n"
                                     "transfer_input_files = shared.bin\n"
                                     f"queue {jobs}\n")
        run.wait_done(submitted.cluster, jobs, timeout_s=max(600.0, jobs * 5.0),
                      also=lambda: run.waiting_outputs() == 0 and run.held_bytes() == 0)
    seconds = time.perf_counter() - started
    delivered = len(list(work.glob("out_*.bin")))
    time.sleep(1.0)
    after = run.used_memory()
    ratio = (peak["used"] - baseline) / peak["held"] if peak["held"] else float("nan")
    print(f"  {jobs} jobs in {seconds:.0f} s ({jobs / seconds:.1f} jobs/s); "
          f"{delivered} outputs delivered into Iwd")
    print(f"  Redis used_memory: {baseline / MB:.1f} MB before, peak {peak['used'] / MB:.1f} MB; "
          f"transferred files held at their peak {peak['held'] / MB:.1f} MB")
    print(f"  peak above the start / bytes held: {ratio:.2f} "
          f"(target under 1.3)")
    print(f"  after delivery {after / MB:.1f} MB: {(after - baseline) / MB:+.1f} MB from the "
          f"start (target within 5 MB), with the {jobs} jobs still in the history")
    run.remove_history(submitted.cluster, jobs)
    time.sleep(0.5)
    keys = run.broker.keys
    stream_mb = int(run.client.memory_usage(keys.events, samples=0) or 0) / MB
    stream_before_mb = stream_before / MB
    print(f"  without them in the history: {(run.used_memory() - baseline) / MB:+.1f} MB, of "
          f"which the event stream {stream_mb - stream_before_mb:+.1f} MB "
          f"({run.client.xlen(keys.events)} entries, capped by BROKER_EVENTS_MAXLEN)")
    cache = Path(run.config.require("TRANSFER_CACHE_DIR"))
    cached = sum(path.stat().st_size for path in cache.glob("??/*")) if cache.is_dir() else 0
    if run.config.get("TRANSFER_CACHE_DIR"):
        print(f"  the machine's chunk cache holds {cached / MB:.0f} MB")
    shutil.rmtree(work, ignore_errors=True)


COST_JOB = """#!/bin/sh
cat a.txt b.txt > out_$1.txt
"""


def _cpu_s(proc: psutil.Process) -> float:
    """A process's CPU seconds with those of the children it has reaped."""
    times = proc.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def cpu_now(run: TransferRun) -> dict[str, float]:
    """CPU seconds so far by role: the pool's processes (a process's reaped children
    count with it) and this process's children (the submit clients, the delivery
    children). The starters are the zygote's children: a starter keeps running
    jobs, so its CPU (with its reaped transfer children and jobs) is counted while it
    lives, and with the zygote's once it is reaped."""
    found = {"startd": run.startd(), "broker": psutil.Process(run.pool.children["broker"].pid),
             "Redis": run.redis_process()}
    spent = {role: _cpu_s(proc) for role, proc in found.items()}
    spent["starters"] = 0.0
    for child in run.startd().children():
        if ZYGOTE_MODULE not in " ".join(child.cmdline()):
            continue
        spent["starters"] += _cpu_s(child)
        for starter in child.children():
            try:
                spent["starters"] += _cpu_s(starter)
            except psutil.Error:
                pass
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent["submit and delivery programs"] = children.ru_utime + children.ru_stime
    # The delivering thread's own CPU: the rest of this process is the bench itself
    # (its waiting loop, longer when the jobs are), not the pool's cost.
    delivering = run.pool._delivery_thread
    spent["delivery (in the pool's process)"] = sum(
        thread.user_time + thread.system_time for thread in psutil.Process().threads()
        if delivering is not None and thread.id == delivering.native_id)
    return spent


def cost_of(run: TransferRun, work: Path, jobs: int, transfer: bool) -> dict[str, float]:
    """CPU ms a job by role, for `jobs` jobs with or without transfer."""
    before = cpu_now(run)
    text = (f"executable = job.sh\narguments = $(Process)\nqueue {jobs}\n" if not transfer
            else "executable = job.sh\narguments = $(Process)\nshould_transfer_files = YES\n"
                 f"transfer_input_files = a.txt, b.txt\nqueue {jobs}\n")
    submitted = run.submit(work, text)
    run.wait_done(submitted.cluster, jobs, timeout_s=max(300.0, jobs * 5.0),
                  also=lambda: len(list(work.glob("out_*.txt"))) >= jobs)
    after = cpu_now(run)
    run.remove_history(submitted.cluster, jobs)
    return {role: (after[role] - before[role]) * 1000 / jobs for role in after if role in before}


def per_job_cost(run: TransferRun, root: Path, jobs: int) -> None:
    print(f"per-job CPU, {jobs} jobs with two small inputs and one small output, against "
          "the same jobs without transfer:")
    results = {}
    for transfer in (False, True):
        work = root / ("cost-transfer" if transfer else "cost-shared")
        work.mkdir()
        (work / "a.txt").write_text("a" * 100 + "\n")
        (work / "b.txt").write_text("b" * 100 + "\n")
        (work / "job.sh").write_text(COST_JOB)
        (work / "job.sh").chmod(0o755)
        own(work)
        if not transfer:
            work.chmod(0o777)  # the job's user writes its output on the shared folder
        results[transfer] = cost_of(run, work, jobs, transfer)
        total = sum(results[transfer].values())
        print(f"  {'with' if transfer else 'without'} transfer: {total:.1f} ms a job: " + ", ".join(
            f"{role} {ms:.1f}" for role, ms in sorted(results[transfer].items(),
                                                      key=lambda kv: -kv[1])))
    extra = sum(results[True].values()) - sum(results[False].values())
    print(f"  transfer costs {extra:.1f} ms of CPU more a job (target at most 5 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-mb", type=int, default=1024,
                        help="the big input's size (0: skip that part)")
    parser.add_argument("--shared-jobs", type=int, default=1000,
                        help="jobs sharing one input (0: skip that part)")
    parser.add_argument("--shared-mb", type=int, default=100)
    parser.add_argument("--output-kb", type=int, default=1000,
                        help="each shared-input job's output, in kB (1000 bytes)")
    parser.add_argument("--cost-jobs", type=int, default=100,
                        help="jobs per per-job cost run (0: skip that part)")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--throughput-only", action="store_true",
                        help="only the big input's row (as --shared-jobs 0 --cost-jobs 0)")
    parser.add_argument("--download-rounds", type=int, default=0,
                        help="then the download alone (--input-mb, at most 512), the "
                             "two ways of writing the sandbox in turn, this many rounds")
    parser.add_argument("--no-cache", action="store_true",
                        help="run without the execute machine's chunk cache")
    args = parser.parse_args()
    if args.throughput_only:
        args.shared_jobs = args.cost_jobs = 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the pool on the way out
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"{'root: jobs run as nobody, submitted as ' + SUBMITTER if ROOT else 'not root'}")
    root = Path(tempfile.mkdtemp(prefix="fw-transfer-bench-"))
    root.chmod(0o755)
    run = TransferRun(root, args.slots, cache=not args.no_cache)
    if args.no_cache:
        print("without the execute machine's chunk cache: every job fetches from Redis")
    try:
        run.start()
        if args.input_mb > 0:
            big_input(run, root, args.input_mb)
        if args.download_rounds > 0:
            download_ways(run, root, min(args.input_mb, 512) or 512, args.download_rounds)
        if args.shared_jobs > 0:
            shared_input(run, root, args.shared_jobs, args.shared_mb, args.output_kb)
        if args.cost_jobs > 0:
            per_job_cost(run, root, args.cost_jobs)
    except SystemExit:
        log = root / "pool.log"
        if log.exists():
            print("the pool's log ends:\n" + "".join(log.read_text().splitlines(True)[-30:]))
        raise
    finally:
        run.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
