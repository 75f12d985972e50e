"""This process's configuration environment, for tests that call the reference hooks
in-process: only the given FETCHWORK_* knobs, the configuration and the hooks' broker
client read again, and everything put back afterwards."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

import pytest

from fetchwork.config.loader import environ_without_config, reload_config
from fetchwork.hooks import reference


@contextlib.contextmanager
def hook_environment(monkeypatch: pytest.MonkeyPatch,
                     knobs: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """The environment with `knobs` as its only configuration variables (yielded whole,
    for hooks run as programs too)."""
    env = environ_without_config()
    env.update(knobs)
    for name in list(os.environ):
        if name.startswith(("FETCHWORK_", "_FETCHWORK_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reload_config()
    reference.reset_broker()
    try:
        yield env
    finally:
        reference.reset_broker()
        monkeypatch.undo()
        reload_config()
