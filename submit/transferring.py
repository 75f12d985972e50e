"""A submission's inputs sent with it (HTCondor's spooling), all or nothing: the
transferring jobs' files go into the pool, then the cluster is queued; a refused
submission releases what it attached. The pool's cap is read here and nowhere
else, so the check can move to the pool's published settings in one place."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from fetchwork.broker.client import Broker
from fetchwork.broker.submission.submitter import Submitted
from fetchwork.config.loader import get_config
from fetchwork.transfer import delivery, personupload, stored
from fetchwork.transfer.inputs import transfers, upload_inputs

log = logging.getLogger(__name__)


def submit_with_inputs(broker: Broker, ads: Sequence[dict[str, Any]], owner: str,
                       cluster: int, spool: bool,
                       say: Callable[[str], None] = log.info) -> Submitted:
    """Send the transferring jobs' inputs (`say` tells how much), then queue the
    cluster; with `spool` their outputs wait in the pool for transfer-data."""
    config = get_config()
    person = broker.person()
    if person is None and any(transfers(ad) for ad in ads):
        delivery.expire_due(broker.store)  # outputs past TRANSFER_OUTPUT_LIFETIME go first
    for ad in ads:
        if spool and transfers(ad):
            ad[delivery.SPOOL_ATTR] = True
    if person is not None:  # staged for the leader, which attaches them as it queues
        personupload.stage_inputs(broker, person.name, ads, stored.pending_ms(config), say)
        return broker.submit_cluster(ads, owner=owner, cluster_id=cluster)
    uploaded = upload_inputs(broker.store, ads, stored.pool_cap_bytes(broker.store),
                             stored.pending_ms(config), say=say)
    try:
        return broker.submit_cluster(ads, owner=owner, cluster_id=cluster)
    except BaseException:
        uploaded.rollback()
        raise
