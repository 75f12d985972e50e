"""The Lua scripts: read from the package once, loaded once per server, called by SHA.

Job transition scripts get `lua/lib.lua` in front of their own text (Redis
has no include); `STANDALONE` scripts run as written. A server that lost its
script cache (restart, SCRIPT FLUSH) answers NOSCRIPT and the script is
loaded again.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.exceptions import NoScriptError

TRANSITIONS = ("stage", "submit", "claim", "reject", "renew", "finish", "reap", "remove", "hold",
               "release")
STANDALONE = ("leader_renew", "leader_resign", "read_ads", "trim_history")

Arg = str | bytes | int | float


def _read(name: str) -> str:
    return resources.files("fetchwork.broker").joinpath("lua", f"{name}.lua").read_text("utf-8")


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script `name`."""
    if name in STANDALONE:
        return _read(name)
    if name not in TRANSITIONS:
        raise KeyError(f"no Lua script named {name!r}")
    return _read("lib") + "\n" + _read(name)


@cache
def sha(name: str) -> str:
    return hashlib.sha1(source(name).encode("utf-8")).hexdigest()


class Scripts:
    """Calls scripts by SHA on one Redis client, loading them when the server lacks them."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self._loaded: set[str] = set()
        self._lock = threading.Lock()

    def load(self, name: str) -> str:
        digest = self.client.script_load(source(name))
        if isinstance(digest, bytes):
            digest = digest.decode()
        if digest != sha(name):
            raise RuntimeError(f"Redis computed SHA {digest} for {name}.lua, expected {sha(name)}")
        with self._lock:
            self._loaded.add(name)
        return digest

    def ensure_loaded(self, names: Sequence[str]) -> None:
        """Load any of `names` not loaded yet (before queueing them in a transaction)."""
        for name in names:
            if name not in self._loaded:
                self.load(name)

    def call(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        try:
            return self.client.evalsha(sha(name), len(keys), *keys, *args)
        except NoScriptError:
            self.load(name)
            return self.client.evalsha(sha(name), len(keys), *keys, *args)

    def queue(self, pipe: redis.client.Pipeline, name: str, keys: Sequence[str],
              args: Sequence[Arg]) -> None:
        """Add a call to `pipe`; call ensure_loaded first."""
        pipe.evalsha(sha(name), len(keys), *keys, *args)

    def forget(self) -> None:
        """Forget what was loaded (after the server answered NOSCRIPT in a pipeline)."""
        with self._lock:
            self._loaded.clear()
