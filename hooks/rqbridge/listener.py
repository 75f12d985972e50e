"""rq's commands heard from a slot's first fetch, kept for the job's starter (needs rq).

rq's worker subscribes to its pubsub channel when it starts, so a command
sent once a job is `started` (`send_stop_job_command` needs the job's worker
name, which `prepare_job_execution` writes) always reaches it. A slot's
worker is split across two processes: the fetch hook in the startd marks the
job started, and the keeper in the job's starter listens while it runs. Redis
keeps no pubsub message, so a command sent between the two would be lost.

So the startd listens too, for the life of the process, on the channel of
every slot worker it has fetched for: the fetch hook calls `follow` before it
marks a job started, and `follow` returns once Redis has confirmed the
subscription. Each command heard is kept, with the job the worker ran when it
was heard, in a short list in rq's Redis (`rq:fetchwork:commands:<worker>`,
the newest KEEP_COMMANDS for KEEP_S). The keeper subscribes first, then
publishes a mark on the channel and reads what was kept for its job once
the startd has kept the mark too (`kept_for`; the startd hears a channel's
messages in order), so every command reaches the job once its worker name
is known: the ones sent before, from the list, and
the ones after, from its own subscription (a command may arrive both ways;
acting on it twice does what acting once does).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

import redis

from fetchwork.hooks.rqbridge.needrq import PUBSUB_CHANNEL_TEMPLATE, parse_payload

log = logging.getLogger(__name__)

KEY_TEMPLATE = "rq:fetchwork:commands:%s"
# A worker's commands are kept this long and this many (a job reads them at its start).
KEEP_S = 3600
KEEP_COMMANDS = 16
# Longest wait for Redis to confirm a new subscription before the fetch goes on.
CONFIRM_S = 5.0
# Pause before listening again after the connection failed.
RETRY_S = 1.0
# A keeper's mark on the channel (not one of rq's commands): the startd keeps it in
# turn, so once it is kept, every command published before it is kept too.
SYNC = "fetchwork-sync"
# Longest wait for the startd to keep the mark, and the pause between looks.
SYNC_S = 2.0
SYNC_POLL_S = 0.005


def key(worker_name: str) -> str:
    return KEY_TEMPLATE % worker_name


class Listener:
    """One subscription of the startd's to its slot workers' channels, on a thread."""

    def __init__(self, connection: redis.Redis):
        self.connection = connection
        self._names: set[str] = set()
        self._confirmed: set[str] = set()
        self._changed = threading.Condition()
        self._pubsub: Any = None
        self._thread: threading.Thread | None = None
        self._failing = False

    def follow(self, worker_name: str) -> bool:
        """Listen on `worker_name`'s channel; True once Redis confirmed it (False:
        not within CONFIRM_S, logged)."""
        with self._changed:
            if worker_name in self._confirmed:
                return True
            self._names.add(worker_name)
            pubsub = self._pubsub
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rq-commands",
                                                daemon=True)
                self._thread.start()
        if pubsub is not None:
            try:
                pubsub.subscribe(PUBSUB_CHANNEL_TEMPLATE % worker_name)
            except redis.RedisError:
                pass  # the thread subscribes every name again when it reconnects
        with self._changed:
            heard = self._changed.wait_for(lambda: worker_name in self._confirmed, CONFIRM_S)
        if not heard:
            log.warning("rq worker %s: not yet listening for rq's commands; one sent before "
                        "its job's starter listens may be lost", worker_name)
        return heard

    def _run(self) -> None:
        while True:
            try:
                self._listen()
            except redis.RedisError as exc:
                # Said once an outage; the next confirmed subscription says it is over.
                (log.debug if self._failing else log.warning)(
                    "rq's commands to the slots not heard for now (listening again every "
                    "%.0f s): %s", RETRY_S, exc)
                self._failing = True
            with self._changed:
                self._pubsub = None
                self._confirmed.clear()
            time.sleep(RETRY_S)

    def _listen(self) -> None:
        pubsub = self.connection.pubsub()
        try:
            with self._changed:
                self._pubsub = pubsub
                names = sorted(self._names)
            # follow() made the thread with a name, so there is one to subscribe.
            pubsub.subscribe(*(PUBSUB_CHANNEL_TEMPLATE % name for name in names))
            while True:
                message = pubsub.get_message(timeout=1.0)
                if message is not None:
                    self._take(message)
        finally:
            pubsub.close()

    def _take(self, message: dict[str, Any]) -> None:
        channel = message.get("channel")
        channel = channel.decode() if isinstance(channel, bytes) else str(channel)
        name = channel.removeprefix(PUBSUB_CHANNEL_TEMPLATE % "")
        if message.get("type") == "subscribe":
            if self._failing:
                self._failing = False
                log.info("rq's commands to the slots heard again")
            with self._changed:
                self._confirmed.add(name)
                self._changed.notify_all()
        elif message.get("type") == "message":
            keep(self.connection, name, message)


def keep(connection: redis.Redis, worker_name: str, message: dict[str, Any]) -> None:
    """Keep the command in `message` for the job `worker_name` runs now (or is told of)."""
    try:
        payload = parse_payload(message)
    except (ValueError, KeyError, AttributeError):
        log.warning("rq worker %s: a command that is not rq's JSON, ignored", worker_name)
        return
    if payload.get("command") == SYNC:  # a keeper's mark: everything before it is kept
        entry = json.dumps({"sync": payload.get("token")})
    else:
        job_id = payload.get("job_id") or _current_job(connection, worker_name)
        entry = json.dumps({"job": job_id, "payload": payload})
    try:
        with connection.pipeline(transaction=True) as pipe:
            pipe.rpush(key(worker_name), entry)
            pipe.ltrim(key(worker_name), -KEEP_COMMANDS, -1)
            pipe.expire(key(worker_name), KEEP_S)
            pipe.execute()
    except redis.RedisError as exc:
        log.warning("rq worker %s: command %s not kept: %s", worker_name,
                    payload.get("command"), exc)


def _current_job(connection: redis.Redis, worker_name: str) -> str | None:
    """The job the worker runs now, as rq records it (None: idle, or unknown)."""
    from fetchwork.hooks.rqbridge import slotworker  # rq's worker class, as the hooks find it

    try:
        return slotworker.found_worker(connection, worker_name).get_current_job_id()
    except Exception:  # noqa: BLE001 - a worker rq no longer knows runs nothing
        return None


def kept_for(connection: redis.Redis, worker_name: str, job_id: str,
             wait_s: float = SYNC_S) -> list[dict[str, Any]]:
    """The commands kept for `job_id` on `worker_name`'s channel, oldest first, as
    pubsub messages (what `Worker.handle_payload` takes). Call it once subscribed to
    the channel: it publishes a mark there and waits (up to `wait_s`) until the
    startd has kept it, so every command published before the subscription, which
    the startd hears before the mark, is kept by then."""
    token = uuid.uuid4().hex
    try:
        connection.publish(PUBSUB_CHANNEL_TEMPLATE % worker_name,
                           json.dumps({"command": SYNC, "token": token}))
        deadline = time.monotonic() + wait_s
        while True:
            entries = [_entry(raw) for raw in connection.lrange(key(worker_name), 0, -1)]
            if any(entry.get("sync") == token for entry in entries):
                break
            if time.monotonic() >= deadline:
                log.info("rq job %s: the startd did not answer within %.0f s; taking the "
                         "commands it kept so far", job_id, wait_s)
                break
            time.sleep(SYNC_POLL_S)
    except redis.RedisError as exc:
        log.warning("rq job %s: commands sent before it started not read: %s", job_id, exc)
        return []
    return [{"type": "message", "data": json.dumps(entry.get("payload")).encode()}
            for entry in entries if entry.get("job") == job_id]


def _entry(raw: Any) -> dict[str, Any]:
    try:
        entry = json.loads(raw)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def is_sync(message: dict[str, Any]) -> bool:
    """Whether a pubsub message is a keeper's mark rather than one of rq's commands."""
    try:
        return parse_payload(message).get("command") == SYNC
    except (ValueError, KeyError, AttributeError):
        return False


_lock = threading.Lock()
_listeners: dict[int, Listener] = {}


def follow(connection: redis.Redis, worker_name: str) -> bool:
    """The startd's listener (made on first use, one per connection) follows `worker_name`."""
    with _lock:
        listener = _listeners.get(id(connection))
        if listener is None:
            listener = _listeners[id(connection)] = Listener(connection)
    return listener.follow(worker_name)
