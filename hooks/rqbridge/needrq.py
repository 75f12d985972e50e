"""The one place the rq bridge imports rq, so that without it every hook and
the job process fail with a message that says what to install.

rq is an optional dependency (`pip install 'fetchwork[rq]'`): the rest of
fetchwork never imports this package, and this module raises `RqMissingError`
at import when rq cannot be imported, which the hook runner reports as the
hook's failure and the job process prints before it exits.
"""

from __future__ import annotations

from fetchwork.errors import FetchworkError

INSTALL_HINT = "pip install 'fetchwork[rq]'"


class RqMissingError(FetchworkError):
    """The rq bridge was used where the rq package cannot be imported."""


try:
    import rq
    from rq import Queue, Retry, Worker
    from rq.command import PUBSUB_CHANNEL_TEMPLATE, parse_payload
    from rq.defaults import DEFAULT_JOB_MONITORING_INTERVAL, DEFAULT_MAINTENANCE_TASK_INTERVAL
    from rq.exceptions import DequeueTimeout, InvalidJobOperation, NoSuchJobError
    from rq.executions import Execution
    from rq.job import Job, JobStatus
    from rq.scheduler import RQScheduler
    from rq.timeouts import TimerDeathPenalty
    from rq.utils import now
except ImportError as exc:  # the optional dependency is not installed
    raise RqMissingError(
        f"the rq bridge needs the rq package, which cannot be imported here ({exc}); "
        f"install it with {INSTALL_HINT}") from exc

__all__ = ["DEFAULT_JOB_MONITORING_INTERVAL", "DEFAULT_MAINTENANCE_TASK_INTERVAL",
           "PUBSUB_CHANNEL_TEMPLATE", "DequeueTimeout", "Execution", "InvalidJobOperation",
           "Job", "JobStatus", "NoSuchJobError", "Queue", "RQScheduler", "Retry",
           "RqMissingError", "TimerDeathPenalty", "Worker", "now", "parse_payload", "rq"]
