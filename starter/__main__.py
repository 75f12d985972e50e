"""`python -m fetchwork.starter --job-ad FILE --slot-ad FILE --slot N --sandbox DIR [--keyword KW]`.

Spawned by the startd, one per job: control words on stdin, JSON events on
stdout, logs on stderr. Exit status 0 when the job ran its course (whatever
the job itself did), non-zero when the starter could not do its work.

`python -m fetchwork.starter --standby` starts a starter before there is a
job: it imports everything, including the modules of in-process starter
hooks, then waits for one line on stdin, a JSON list of the arguments
above, and runs that job. The startd keeps one standing by so a job does
not wait for an interpreter to start.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import select
import sys

from fetchwork.config import keywords
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.config.protocol import STANDBY_FLAG
from fetchwork.errors import FetchworkError

log = logging.getLogger("fetchwork.starter")

# argparse rather than click: this is not a user command, and the starter's
# start-up time is on every job's path.


@functools.cache
def argument_parser() -> argparse.ArgumentParser:
    """Built once (milliseconds): a zygote builds it before it forks starters."""
    parser = argparse.ArgumentParser(prog="python -m fetchwork.starter",
                                     description="Run one job through its hooks.")
    parser.add_argument("--job-ad", required=True, help="file with the job ad (old format)")
    parser.add_argument("--slot-ad", required=True, help="file with the slot ad (old format)")
    parser.add_argument("--slot", required=True, type=int, help="slot number N (slotN)")
    parser.add_argument("--sandbox", required=True, help="the job's scratch directory")
    parser.add_argument("--keyword", default=None, help="hook keyword (else from config/ad)")
    return parser


# The startd's own form of the arguments: each flag once, with its value.
_FLAGS = {"--job-ad": "job_ad", "--slot-ad": "slot_ad", "--slot": "slot",
          "--sandbox": "sandbox", "--keyword": "keyword"}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    return _plain_arguments(argv) or argument_parser().parse_args(argv)


def _plain_arguments(argv: list[str] | None) -> argparse.Namespace | None:
    """The arguments when they are in the startd's form, read without argparse (a
    millisecond a job); None for anything else, which argparse then reads or refuses."""
    if argv is None or len(argv) % 2:
        return None
    values: dict[str, str] = {}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        name = _FLAGS.get(flag)
        if name is None or name in values or value.startswith("-"):
            return None
        values[name] = value
    if not {"job_ad", "slot_ad", "slot", "sandbox"} <= values.keys() \
            or not values["slot"].isdigit():
        return None
    return argparse.Namespace(job_ad=values["job_ad"], slot_ad=values["slot_ad"],
                              slot=int(values["slot"]), sandbox=values["sandbox"],
                              keyword=values.get("keyword"))


def _read_ad(path: str) -> tuple[object, str]:
    """The ad in `path` and the text it was read from."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise FetchworkError(f"cannot read {path}: {exc.strerror}") from exc
    return parse_ad(text, path), text


def _stand_by() -> tuple[list[str], bytes] | None:
    """Import ahead, then read the job's arguments: one JSON line on stdin.

    Returns them and what was read behind the line (control words the
    startd sent meanwhile, handed on to the starter's own reader).
    """
    import json

    from fetchwork.hooks import inprocess
    from fetchwork.hooks.workers import WORKERS
    from fetchwork.starter import rehearsal, starter  # noqa: F401 - starter imported ahead

    # What every job's start would do first is done while there is no job:
    # logging set up (the slot named once known), hook threads waiting (an
    # in-process hook takes two: the call, and the one waiting on its timeout;
    # the reference prepare hook leaves a third keeping the job's lease),
    # `prepare_standby()` of the in-process hook modules of the keywords this
    # machine's slots use (the reference hooks connect to the broker), and,
    # once it has waited a while for its job, a rehearsal of the start path.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format=_log_format("starter[standby]"))
    WORKERS.warm(3)
    config = None
    try:
        config = Config.load()
        failed = inprocess.preload(keywords.starter_hook_values(config))
        used = [keywords.hook_value(config, keyword, hook)
                for keyword, hook in keywords.starter_hooks(config)]
        inprocess.prepare_modules([value for value in used if value], "prepare_standby", failed)
    except FetchworkError:
        pass  # the job's own start reports configuration errors
    if config is not None and not _readable(0, rehearsal.IDLE_S):
        rehearsal.rehearse(config, lambda: _readable(0, 0))
    data = b""
    while b"\n" not in data:
        chunk = os.read(0, 65536)
        if not chunk:
            return None  # the startd went away before giving a job
        data += chunk
    line, _, behind = data.partition(b"\n")
    argv = json.loads(line.decode("utf-8"))
    if not isinstance(argv, list) or not all(isinstance(word, str) for word in argv):
        raise SystemExit("starter: a standby starter expects a JSON list of arguments")
    return argv, behind


def _readable(fd: int, timeout_s: float) -> bool:
    """Whether `fd` has something to read (or is at its end) within `timeout_s`."""
    return bool(select.select([fd], [], [], timeout_s)[0])


def _log_format(name: str) -> str:
    return f"%(asctime)s {name} %(levelname)s %(message)s"


def _log_to_file(config: Config, slot: int) -> None:
    """Also log to LOG/StarterLog.slotN, as HTCondor's starter does."""
    log_dir = (config.get("LOG") or "").strip()
    if not log_dir:
        return
    path = os.path.join(log_dir, f"StarterLog.slot{slot}")
    try:
        os.makedirs(log_dir, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError as exc:
        log.warning("cannot write %s: %s; logging to stderr only", path, exc.strerror or exc)
        return
    handler.setFormatter(logging.getLogger().handlers[0].formatter)
    logging.getLogger().addHandler(handler)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    behind = b""
    if argv == [STANDBY_FLAG]:
        given = _stand_by()
        if given is None:
            return 0
        argv, behind = given
    args = _arguments(argv)
    root = logging.getLogger()
    if not root.handlers:  # else a standby starter's, now naming the slot
        logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    for handler in root.handlers:
        handler.setFormatter(logging.Formatter(_log_format(f"starter[slot{args.slot}]")))
    from fetchwork.starter.starter import Starter

    # Events get their own copy of stdout; fd 1 then points at stderr, so
    # nothing else (an in-process hook's print) can corrupt the event stream.
    events = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        config = Config.load()
        _log_to_file(config, args.slot)
        job_ad, job_text = _read_ad(args.job_ad)
        slot_ad, slot_text = _read_ad(args.slot_ad)
        starter = Starter(config, job_ad, slot_ad, args.slot, args.sandbox,  # type: ignore[arg-type]
                          keyword=args.keyword, events=events, control_pending=behind,
                          ad_texts=(job_text, slot_text))
        starter.run()
    except FetchworkError as exc:
        log.error("%s", exc)
        return 1
    except Exception:
        log.exception("the starter failed")
        return 2
    return 0


def _exit_now(code: int) -> None:
    """Leave without the interpreter's teardown (tens of ms the startd would
    wait for before fetching again): everything is flushed here."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
