"""`python -m fetchwork.starter --job-ad FILE --slot-ad FILE --slot N --sandbox DIR [--keyword KW]`.

Spawned by the startd, one per job: control words on stdin, JSON events on
stdout, logs on stderr. Exit status 0 when the job ran its course (whatever
the job itself did), non-zero when the starter could not do its work.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError

log = logging.getLogger("fetchwork.starter")

# argparse rather than click: this is not a user command, and the starter's
# start-up time is on every job's path.


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fetchwork.starter",
                                     description="Run one job through its hooks.")
    parser.add_argument("--job-ad", required=True, help="file with the job ad (old format)")
    parser.add_argument("--slot-ad", required=True, help="file with the slot ad (old format)")
    parser.add_argument("--slot", required=True, type=int, help="slot number N (slotN)")
    parser.add_argument("--sandbox", required=True, help="the job's scratch directory")
    parser.add_argument("--keyword", default=None, help="hook keyword (else from config/ad)")
    return parser.parse_args(argv)


def _read_ad(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_ad(handle.read(), path)
    except OSError as exc:
        raise FetchworkError(f"cannot read {path}: {exc.strerror}") from exc


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format=f"%(asctime)s starter[slot{args.slot}] %(levelname)s %(message)s")
    from fetchwork.starter.starter import Starter

    # Events get their own copy of stdout; fd 1 then points at stderr, so
    # nothing else (an in-process hook's print) can corrupt the event stream.
    events = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        config = Config.load()
        job_ad = _read_ad(args.job_ad)
        slot_ad = _read_ad(args.slot_ad)
        starter = Starter(config, job_ad, slot_ad, args.slot, args.sandbox,  # type: ignore[arg-type]
                          keyword=args.keyword, events=events)
        starter.run()
    except FetchworkError as exc:
        log.error("%s", exc)
        return 1
    except Exception:
        log.exception("the starter failed")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
