"""`fetchwork startd`: run the per-machine agent in the foreground."""

from __future__ import annotations

import logging
import os

import click

from fetchwork.config.loader import Config
from fetchwork.errors import ConfigError
from fetchwork.starter.logline import share

LOG_FILE = "StartLog"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _log_to_file(log_dir: str) -> logging.Handler:
    """One line per event to stderr (set up by the `fetchwork` group) and to LOG/StartLog."""
    try:
        os.makedirs(log_dir, exist_ok=True)
        handler = logging.FileHandler(os.path.join(log_dir, LOG_FILE), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the log directory {log_dir}: {exc.strerror or exc} "
                          f"(set LOG to a writable folder)") from exc
    # One line made for both this file and stderr (logline.py).
    handler.setFormatter(share(logging.getLogger().handlers, LOG_FORMAT))
    return handler


@click.command("startd")
@click.option("--name", help="Machine name in slot names (slot<N>@NAME); default: this host.")
@click.option("--once", is_flag=True,
              help="Exit 0 as soon as no job runs, no slot holds a claim, no hook is running, "
                   "and every slot that has a fetch hook (and whose START is not false) has "
                   "fetched at least once and its latest fetch printed no job at all.")
def startd_command(name: str | None, once: bool) -> None:
    """Run the startd: fetch work for each slot through the job hooks and run it.

    Each slot runs its fetch hook (<KEYWORD>_HOOK_FETCH_WORK with the slot's
    keyword) as FetchWorkDelay says, accepts or rejects the job it returns,
    and runs accepted jobs under a starter. SIGTERM or SIGINT vacates running
    jobs (their exit hooks run) and exits within STARTD_SHUTDOWN_GRACE;
    SIGQUIT kills them fast; SIGHUP rereads the configuration.
    """
    from fetchwork.startd.daemon import Startd
    from fetchwork.startd.mallocheap import one_arena

    one_arena()  # before any thread: every thread shares one malloc arena
    config = Config.load()
    root = logging.getLogger()
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    handler = _log_to_file(config.require("LOG"))
    root.addHandler(handler)
    try:
        status = Startd(config, name=name, once=once).run()
    finally:
        root.removeHandler(handler)
        handler.close()
    raise SystemExit(status)

