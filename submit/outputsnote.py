"""What `q` and `history` say of jobs whose returned outputs wait in the pool: which
jobs, and a warning for outputs that expire soon (TRANSFER_OUTPUT_EXPIRY_WARNING)."""

from __future__ import annotations

import time

from fetchwork.broker.client import Broker
from fetchwork.config.loader import get_config
from fetchwork.config.protocol import job_id_key
from fetchwork.transfer import stored


def waiting_note(broker: Broker, now_s: float | None = None) -> list[str]:
    """Lines for `q` and `history`: the jobs whose outputs wait to be fetched, and a
    warning for those that expire soon."""
    waiting = stored.waiting_outputs(broker.store)
    if not waiting:
        return []
    now_s = time.time() if now_s is None else now_s
    warn_s = get_config().get_duration_s("TRANSFER_OUTPUT_EXPIRY_WARNING")
    ids = sorted(waiting, key=job_id_key)
    shown = " ".join(ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
    lines = [f"{len(ids)} job(s) hold outputs not yet fetched (fetchwork transfer-data): "
             f"{shown}"]
    soon = [job for job in ids if waiting[job][1] - now_s <= warn_s]
    if soon:
        first = min(waiting[job][1] for job in soon)
        lines.append(f"warning: the outputs of {len(soon)} job(s) expire within "
                     f"{max(0, first - now_s) / 3600:.1f} h unless fetched: "
                     + " ".join(soon[:20]))
    return lines
