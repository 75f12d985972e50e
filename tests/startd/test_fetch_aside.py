"""A fetch hook's answer is handled on the hook's own thread while the startd's loop
waits in select (no hand-over to the loop on a job's start path), by the loop when
it is busy, and what the handling raises stops the startd as it would in the loop.

A real startd (`--once`, `python:` hooks, real jobs); a `sitecustomize` loaded
only by the startd's own interpreter notes the thread that handles each answer
and, as a test asks, makes the loop look busy or the handling fail.
"""

from __future__ import annotations

import pytest

from tests.support.startd import Pool, pool_root

pytestmark = pytest.mark.timeout(120)

NOTING = """\
import os
import sys
import threading

if "fetchwork.startd" in sys.orig_argv:
    from fetchwork.startd import daemon

    NOTES = os.environ["FW_TEST_FETCH_NOTES"]
    ASK = os.environ.get("FW_TEST_FETCH_ASK", "")
    handle = daemon.Startd._on_fetched

    def noted(self, slot, result):
        with open(NOTES, "a") as notes:
            notes.write(threading.current_thread().name + "\\n")
        if ASK == "fail" and result.stdout.strip():
            raise RuntimeError("the handling of a fetch broke")
        return handle(self, slot, result)

    daemon.Startd._on_fetched = noted

    if ASK != "busy":
        poster = daemon.Startd._poster

        def patient(self, kind, slot_id, job_id):
            # The answer is posted once the loop waits in select (a hook that answers
            # at once may come before the loop's first wait): its lock is free then.
            post = poster(self, kind, slot_id, job_id)

            def when_waiting(result):
                if self._loop_lock.acquire(timeout=10):
                    self._loop_lock.release()
                post(result)

            return when_waiting

        daemon.Startd._poster = patient

    if ASK == "busy":
        class BusyLoop:
            # The loop's lock as a hook thread finds it while the loop works.
            def __init__(self):
                self.lock = threading.Lock()

            def acquire(self, blocking=True):
                return self.lock.acquire() if blocking else False

            def release(self):
                self.lock.release()

        start = daemon.Startd.__init__

        def init(self, *args, **kwargs):
            start(self, *args, **kwargs)
            self._loop_lock = BusyLoop()

        daemon.Startd.__init__ = init
"""


class Ran:
    """What a `--once` run left: its exit status, log, exit hook calls and the threads
    that handled the fetch hook's answers, in order."""

    def __init__(self, pool: Pool, status: int, threads: list[str]):
        self.status = status
        self.log = pool.log_text()
        self.exits = len(pool.calls("exit"))
        self.threads = threads


def _run(ask: str) -> Ran:
    with pool_root(f"aside-{ask or 'idle'}") as root:
        pool = Pool(root, "python")
        pool.write_config("STARTD_JOB_HOOK_KEYWORD = WORK\n" + pool.keyword_config("WORK"))
        pool.add_job("WORK", cmd="/bin/true")
        (root / "sitecustomize.py").write_text(NOTING)
        notes = root / "notes"
        env = pool.env()
        env["FW_TEST_FETCH_NOTES"] = str(notes)
        env["FW_TEST_FETCH_ASK"] = ask
        pool.env = lambda: env  # type: ignore[method-assign]
        status = pool.start("--once").wait(90)
        threads = notes.read_text().split() if notes.exists() else []
        return Ran(pool, status, threads)


def test_an_answer_is_handled_on_the_hook_thread_while_the_loop_waits():
    ran = _run("")
    assert ran.status == 0, ran.log[-3000:]
    assert ran.exits == 1  # the job ran its course
    assert ran.threads and "MainThread" not in ran.threads, ran.threads


def test_an_answer_waits_for_a_busy_loop_and_is_handled_there():
    ran = _run("busy")
    assert ran.status == 0, ran.log[-3000:]
    assert ran.exits == 1
    assert ran.threads and set(ran.threads) == {"MainThread"}, ran.threads


def test_a_handling_that_fails_on_the_hook_thread_stops_the_startd():
    ran = _run("fail")
    assert ran.status != 0
    assert "the handling of a fetch broke" in ran.log
    assert ran.threads and ran.threads[0] != "MainThread", ran.threads
    assert ran.exits == 0  # the job was never started
