"""The hook threads: reused for the next hook, never making one hook wait for
another, ending when idle; a failing task leaves its thread serving."""

from __future__ import annotations

import threading

import pytest

from fetchwork.hooks.workers import Workers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def _ident_of(workers: Workers, task=None) -> int:
    seen: list[int] = []
    done = threading.Event()

    def body() -> None:
        seen.append(threading.get_ident())
        if task is not None:
            task()
        done.set()

    workers.run(body, "test-hook")
    assert done.wait(10)
    return seen[0]


def test_a_finished_thread_runs_the_next_task() -> None:
    workers = Workers(idle_s=30)
    first = _ident_of(workers)
    wait_until(lambda: workers.idle() == 1, 10, what="the thread back to idle")
    assert _ident_of(workers) == first


def test_a_warmed_set_has_its_threads_waiting_and_no_more() -> None:
    workers = Workers(idle_s=30)
    workers.warm(2)
    wait_until(lambda: workers.idle() == 2, 10, what="the warmed threads idle")
    waiting = {thread.ident for thread in threading.enumerate()}
    workers.warm(2)
    workers.warm()
    assert workers.idle() == 2
    assert _ident_of(workers) in waiting


def test_a_blocked_task_does_not_hold_up_the_next() -> None:
    workers = Workers(idle_s=30)
    release = threading.Event()
    started = threading.Event()

    def blocked() -> None:
        started.set()
        release.wait(30)

    workers.run(blocked, "blocked")
    assert started.wait(10)
    try:
        _ident_of(workers)  # ran while the first task still blocks its thread
    finally:
        release.set()


def test_an_idle_thread_ends_and_a_later_task_gets_a_new_one() -> None:
    workers = Workers(idle_s=0.2)
    first = _ident_of(workers)
    wait_until(lambda: workers.idle() == 0 and not any(
        thread.ident == first for thread in threading.enumerate()), 10,
        what="the idle thread to end")
    assert _ident_of(workers) != 0


def test_a_task_that_raises_leaves_its_thread_serving() -> None:
    workers = Workers(idle_s=30)
    failed = threading.Event()

    def failing() -> None:
        failed.set()
        raise RuntimeError("a broken hook task")

    workers.run(failing, "failing")
    assert failed.wait(10)
    wait_until(lambda: workers.idle() == 1, 10, what="the thread back to idle")
    ident = _ident_of(workers)
    assert any(thread.ident == ident for thread in threading.enumerate())
