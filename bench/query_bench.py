"""How long the user's queries take on a big queue and a big history.

    python bench/query_bench.py [--jobs 100000]

Runs on a private embedded Redis in a temporary state directory (or the
broker named by FETCHWORK_BROKER). Times an empty `q` first (it imports the
modules), queues --jobs jobs, times `q`, `q -nobatch`, `q --json`,
`q -totals`, `q ID` and `history ID`; then removes them all (so they go to
the history), and times `history`, `history -match 10` and `history ID`.
Each command runs in this process through the `fetchwork` click group, its
output thrown away; figures only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from click.testing import CliRunner

from fetchwork.broker.client import Broker
from fetchwork.broker.connections.embedded import embedded_for
from fetchwork.cli import main
from fetchwork.config.loader import Config

CLUSTER_SIZE = 10000


def timed(label: str, env: dict[str, str], *args: str) -> float:
    runner = CliRunner()
    started = time.perf_counter()
    result = runner.invoke(main, list(args), env=env)
    elapsed = time.perf_counter() - started
    if result.exit_code != 0:
        sys.exit(f"{label}: exit {result.exit_code}: {result.output[-500:]}")
    print(f"{label:<28} {elapsed * 1000:10.1f} ms")
    return elapsed


def fill(broker: Broker, jobs: int) -> list[int]:
    ad = {"Cmd": "/bin/sleep", "Arguments": "60", "Iwd": "/tmp"}
    clusters = []
    left = jobs
    while left > 0:
        batch = min(CLUSTER_SIZE, left)
        clusters.append(int(broker.submit([ad] * batch, owner="bench")[0].split(".")[0]))
        left -= batch
    return clusters


def run(jobs: int, env: dict[str, str]) -> None:
    config = Config.load(environ=env)
    broker = Broker.from_config(config)
    # The first command of a process imports the user commands' modules.
    timed("q (empty, imports modules)", env, "q")
    started = time.perf_counter()
    clusters = fill(broker, jobs)
    print(f"queued {jobs} jobs in {time.perf_counter() - started:.1f} s")
    some = f"{clusters[len(clusters) // 2]}.7"
    queries: list[tuple[str, tuple[str, ...]]] = [
        ("q (batch view)", ("q",)), ("q -nobatch", ("q", "-nobatch")),
        ("q --json", ("q", "--json")), ("q -totals", ("q", "-totals")),
        (f"q {some}", ("q", some)), (f"history {some} (queued)", ("history", some))]
    for label, args in queries:
        timed(label, env, *args)
    started = time.perf_counter()
    broker.remove(broker.queued_ids())
    print(f"removed {jobs} jobs in {time.perf_counter() - started:.1f} s")
    for label, args in [("history", ("history",)),
                        ("history -match 10", ("history", "-match", "10")),
                        (f"history {some}", ("history", some)), ("q (empty)", ("q",))]:
        timed(label, env, *args)


def main_bench(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100000)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fw-qbench-") as state:
        env = {**os.environ, "FETCHWORK_STATE_DIR": state, "FETCHWORK_POOL": "qbench",
               "FETCHWORK_CONFIG": os.devnull}
        env.setdefault("_FETCHWORK_BROKER_HISTORY_MAX_JOBS", str(options.jobs * 2))
        try:
            run(options.jobs, env)
        finally:
            if not env.get("FETCHWORK_BROKER"):
                embedded_for(Config.load(environ=env)).stop()


if __name__ == "__main__":
    main_bench()
