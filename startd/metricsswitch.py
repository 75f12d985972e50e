"""Whether the startd serves metrics: the Prometheus client only when STARTD_METRICS_PORT is set.

The client library (with the HTTP server and e-mail parsing it brings) is some
11 MB of a startd's resident memory, so it is imported only by a startd that
serves metrics (metrics.py); one that does not counts nothing.
"""

from __future__ import annotations

from typing import Protocol

from fetchwork.config.loader import Config
from fetchwork.config.metricsport import metrics_port
from fetchwork.hooks.runner import HookResult
from fetchwork.startd.slots.slot import Slot


class SlotHost(Protocol):
    """What the metrics read from the startd: its name and slots."""

    name: str
    slots: list[Slot]


class HookCounter(Protocol):
    """What the loop tells the metrics: each result of a hook the startd ran."""

    def hook_done(self, result: HookResult) -> None: ...


class NoMetrics:
    """Stands in when STARTD_METRICS_PORT is empty."""

    def hook_done(self, result: HookResult) -> None:
        pass


def serve_startd_metrics(host: SlotHost, config: Config) -> HookCounter:
    """Serve the startd's metrics on STARTD_METRICS_PORT, or nothing when it is empty."""
    port = metrics_port(config, "STARTD_METRICS_PORT")
    if port is None:
        return NoMetrics()
    # Imported here, not at the top: a startd without metrics never loads the client.
    from fetchwork.startd import metrics

    return metrics.serve(host, port)
