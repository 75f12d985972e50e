"""The submit side of the job event log: as condor_submit, `fetchwork submit`
creates each job's log file before it queues anything (so the user owns it,
and a path that cannot be written is an error at once), and returns only
once the broker service has written the jobs' submit events, so that
`fetchwork wait LOG` run next finds them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import click

from fetchwork.broker.client import Broker
from fetchwork.broker.store import codec
from fetchwork.broker.userlog.writer import stream_id
from fetchwork.config.loader import Config
from fetchwork.errors import SubmitFileError

log = logging.getLogger(__name__)

POLL_S = 0.05


def create_logs(ads: Sequence[Mapping[str, Any]]) -> list[str]:
    """Create (or keep) the UserLog of every job; the distinct paths, in order."""
    paths = list(dict.fromkeys(ad["UserLog"] for ad in ads
                               if isinstance(ad.get("UserLog"), str)))
    for path in paths:
        try:
            with open(path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise SubmitFileError(f"cannot create the job event log {path} "
                                  f"(submit command log): {exc.strerror}") from exc
    return paths


def await_logged(broker: Broker, paths: Sequence[str]) -> None:
    """Wait (at most SUBMIT_USERLOG_WAIT seconds) until the broker's user log writer
    has passed every event so far; warn when no broker service leads the pool."""
    if not paths:
        return
    # Read afresh, as the command's own configuration is (usercli.connect_broker).
    timeout_s = Config.load().get_duration_s("SUBMIT_USERLOG_WAIT")
    if timeout_s <= 0:
        return
    target = stream_id(broker.last_event_id())
    named = ", ".join(paths[:3]) + (" ..." if len(paths) > 3 else "")
    if not broker.client.exists(broker.keys.leader):
        click.echo(f"fetchwork: warning: no broker service runs for pool {broker.pool}; "
                   f"the job event log {named} is written once one runs", err=True)
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        position = broker.client.get(broker.keys.userlog)
        if position is not None and stream_id(codec.text(position)) >= target:
            return
        time.sleep(POLL_S)
    click.echo(f"fetchwork: warning: the broker service has not written the job event log "
               f"{named} within {timeout_s:g}s (is BROKER_WRITE_USER_LOGS false?)", err=True)
