"""A job function for rq workers in the benchmarks: when did it start?"""

import time


def stamp() -> float:
    return time.time()


def run_true() -> int:
    """The throughput benchmark's job: run /bin/true, as a startd's job would."""
    import subprocess

    return subprocess.run(["/bin/true"], check=True).returncode
