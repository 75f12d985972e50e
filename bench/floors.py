"""What this machine itself costs, for a bench's figures to be read against.

- `fork_exec_ms`: fork+exec+wait of `/bin/true` from Python (`subprocess.run`);
- `fork_floor_ms`: the floor of a fork per job, the CPU of a child forked
  from an interpreter preloaded as the starter zygote is, which only spawns
  `/bin/true`, waits and exits (parent and child together).
"""

from __future__ import annotations

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
