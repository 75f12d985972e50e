"""A job function for rq workers in the benchmarks: when did it start?"""

import time


def stamp() -> float:
    return time.time()


def run_true() -> int:
    """The throughput benchmark's job: run /bin/true, as a startd's job would."""
    import subprocess

    return subprocess.run(["/bin/true"], check=True).returncode


def date_ns() -> int:
    """The latency benchmark's job: when /bin/date, run as a startd's job would, read
    the clock (ns since the epoch)."""
    import subprocess

    return int(subprocess.run(["/bin/date", "+%s%N"], check=True, capture_output=True,
                              text=True).stdout)
