"""The port a daemon serves its Prometheus metrics on, from its knob (empty: off)."""

from __future__ import annotations

from fetchwork.errors import ConfigError

from .loader import Config


def metrics_port(config: Config, knob: str) -> int | None:
    """The TCP port knob `knob` names, or None when it is empty (metrics off)."""
    text = (config.get(knob) or "").strip()
    if not text:
        return None
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise ConfigError(f"{knob} = {text!r} is not a TCP port (1-65535); leave it empty "
                          "to serve no metrics")
    return port
