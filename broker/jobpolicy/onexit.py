"""The job policy at a job's exit: read what it needs, let jobpolicy/expressions.py decide.

Broker.finish ends an exit with finish.lua, naming the exit policy's
attributes (`POLICY_ATTRS`): most jobs have none and finish in that one
call. finish.lua refuses the exit of a job that has one (its reply is
`POLICY`); only then is the job's whole ad read, the execute side's final
attributes laid over it and NumJobCompletions counted up for this exit, and
`exit_action` judges it. The claim's owner is the only writer of a running job's
attributes, and a removal or hold that arrives meanwhile still wins in
policy_exit.lua, so deciding before the transition is safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from fetchwork.broker.store import Store
from fetchwork.config.ads import from_dict

from .expressions import (
    COMPLETE,
    COMPLETIONS,
    EXIT_POLICY_ATTRS,
    Action,
    exit_action,
    has_exit_policy,
)

log = logging.getLogger(__name__)


# finish.lua's reply when the job has an exit policy to judge.
POLICY = "policy"
# What finish.lua looks for on an exit the job policy may change.
POLICY_ATTRS = EXIT_POLICY_ATTRS


def finished(job_id: str, how: str, state: str | None) -> bool:
    """Whether finish.lua ended the claim (its reply `state`: the new state, or None)."""
    if state is None:
        return False
    log.info("job %s finished (%s) -> %s", job_id, how, state)
    return True


def judge_exit(store: Store, job_id: str, final: Mapping[str, Any],
               now: float | None = None) -> Action | None:
    """The job policy's verdict on this exit; None when the job simply completes.
    `final` is the execute side's attributes in to_dict form (ExitCode, ...)."""
    stored = next((data for _job, data in store.hashes([job_id])), None)
    if stored is None or not has_exit_policy(stored):
        return None
    ad = from_dict(stored)
    given = from_dict(final)
    for name in given.keys():
        ad[name] = given.lookup(name)
    completions = ad.get(COMPLETIONS)
    ad[COMPLETIONS] = (completions if isinstance(completions, int)
                       and not isinstance(completions, bool) else 0) + 1
    action = exit_action(ad, time.time() if now is None else now)
    return None if action.kind == COMPLETE else action
