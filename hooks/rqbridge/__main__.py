"""The rq bridge's hooks as programs: `python -m fetchwork.hooks.rqbridge <NAME> [ARGS]`.

HTCondor's form of a hook: the ad(s) on stdin, the hook's words as
arguments, the answer on stdout, the exit status. For instance:

    RQ_HOOK_FETCH_WORK = /srv/app/venv/bin/python
    RQ_HOOK_FETCH_WORK_ARGS = -m fetchwork.hooks.rqbridge FETCH_WORK

A program cannot keep the job's heartbeats from its starter: the update hook
sends them, so STARTER_UPDATE_INTERVAL must stay below rq's heartbeat TTL
(90 s); rq's stop and kill commands are not heard.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import redis

from fetchwork.errors import FetchworkError


def main(words: Sequence[str], stdin_text: str) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        from fetchwork.hooks.rqbridge import hooks
    except FetchworkError as exc:  # rq is not installed: say so
        print(f"fetchwork rq hook: {exc}", file=sys.stderr)
        return 1
    hooks.set_program_mode()
    if not words or words[0].upper() not in hooks.HOOKS:
        print(f"usage: python -m fetchwork.hooks.rqbridge {{{','.join(hooks.HOOKS)}}} [ARGS]",
              file=sys.stderr)
        return 2
    try:
        result = hooks.HOOKS[words[0].upper()](list(words[1:]), stdin_text)
    except (FetchworkError, redis.RedisError) as exc:
        print(f"fetchwork rq hook {words[0]}: {exc}", file=sys.stderr)
        return 1
    code, out = result if isinstance(result, tuple) else (0, result or "")
    if out:
        sys.stdout.write(out)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], sys.stdin.read()))
