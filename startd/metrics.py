"""The startd's Prometheus metrics, served on STARTD_METRICS_PORT (metricsswitch.py).

Counted as they happen: runs of the hooks the startd itself runs (fetch,
reply, evict) by hook and exit code, their failures, and their durations.
Read at each scrape: slots by state and activity, and each running job's CPU
seconds and resident memory, sampled with psutil over the starter's
children (the job's process tree), so the values move while the job runs.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Iterator

import psutil
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fetchwork.hooks.runner import HookResult
from fetchwork.startd.metricsswitch import SlotHost

log = logging.getLogger(__name__)

HOOK_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def exit_label(result: HookResult) -> str:
    """The exit_code label of a hook run: the code, or why there is none."""
    if result.error is not None:
        return "error"
    if result.timed_out:
        return "timeout"
    if result.signal is not None:
        return f"signal{result.signal}"
    return str(result.exit_code)


def job_usage(starter_pid: int) -> tuple[float, int]:
    """(CPU seconds, resident bytes) of the processes under a starter (its job), with the
    CPU of the job's processes that have exited and been waited for."""
    cpu_s, rss = 0.0, 0
    try:
        children = psutil.Process(starter_pid).children(recursive=True)
    except psutil.Error:
        return cpu_s, rss
    for process in children:
        try:
            times = process.cpu_times()
            # Children it has reaped count too (a shell's commands, for one).
            cpu_s += times.user + times.system + times.children_user + times.children_system
            rss += process.memory_info().rss
        except psutil.Error:
            continue
    return cpu_s, rss


class SlotCollector(Collector):
    """Slot and job gauges, computed at each scrape."""

    def __init__(self, host: SlotHost):
        self.host = host

    def collect(self) -> Iterator[Metric]:
        slots = GaugeMetricFamily("fetchwork_slots", "Slots by state and activity",
                                  labels=["state", "activity"])
        tally = Tally((slot.status.state.value, slot.status.activity.value)
                      for slot in list(self.host.slots))
        for (state, activity), count in sorted(tally.items()):
            slots.add_metric([state, activity], count)
        cpu = GaugeMetricFamily("fetchwork_job_cpu_seconds",
                                "CPU seconds (user + system) used by the job running in a slot",
                                labels=["slot", "job"])
        memory = GaugeMetricFamily("fetchwork_job_memory_bytes",
                                   "Resident memory of the job running in a slot",
                                   labels=["slot", "job"])
        for slot in list(self.host.slots):
            starter, claim = slot.starter, slot.claim
            if starter is None or claim is None:
                continue
            cpu_s, rss = job_usage(starter.pid)
            labels = [f"{slot.label}@{self.host.name}", claim.job_id or ""]
            cpu.add_metric(labels, cpu_s)
            memory.add_metric(labels, rss)
        yield from (slots, cpu, memory)


class StartdMetrics:
    """The startd's registry; `hook_done` is called by the loop for each hook result."""

    def __init__(self, host: SlotHost):
        self.registry = CollectorRegistry()
        self.hook_runs = Counter("fetchwork_hook_runs_total", "Hook runs by hook and exit code",
                                 ["hook", "exit_code"], registry=self.registry)
        self.hook_failures = Counter("fetchwork_hook_failures_total",
                                     "Hook runs that failed (non-zero, signal, timeout, error)",
                                     ["hook", "exit_code"], registry=self.registry)
        self.hook_duration = Histogram("fetchwork_hook_duration_seconds", "Hook run time",
                                       ["hook"], buckets=HOOK_BUCKETS_S, registry=self.registry)
        self.registry.register(SlotCollector(host))

    def hook_done(self, result: HookResult) -> None:
        hook, code = result.spec.hook, exit_label(result)
        self.hook_runs.labels(hook, code).inc()
        if not result.ok:
            self.hook_failures.labels(hook, code).inc()
        self.hook_duration.labels(hook).observe(result.duration_s)


def serve(host: SlotHost, port: int) -> StartdMetrics:
    """The startd's metrics, served on `port` from now on."""
    metrics = StartdMetrics(host)
    start_http_server(port, registry=metrics.registry)
    log.info("serving metrics on port %s", port)
    return metrics
