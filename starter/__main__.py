"""`python -m fetchwork.starter --job-ad FILE --slot-ad FILE --slot N --sandbox DIR [--keyword KW]`.

Run by the startd for each job (in a fork of the starter zygote, which calls
`main` with these arguments, one job after another in a starter kept across
STARTER_JOBS_PER_PROCESS jobs): control words on stdin, JSON events on
stdout, logs on stderr. Exit status 0 when the job ran its course (whatever
the job itself did), non-zero when the starter could not do its work.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys

from fetchwork.config import latencytrace
from fetchwork.config.ads import parse_ad
from fetchwork.config.loader import Config
from fetchwork.errors import FetchworkError
from fetchwork.starter.logline import LineOnce

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
    """The ad in `path` and the text it was read from (read with plain system calls:
    no buffered file object on every job's path)."""
    chunks: list[bytes] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise FetchworkError(f"cannot read {path}: {exc.strerror}") from exc
    text = b"".join(chunks).decode("utf-8")
    if "\r" in text:  # as a text-mode read gives it
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return parse_ad(text, path), text


def log_to_stderr(name: str) -> None:
    """Log INFO and above to stderr, each line naming `name` (set up once; a
    starter waiting for its job sets it up before it knows the slot)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    formatter = LineOnce(f"%(asctime)s {name} %(levelname)s %(message)s")
    for handler in root.handlers:
        handler.setFormatter(formatter)


# The StarterLog handler of the last job: a starter that runs the slot's next job
# (zygote.py) keeps writing to it rather than opening the file again per job.
_file_log: logging.FileHandler | None = None


def _log_to_file(config: Config, slot: int) -> logging.Handler | None:
    """Also log to LOG/StarterLog.slotN, as HTCondor's starter does; the handler added
    (the last job's, when it writes to the same file and the file is still there)."""
    global _file_log
    log_dir = (config.get("LOG") or "").strip()
    if not log_dir:
        return None
    path = os.path.join(log_dir, f"StarterLog.slot{slot}")
    kept, _file_log = _file_log, None
    if kept is not None:
        if kept.baseFilename == os.path.abspath(path) and _same_file(kept):
            kept.setFormatter(logging.getLogger().handlers[0].formatter)
            logging.getLogger().addHandler(kept)
            return kept
        kept.close()
    try:
        os.makedirs(log_dir, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError as exc:
        log.warning("cannot write %s: %s; logging to stderr only", path, exc.strerror or exc)
        return None
    handler.setFormatter(logging.getLogger().handlers[0].formatter)
    logging.getLogger().addHandler(handler)
    return handler


def _same_file(handler: logging.FileHandler) -> bool:
    """Whether the handler's open file is still the one its path names (not rotated
    or removed meanwhile)."""
    stream = handler.stream
    if stream is None:
        return False
    try:
        opened, named = os.fstat(stream.fileno()), os.stat(handler.baseFilename)
    except (OSError, ValueError, AttributeError):
        return False
    return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)


def keep_file_log(handler: logging.Handler | None) -> None:
    """After a job: take its StarterLog handler off the root logger and keep it for
    the next job of this starter (`_log_to_file`)."""
    global _file_log
    if handler is None:
        return
    logging.getLogger().removeHandler(handler)
    handler.flush()
    if isinstance(handler, logging.FileHandler):
        _file_log = handler
    else:  # pragma: no cover - only FileHandlers are made here
        handler.close()


# The sandboxes `main(leave_sandbox=True)` left to remove later (`remove_left`).
_left: list[str] = []


def remove_left() -> None:
    """Remove the sandboxes of the jobs `main` ran that it left for later."""
    if not _left:
        return
    from fetchwork.starter.starter import remove_now

    while _left:
        remove_now(_left.pop())


def main(argv: list[str] | None = None, leave_sandbox: bool = False) -> int:
    """Run one job; its exit status (as the module's). With `leave_sandbox`, the
    job's sandbox is removed by `remove_left` (or `exit_now`) rather than before
    this returns: a starter kept for another job says `done` first."""
    argv = sys.argv[1:] if argv is None else argv
    args = _arguments(argv)
    log_to_stderr(f"starter[slot{args.slot}]")
    from fetchwork.starter.starter import Starter

    # Events get their own copy of stdout; fd 1 then points at stderr, so
    # nothing else (an in-process hook's print) can corrupt the event stream.
    events = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    file_log = None
    try:
        config = Config.load()
        file_log = _log_to_file(config, args.slot)
        latencytrace.mark("starter.configured")
        job_ad, job_text = _read_ad(args.job_ad)
        slot_ad, slot_text = _read_ad(args.slot_ad)
        latencytrace.mark("starter.ads_read")
        starter = Starter(config, job_ad, slot_ad, args.slot, args.sandbox,  # type: ignore[arg-type]
                          keyword=args.keyword, events=events, ad_texts=(job_text, slot_text))
        latencytrace.mark("starter.checked")
        starter.run(_left.append if leave_sandbox else None)
    except FetchworkError as exc:
        log.error("%s", exc)
        return 1
    except Exception:
        log.exception("the starter failed")
        return 2
    finally:
        # A starter that runs another job next (zygote.py) starts it from a clean
        # slate: this job's event stream closed, its log file off the root logger
        # (kept open for the next job's, and closed by the exit of the process).
        keep_file_log(file_log)
        try:
            events.close()
        except OSError:
            pass
    return 0


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown (tens of ms the startd would
    wait for before fetching again): everything is flushed here, and the sandboxes
    left for later are removed."""
    remove_left()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
