"""Several scripts loaded in one round trip (a starter's first file transfer) on a
real Redis: each is then known to the server by its SHA and callable."""

from __future__ import annotations

import redis

from fetchwork.broker.store.scripts import Scripts, sha


def test_scripts_load_together_and_answer_by_their_sha(redis_client: redis.Redis) -> None:
    names = ["transfer_chunk", "transfer_attach", "transfer_event", "transfer_detach"]
    scripts = Scripts(redis_client)
    scripts.ensure_loaded_together(names)
    assert redis_client.script_exists(*(sha(name) for name in names)) == [True] * 4
    with redis_client.pipeline(transaction=False) as pipe:  # as a caller queues them
        scripts.queue(pipe, "transfer_detach", ["fw:{t}:xfer:refs"], ["none", 1])
        assert pipe.execute() == [0]
