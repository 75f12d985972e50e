"""Building blocks of the fixtures that run a real startd (see tests/support/startd.py).

`configured_pool` makes a pool whose slots use keyword Q with the test hooks
(`reconfigure` rewrites its file), `running` starts its startd and stops it
on leaving, `finished_run` does both around a few steps (the usual module
fixture), and `signal_and_wait` sends a signal and measures how long the
startd took to exit.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.support.startd import Pool, pool_root

# Every hook as a program, and every hook in-process.
MODES = ["program", "python"]


@contextmanager
def configured_pool(name: str, mode: str = "program", config_text: str = "",
                    keyword: str = "Q") -> Iterator[Pool]:
    """A pool under a fresh root: STARTD_JOB_HOOK_KEYWORD = `keyword`, its hooks, `config_text`."""
    with pool_root(f"{name}-{mode}") as root:
        pool = Pool(root, mode)
        reconfigure(pool, config_text, keyword)
        yield pool


def reconfigure(pool: Pool, config_text: str, keyword: str = "Q") -> None:
    """Write the configuration of `configured_pool` again, with other knobs (then SIGHUP)."""
    pool.write_config(f"STARTD_JOB_HOOK_KEYWORD = {keyword}\n{config_text}"
                      + pool.keyword_config(keyword))


@contextmanager
def running(pool: Pool, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """The pool's startd, started with `args`; stopped on leaving (exit status: `pool.status`)."""
    proc = pool.start(*args)
    try:
        yield proc
    finally:
        pool.status = pool.stop()


@contextmanager
def finished_run(name: str, mode: str, config_text: str, until: Callable[[Pool], object],
                 before: Callable[[Pool], object] | None = None) -> Iterator[Pool]:
    """A `configured_pool`, set up by `before(pool)` (jobs to queue), its startd run
    until `until(pool)` returns, then stopped."""
    with configured_pool(name, mode, config_text) as pool:
        if before is not None:
            before(pool)
        with running(pool):
            until(pool)
        yield pool


def signal_and_wait(pool: Pool, signum: signal.Signals, timeout_s: float = 30.0) -> None:
    """Send `signum` to the startd and wait for its exit: `pool.status`, and `pool.took_s`."""
    assert pool.proc is not None
    sent = time.monotonic()
    pool.proc.send_signal(signum)
    pool.status = pool.proc.wait(timeout_s)
    pool.took_s = time.monotonic() - sent
