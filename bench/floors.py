"""What this machine itself costs, for a bench's figures to be read against.

- `fork_exec_ms`: fork+exec+wait of `/bin/true` from Python (`subprocess.run`);
- `fork_floor_ms`: the floor of a fork per job, the CPU of a child forked
  from an interpreter preloaded as the starter zygote is, which only spawns
  `/bin/true`, waits and exits (parent and child together);
- `start_floor_ms`: the floor of a job's start after an idle while, as the
  start latency is measured (one job at a time, a quarter second apart):
  `/bin/date +%s%N` spawned by an interpreter preloaded as the zygote is,
  at once, and by a fork of it that waits on a socket and is told to (the
  least a start handed from one process to another can take).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def fork_exec_ms(count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        subprocess.run(["/bin/true"], check=True)
    return (time.perf_counter() - started) / count * 1000


# A child of an interpreter that has imported and warmed up what the starter
# zygote does, which only spawns /bin/true, waits for it and exits: what a
# fork per job costs before any of a starter's own work.
FORK_FLOOR = """
import gc, os, resource, sys, time
from fetchwork.starter import zygote
zygote.preload()
gc.freeze()
count, batches = int(sys.argv[1]), int(sys.argv[2])
def spent():
    own, children = os.times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.user + own.system + children.ru_utime + children.ru_stime
for _ in range(batches):
    started = spent()
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.waitpid(os.posix_spawn("/bin/true", ["/bin/true"], os.environ), 0)
            os._exit(0)
        os.waitpid(pid, 0)
    print((spent() - started) / count * 1000)
"""


def fork_floor_ms(count: int = 500, batches: int = 3) -> float:
    """CPU milliseconds a job of FORK_FLOOR (parent and child), in a fresh interpreter:
    the least of `batches` batches (this machine's speed drifts; a floor is the least)."""
    out = subprocess.run([sys.executable, "-c", FORK_FLOOR, str(count), str(batches)],
                         check=True, capture_output=True, text=True).stdout
    return min(float(word) for word in out.split())


# /bin/date spawned after each idle gap: by this interpreter itself (the clock read
# before the spawn), then by a fork waiting on a socket (the clock read before the
# one byte that tells it); each line: the milliseconds to date's own reading.
START_FLOOR = """
import os, socket, sys, time
from fetchwork.starter import zygote
zygote.preload()
count, gap_s = int(sys.argv[1]), float(sys.argv[2])
def date_ns():
    read, write = os.pipe()
    pid = os.posix_spawn("/bin/date", ["/bin/date", "+%s%N"], os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, write, 1),
                                       (os.POSIX_SPAWN_CLOSE, read)])
    os.close(write)
    out = b""
    while chunk := os.read(read, 64):
        out += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return int(out)
alone = []
for _ in range(count):
    time.sleep(gap_s)
    asked = time.time_ns()
    alone.append((date_ns() - asked) / 1e6)
here, there = socket.socketpair()
pid = os.fork()
if pid == 0:
    here.close()
    while there.recv(1):
        there.sendall(b"%24d" % date_ns())
    os._exit(0)
there.close()
told = []
for _ in range(count):
    time.sleep(gap_s)
    asked = time.time_ns()
    here.sendall(b"j")
    reply = b""
    while len(reply) < 24:
        reply += here.recv(24 - len(reply))
    told.append((int(reply) - asked) / 1e6)
here.close()
os.waitpid(pid, 0)
print(" ".join(map(str, alone)))
print(" ".join(map(str, told)))
"""


def start_floor_ms(count: int = 40, gap_s: float = 0.25) -> tuple[float, float]:
    """Median milliseconds from asking to `/bin/date`'s clock reading, `gap_s` idle
    before each of `count` starts: spawned at once, and by a waiting fork told over a
    socket (START_FLOOR, in a fresh interpreter)."""
    out = subprocess.run([sys.executable, "-c", START_FLOOR, str(count), str(gap_s)],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    alone, told = ([float(word) for word in line.split()] for line in out[:2])
    return statistics.median(alone), statistics.median(told)

