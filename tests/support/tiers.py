"""The two tiers of the test suite: the pool tier and the quick tier.

A test module belongs to the pool tier (marker `pool`) when it runs a pool's
daemons as processes (a startd, `fetchwork broker`, `fetchwork up`), starters
with real jobs, a Sentinel set or a Redis Cluster, or when its tests take
more than about five seconds together. Everything else is the quick tier:
pure decisions, a real Redis (the session's, or a test's own), hook programs,
single commands. `pytest -m "not pool"` runs the quick tier.

The tier is decided here, by folder or module path under tests/, so that a
module's tier is read in one place; tests/conftest.py marks the items.
"""

from __future__ import annotations

from pathlib import PurePosixPath

# Folders whose every module is in the pool tier.
POOL_FOLDERS = frozenset({
    "pool",                                        # whole pools
})

POOL_MODULES = frozenset({
    # Sentinel and Cluster.
    "broker/connections/test_cluster.py",
    "broker/connections/test_cluster_backfill.py",
    "broker/connections/test_cluster_broker.py",
    "broker/connections/test_sentinel_failover.py",
    # `fetchwork broker`, `fetchwork up` or a startd as a process.
    "broker/filters/test_failover.py",
    "broker/leader/test_failover.py",
    "broker/leader/test_service.py",
    "hooks/test_finish_outage.py",
    "hooks/rqbridge/test_bridge.py",
    "hooks/rqbridge/test_keeper.py",
    "hooks/rqbridge/test_lifecycle.py",
    "project/test_install.py",
    "startd/slots/test_startd.py",
    "startd/starters/test_zygote.py",
    "startd/test_expressions.py",
    "startd/test_failures.py",
    "startd/test_fetch_warnings.py",
    "startd/test_hooks.py",
    "startd/test_preempt.py",
    "startd/test_signals.py",
    "startd/test_timing.py",
    "startd/test_withdrawal.py",
    "starter/test_hold_reasons.py",
    "starter/test_runas.py",
    # Starters with real jobs.
    "starter/test_starter.py",
    "starter/test_zygote.py",
    # The Python API against `fetchwork up`: the htcondor2 script, the filters' verdict.
    "api/test_filtered.py",
    "api/test_script.py",
    # More than about five seconds together.
    "broker/backfill/test_pacing.py",
    "broker/filters/test_activation.py",
    "broker/filters/test_submission.py",
    "hooks/test_reference.py",
    "submit/test_usercli_views.py",
    "submit/test_userlog_wait.py",
})


def is_pool(path: str) -> bool:
    """Whether the test module at `path` (relative to tests/, with slashes) is in the
    pool tier."""
    module = PurePosixPath(path)
    return str(module) in POOL_MODULES or any(
        str(folder) in POOL_FOLDERS for folder in module.parents)
