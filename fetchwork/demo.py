"""`fetchwork demo`: a short scripted tour of a local pool.

On a temporary state directory it brings a pool up (embedded Redis, broker
service, a 2-slot startd with the reference hooks), submits a mixed cluster
from an HTCondor submit description (short and longer jobs, one that fails,
one urgent, one held and later released), shows the queue live until it
drains and the slots have let their last claims go (a slot keeps its claim
until its next fetch finds no work), prints the history and a summary, and
takes everything down again.
"""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from fetchwork.broker.client import Broker
from fetchwork.config.loader import Config, environ_without_config
from fetchwork.config.protocol import JobStatus
from fetchwork.errors import FetchworkError
from fetchwork.pool import Pool
from fetchwork.submit import tables
from fetchwork.submit.submitfile import parse_submit
from fetchwork.submit.usercli import table_console

SUBMIT = """\
# A mixed cluster: five jobs of different lengths, one that exits 3.
executable = /bin/sh
arguments  = "-c 'sleep $(seconds); echo job $(Process) slept $(seconds)s; exit $(code)'"
output     = out.$(Process)
error      = err.$(Process)
request_memory = 64
queue seconds, code from (
    1, 0
    2, 0
    1, 3
    3, 0
    1, 0
)

# An urgent job: a higher priority runs before the others still idle.
priority  = 10
arguments = "-c 'echo urgent'"
queue

# A held job; the demo releases it after a few seconds.
priority  = 0
hold      = true
arguments = "-c 'echo released and ran'"
queue
"""

# Timing knobs small enough for a tour that takes seconds, not minutes.
DEMO_KNOBS = {
    "_FETCHWORK_BROKER_REAPER_INTERVAL": "1",
    "_FETCHWORK_STARTER_INITIAL_UPDATE_INTERVAL": "1",
    "_FETCHWORK_STARTER_UPDATE_INTERVAL": "2",
    "_FETCHWORK_STARTD_SHUTDOWN_GRACE": "10",
    "_FETCHWORK_FETCHWORK_FETCH_LONG_POLL": "1",
}


# Seconds the demo waits, once the queue is empty, for every slot to report that it
# has let its last job go (a slot keeps its claim until its next fetch finds no work).
SETTLE_S = 20.0


class DemoError(FetchworkError):
    """The demo could not finish its tour."""


def unsettled(slot_ads: Sequence[Any], slots: int) -> list[str]:
    """What keeps the slot table from being the pool's picture after its last job: the
    slots missing, and those still claimed or naming a job (none: it is settled)."""
    found = [f"{slots - len(slot_ads)} slot(s) not reported"] if len(slot_ads) < slots else []
    for ad in slot_ads:
        state, job = ad.get("State"), ad.get("JobId")
        if state in ("Claimed", "Preempting") or job:
            found.append(f"{ad.get('Name')} {state} {ad.get('Activity')}"
                         + (f" with job {job}" if job else ""))
    return found


def _view(broker: Broker, note: str, jobs: list) -> Group:
    now = time.time()
    return Group(Text(note, style="bold"), tables.queue_table(jobs, now),
                 Text(tables.queue_summary(jobs)),
                 tables.slot_table(broker.slots()))


def run_demo(console: Console, slots: int = 2, timeout_s: float = 120.0) -> int:
    state = Path(tempfile.mkdtemp(prefix="fw-demo-"))
    work = state / "work"
    work.mkdir()
    if os.geteuid() == 0:
        # Jobs never run as root: a root startd runs them as SLOT_USER or
        # nobody, who must be able to reach and write the demo's work folder.
        state.chmod(0o755)
        work.chmod(0o777)
    environ = environ_without_config()
    environ.update(DEMO_KNOBS)
    environ.update({"FETCHWORK_STATE_DIR": str(state), "FETCHWORK_CONFIG": os.devnull})
    config = Config.load(environ=environ)
    log_path = state / "pool.log"
    pool = Pool(config, slots=slots, log_path=log_path,
                extra_env={**DEMO_KNOBS, "FETCHWORK_CONFIG": os.devnull})
    started = time.monotonic()
    console.print(f"[bold]fetchwork demo[/bold]: a {slots}-slot pool in {state}")
    try:
        pool.start()
        broker = Broker.from_config(config, start=False)
        (work / "demo.sub").write_text(SUBMIT)
        console.print("\n[bold]demo.sub[/bold]\n" + SUBMIT)
        cluster = broker.next_cluster()
        parsed = parse_submit(SUBMIT, cluster, submit_dir=str(work), source="demo.sub")
        job_ids = broker.submit(parsed.ads, owner=getpass.getuser(), cluster_id=cluster)
        console.print(f"{len(job_ids)} job(s) submitted to cluster {cluster}.\n")
        held = [job_ids[-1]]
        released = False
        deadline = time.monotonic() + timeout_s
        with Live(_view(broker, "the queue", broker.query()), console=console,
                  refresh_per_second=4, transient=False) as live:
            while True:
                if not released and time.monotonic() - started > 4:
                    # Released once it is held: until the leader has admitted it (on a
                    # loaded machine, seconds after the submission) it is not held yet.
                    released = bool(broker.release(held))
                note = "the queue" + ("" if released else f" (job {held[0]} is held)")
                jobs = broker.query()
                live.update(_view(broker, note, jobs))
                if released and not jobs:
                    break
                dead = pool.dead_child()
                if dead:
                    raise DemoError(f"{dead} ended during the demo")
                if time.monotonic() > deadline:
                    raise DemoError(f"the jobs did not finish within {timeout_s:.0f}s")
                time.sleep(0.25)
            _settle(broker, live, slots)
        history = sorted(broker.history(f"ClusterId == {cluster}"),
                         key=lambda ad: ad.get("ProcId", 0))
        console.line(2)
        console.print(Text("the history", style="bold"))
        console.print(tables.history_table(history, time.time()))
        _summary(console, history, work, time.monotonic() - started)
        return 0
    except BaseException:
        if log_path.exists():
            tail = log_path.read_text(errors="replace").splitlines()[-30:]
            console.print("[bold]last lines of the pool's log:[/bold]", highlight=False)
            console.print("\n".join(tail), markup=False, highlight=False)
        raise
    finally:
        pool.stop()
        shutil.rmtree(state, ignore_errors=True)


def _settle(broker: Broker, live: Live, slots: int) -> None:
    """Once the queue is empty, show the slots as they are after the last job: wait (at
    most SETTLE_S) until each has reported letting its claim go, then draw the view
    a last time, saying so when some slot has not."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        slot_ads = broker.slots()
        left = unsettled(slot_ads, slots)
        if not left or time.monotonic() > deadline:
            break
        live.update(_view(broker, "the queue is empty; waiting for the slots to report", []))
        time.sleep(0.25)
    note = "the queue is empty and every slot is free" if not left else (
        f"the queue is empty; not yet reported after {SETTLE_S:.0f}s: {'; '.join(left)}")
    live.update(Group(Text(note, style="bold"), tables.queue_table([], time.time()),
                      Text(tables.queue_summary([])), tables.slot_table(slot_ads)))


def _summary(console: Console, history: list, work: Path, elapsed_s: float) -> None:
    ok = sum(1 for ad in history
             if ad.get("JobStatus") == JobStatus.COMPLETED and ad.get("ExitCode") == 0)
    failed = len(history) - ok
    cpu_s = sum(float(ad.get("RemoteUserCpu", 0) or 0) + float(ad.get("RemoteSysCpu", 0) or 0)
                for ad in history)
    console.print(f"\n{len(history)} jobs done in {elapsed_s:.1f}s: {ok} exited 0, "
                  f"{failed} did not (job 2 exits 3 on purpose); "
                  f"{cpu_s:.2f} CPU seconds measured.")
    for path in sorted(work.glob("out.*"), key=lambda p: int(p.suffix[1:])):
        console.print(f"  {path.name}: {path.read_text().strip()}")


@click.command("demo")
@click.option("--slots", type=click.IntRange(min=1), default=2, show_default=True,
              help="Slots of the demo's startd.")
def demo_command(slots: int) -> None:
    """A short tour: a temporary pool, a mixed cluster of jobs, a live
    table and a summary. Leaves nothing behind."""
    raise SystemExit(run_demo(table_console(), slots=slots))
