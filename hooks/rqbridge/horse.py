"""The job's process: performs one rq job with rq's own work horse code.

`python -m fetchwork.hooks.rqbridge.horse WORKER JOB_ID EXECUTION_ID QUEUE`,
started by the starter in the startd's working folder with the startd's
environment (settings.py): it finds the slot's rq worker by its key, the job
and its execution, and hands them to rq's `Worker.main_work_horse`, as rq's
own spawning worker does in its work horse. rq then does everything it does
in a work horse: status `started`, the job's function imported and called
with the args and kwargs rq serialised, under rq's death penalty for the
job's timeout; then `finished` with the return value (rq's Result), or
`failed` with the traceback in the failed-job registry, a `Retry` requeued or
scheduled, dependents enqueued, `on_success`/`on_failure` callbacks run,
`result_ttl`/`failure_ttl` applied. The process exits 0 once rq has recorded
the outcome; any other end is recorded by the exit hook (outcome.py).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

USAGE = "usage: python -m fetchwork.hooks.rqbridge.horse WORKER JOB_ID EXECUTION_ID QUEUE"


def main(argv: Sequence[str]) -> int:
    if len(argv) != 4:
        print(USAGE, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        from fetchwork.hooks.rqbridge.needrq import RqMissingError  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - rq missing: say so and what to install
        print(f"fetchwork rq job: {exc}", file=sys.stderr)
        return 1
    from fetchwork.config.loader import get_config
    from fetchwork.errors import FetchworkError
    from fetchwork.hooks.rqbridge import redisconn
    from fetchwork.hooks.rqbridge.needrq import Execution, Queue, Worker

    worker_name, job_id, execution_id, queue_name = argv
    try:
        connection = redisconn.connect(get_config())
    except FetchworkError as exc:
        print(f"fetchwork rq job {job_id}: {exc}", file=sys.stderr)
        return 1
    worker = Worker.find_by_key(Worker.redis_worker_namespace_prefix + worker_name,
                                connection=connection)
    if worker is None:
        print(f"fetchwork rq job {job_id}: rq has no worker {worker_name} (its heartbeats "
              "stopped); not running the job", file=sys.stderr)
        return 1
    job = worker.job_class.fetch(job_id, connection=connection, serializer=worker.serializer)
    queue = Queue(job.origin or queue_name, connection=connection, job_class=worker.job_class,
                  serializer=worker.serializer, death_penalty_class=worker.death_penalty_class)
    execution = Execution.fetch(execution_id, job_id, connection=connection)
    execution._job = job  # as rq's spawned work horse: the job is known
    worker.execution = execution
    for name, value in (("RQ_WORKER_ID", worker_name), ("RQ_JOB_ID", job_id),
                        ("RQ_EXECUTION_ID", execution_id)):
        os.environ[name] = value
    worker.main_work_horse(job, queue)  # exits the process
    return 0  # pragma: no cover - main_work_horse never returns


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
