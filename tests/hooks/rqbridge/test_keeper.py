"""The keeper: what rq's worker does while its horse runs, from the job's starter.

A real rq on a private redis-server; the starter is stood in for by the
control pipe an in-process hook writes its requests to (hooks/control.py),
read here as the starter's loop would read it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
import redis
from rq import Queue
from rq.command import PUBSUB_CHANNEL_TEMPLATE, send_kill_horse_command, send_stop_job_command

from fetchwork.hooks import control
from fetchwork.hooks.rqbridge import keeper, listener, slotworker
from tests.support import rqbridge
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def rq_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with rqbridge.rq_redis(tmp_path_factory.mktemp("rq-keeper")) as port:
        yield rqbridge.url(port, 0)


@pytest.fixture
def requests() -> Iterator[int]:
    """The read end of the pipe control.request() writes to."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    control.install(write_fd)
    yield read_fd
    control.install(None)
    os.close(read_fd)
    os.close(write_fd)


def _read(fd: int) -> list[str]:
    try:
        return os.read(fd, 4096).decode().split()
    except BlockingIOError:
        return []


def _requests_until(fd: int, count: int, timeout_s: float = 10) -> list[str]:
    """The requests written to the pipe, once `count` have come (each is its own
    write, so a loaded machine can let the reader in between two of them)."""
    seen: list[str] = []

    def enough() -> bool:
        seen.extend(_read(fd))
        return len(seen) >= count

    wait_until(enough, timeout_s, what=f"{count} requests on the control pipe")
    return seen + _read(fd)


def _running(rq_url: str, name: str, followed: bool = False
             ) -> tuple[slotworker.SlotWorker, keeper.Keeper]:
    """A job taken by a slot's worker (as the fetch hook takes it; `followed`: with the
    startd listening on the worker's channel first, as the in-process hook does), and
    its keeper."""
    connection = redis.Redis.from_url(rq_url)
    Queue(name, connection=connection).enqueue("builtins.len", "abc")
    worker = slotworker.new_worker(connection, [name], f"{name}.1")
    taken = slotworker.dequeue(worker, None)
    assert taken is not None
    if followed:
        assert listener.follow(connection, worker.name)
    execution = slotworker.start(worker, *taken)
    return worker, keeper.Keeper(worker, taken[0], execution, interval_s=0.1, walltime_s=0.2)


def test_heartbeats_keep_the_execution_alive(rq_url: str, requests: int) -> None:
    worker, kept = _running(rq_url, "beats")
    registry_key = kept.job.started_job_registry.key
    first = worker.connection.zscore(registry_key, kept.execution.composite_key)
    keeper.start(kept)
    try:
        wait_until(lambda: (worker.connection.zscore(registry_key, kept.execution.composite_key)
                            or 0) > (first or 0), 10, what="a later heartbeat")
    finally:
        keeper.stop(kept.job.id)


def test_a_job_past_its_timeout_is_killed_as_rqs_worker_kills_it(
        rq_url: str, requests: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keeper, "KILL_GRACE_S", 0.3)
    _, kept = _running(rq_url, "late")
    keeper.start(kept)
    try:
        wait_until(lambda: kept.killed, 10, what="the kill")
        assert _requests_until(requests, 1, 5) == ["kill"]
    finally:
        keeper.stop(kept.job.id)


def _listening(worker: slotworker.SlotWorker) -> bool:
    channel = PUBSUB_CHANNEL_TEMPLATE % worker.name
    return bool(dict(worker.connection.pubsub_numsub(channel)).get(channel.encode()))


def test_rqs_stop_command_removes_the_job(rq_url: str, requests: int) -> None:
    worker, kept = _running(rq_url, "stop")
    kept.kill_after_s = None
    keeper.start(kept)
    try:
        wait_until(lambda: _listening(worker), 10, what="the keeper listening")
        send_stop_job_command(worker.connection, kept.job.id)
        assert _requests_until(requests, 2) == ["remove", "kill"]
        assert not kept.killed  # stopped, not killed: the exit hook records `stopped`
    finally:
        keeper.stop(kept.job.id)


def test_rqs_kill_horse_command_kills_the_job(rq_url: str, requests: int) -> None:
    worker, kept = _running(rq_url, "killed")
    kept.kill_after_s = None
    keeper.start(kept)
    try:
        wait_until(lambda: _listening(worker), 10, what="the keeper listening")
        send_kill_horse_command(worker.connection, worker.name)
        assert _requests_until(requests, 1) == ["kill"]
        assert kept.killed
    finally:
        keeper.stop(kept.job.id)


def _kept(worker: slotworker.SlotWorker) -> list[bytes]:
    return worker.connection.lrange(listener.key(worker.name), 0, -1)


def test_a_stop_sent_before_the_starter_listens_reaches_the_job(rq_url: str,
                                                                requests: int) -> None:
    # Between the fetch (the job is `started`, its worker named) and the keeper's
    # subscription, only the startd listens: what it heard reaches the keeper.
    worker, kept = _running(rq_url, "early-stop", followed=True)
    kept.kill_after_s = None
    send_stop_job_command(worker.connection, kept.job.id)
    wait_until(lambda: _kept(worker), 10, what="the startd keeping the stop")
    assert _read(requests) == []  # nobody acted on it yet
    keeper.start(kept)
    try:
        assert _requests_until(requests, 2) == ["remove", "kill"]
        assert not kept.killed
    finally:
        keeper.stop(kept.job.id)


def test_a_stop_the_startd_is_slow_to_keep_still_reaches_the_job(
        rq_url: str, requests: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # The startd heard the stop but has not kept it yet when the keeper starts: the
    # keeper's mark on the channel comes after the stop, so the keeper waits for it.
    worker, kept = _running(rq_url, "slow-keep", followed=True)
    kept.kill_after_s = None
    keep = listener.keep

    def slow_keep(*args: object) -> None:
        time.sleep(0.3)
        keep(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(listener, "keep", slow_keep)
    send_stop_job_command(worker.connection, kept.job.id)
    keeper.start(kept)
    try:
        assert _requests_until(requests, 2) == ["remove", "kill"]
    finally:
        keeper.stop(kept.job.id)


def test_a_kill_sent_before_the_starter_listens_kills_the_job(rq_url: str,
                                                              requests: int) -> None:
    worker, kept = _running(rq_url, "early-kill", followed=True)
    kept.kill_after_s = None
    send_kill_horse_command(worker.connection, worker.name)
    wait_until(lambda: _kept(worker), 10, what="the startd keeping the kill")
    keeper.start(kept)
    try:
        assert _requests_until(requests, 1) == ["kill"]
        assert kept.killed
    finally:
        keeper.stop(kept.job.id)


def test_a_command_kept_for_an_earlier_job_does_not_reach_the_next(rq_url: str,
                                                                   requests: int) -> None:
    worker, first = _running(rq_url, "next-job", followed=True)
    send_kill_horse_command(worker.connection, worker.name)
    wait_until(lambda: _kept(worker), 10, what="the startd keeping the kill")
    # The first job ends (its starter gone before it listened); the same slot's worker
    # takes its next job. The kill was the first job's.
    queue = Queue("next-job", connection=worker.connection)
    slotworker.fail(worker, first.job, queue, first.execution, "its starter died")
    queue.enqueue("builtins.len", "de")
    taken = slotworker.dequeue(worker, None)
    assert taken is not None and taken[0].id != first.job.id
    execution = slotworker.start(worker, *taken)
    second = keeper.Keeper(worker, taken[0], execution, interval_s=0.1, walltime_s=None)
    keeper.start(second)
    try:
        # Something it does hear, sent now, shows that the kept kill was passed over.
        send_stop_job_command(worker.connection, taken[0].id)
        assert _requests_until(requests, 2) == ["remove", "kill"]
        assert not second.killed
    finally:
        keeper.stop(taken[0].id)


def test_a_busy_slots_name_is_not_taken_twice(rq_url: str) -> None:
    connection = redis.Redis.from_url(rq_url)
    queue = Queue("twice", connection=connection)
    queue.enqueue("builtins.len", "a")
    queue.enqueue("builtins.len", "b")
    running = slotworker.new_worker(connection, ["twice"], "slot1@host.7")
    first = slotworker.dequeue(running, None)
    assert first is not None
    slotworker.start(running, *first)
    # The same slot fetches again while its job runs (a busy slot looks for higher RANK),
    # and rq's maintenance runs meanwhile.
    again = slotworker.new_worker(connection, ["twice"], "slot1@host.7")
    slotworker.maintain(again, at=-1e9)
    second = slotworker.dequeue(again, None)
    assert second is not None
    slotworker.start(again, *second)
    assert running.name == "slot1@host.7"
    assert again.name.startswith("slot1@host.7-")
    names = {worker.name for worker in slotworker.SlotWorker.all(connection=connection)
             if worker.name.startswith("slot1@host.7")}
    assert names == {running.name, again.name}
