"""The starter's file transfer steps: the job's inputs after the prepare hook, its
outputs after it ran and before the exit hook (HTCondor's order).

The transfer itself is a program (`python -m fetchwork.transfer.sandbox`, which
speaks to the pool's Redis): the starter runs it, as root only until it has
connected, then as the job's user; it never imports the broker, so any site's
own hooks keep working without one. Control words still count while a transfer
runs: a stop request kills it. The decisions here are pure (`applies`,
`sends_outputs`, `run_ad`); `TransferStep` runs the program and turns its answer
into job ad attributes or a hold.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import classad2

from fetchwork.config.ads import format_ad
from fetchwork.config.loader import Config
from fetchwork.config.protocol import EVICT, EXIT, HOLD, HoldCode

log = logging.getLogger(__name__)

PROGRAM = "fetchwork.transfer.sandbox"
# The original Iwd of a job that runs in its sandbox (transfer/outputs.py reads it).
SUBMIT_IWD_ATTR = "FetchworkSubmitIwd"
_POLL_S = 0.2


@dataclass(frozen=True)
class Held:
    """A failed transfer: the hold's reason, code and subcode."""

    reason: str
    code: int
    subcode: int = 0
    # The pool was unreachable: the job goes back to the queue instead of a hold.
    retry: bool = False


def _word(ad: Any, name: str, default: str) -> str:
    value = ad.get(name) if name in ad else None
    return value.strip().upper() if isinstance(value, str) and value.strip() else default


def file_system_domain(config: Config, slot_ad: Any) -> str:
    """This machine's FileSystemDomain: the slot ad's, the knob's, else the host name."""
    value = slot_ad.get("FileSystemDomain") if "FileSystemDomain" in slot_ad else None
    if isinstance(value, str) and value:
        return value
    return (config.get("FILESYSTEM_DOMAIN") or "").strip() or socket.getfqdn()


def applies(ad: Any, domain: str) -> bool:
    """Whether the job's files are transferred here: ShouldTransferFiles YES, or
    IF_NEEDED on a machine of another FileSystemDomain than the submitter's."""
    should = _word(ad, "ShouldTransferFiles", "NO")
    if should == "YES":
        return True
    if should == "IF_NEEDED":
        theirs = ad.get("FileSystemDomain") if "FileSystemDomain" in ad else None
        return not isinstance(theirs, str) or theirs != domain
    return False


def sends_outputs(ad: Any, how: str) -> bool:
    """Whether outputs go back after a run that ended `how`: on an exit (with
    ON_SUCCESS only a zero exit code), and on an eviction with ON_EXIT_OR_EVICT."""
    when = _word(ad, "WhenToTransferOutput", "ON_EXIT")
    if how == EXIT:
        if when == "ON_SUCCESS":
            return ad.get("ExitBySignal") is not True and ad.get("ExitCode") == 0
        return True
    return how == EVICT and when == "ON_EXIT_OR_EVICT"


def run_ad(ad: Any, sandbox: str) -> dict[str, Any]:
    """What changes in the job ad for a job whose files were transferred: it runs in
    its sandbox (the old Iwd kept as FetchworkSubmitIwd), and its transferred
    executable is the sandbox's copy."""
    changes: dict[str, Any] = {"Iwd": sandbox}
    iwd = ad.get("Iwd") if "Iwd" in ad else None
    if isinstance(iwd, str):
        changes[SUBMIT_IWD_ATTR] = iwd
    cmd = ad.get("Cmd") if "Cmd" in ad else None
    if isinstance(cmd, str) and ad.get("TransferExecutable") is not False:
        changes["Cmd"] = os.path.join(sandbox, posixpath.basename(cmd))
    return changes


class TransferStep:
    """The transfer steps of one job in one sandbox."""

    def __init__(self, config: Config, ad: classad2.ClassAd, slot_ad: classad2.ClassAd,
                 sandbox: str, user: tuple[int, int] | None, env: Mapping[str, str]):
        self.ad = ad
        self.sandbox = sandbox
        self.user = user
        self.env = dict(env)
        self.on = applies(ad, file_system_domain(config, slot_ad))

    def inputs(self, stop: Callable[[], bool]) -> Held | None:
        """Fetch the inputs into the sandbox and point the job at it; the hold or None."""
        if not self.on:
            return None
        held = self._run("input", stop)
        if held is None:
            for name, value in run_ad(self.ad, self.sandbox).items():
                self.ad[name] = value
        return held

    def outputs(self, how: str, stop: Callable[[], bool]) -> Held | None:
        """Send the outputs back after a run that ended `how`; the hold or None."""
        if not self.on or not sends_outputs(self.ad, how):
            return None
        return self._run("output", stop, evicted=how == EVICT)

    def _run(self, direction: str, stop: Callable[[], bool],
             evicted: bool = False) -> Held | None:
        argv = [sys.executable, "-P", "-m", PROGRAM, direction, self.sandbox]
        if evicted:  # ON_EXIT_OR_EVICT: the sandbox is saved as a checkpoint
            argv.append("--evicted")
        if self.user is not None:
            argv += ["--user", f"{self.user[0]}:{self.user[1]}"]
        code = (HoldCode.TRANSFER_INPUT_ERROR if direction == "input"
                else HoldCode.TRANSFER_OUTPUT_ERROR)
        log.info("transferring the job's %s files", direction)
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=self.env, cwd="/",
                                   text=True, start_new_session=True)
        text: str | None = format_ad(self.ad)
        while True:
            try:
                out, err = process.communicate(text, timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                text = None
                if stop():
                    log.info("a stop request ends the %s transfer", direction)
                    try:  # the program and whatever it started (its own session)
                        os.killpg(process.pid, signal.SIGKILL)
                    except OSError:
                        process.kill()
                    process.communicate()
                    return Held(f"the {direction} transfer was stopped", int(code))
        for line in err.splitlines()[-20:]:
            log.info("transfer: %s", line)
        try:
            answer = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = " ".join(err.strip().splitlines()[-2:])
            return Held(f"Transfer {direction} files failed: the transfer program exited "
                        f"{process.returncode}: {tail}", int(code))
        if not answer.get("ok"):
            return Held(str(answer.get("reason")), int(answer.get("code") or code),
                        int(answer.get("subcode") or 0), bool(answer.get("retry")))
        for name, value in dict(answer.get("attrs") or {}).items():
            self.ad[name] = classad2.ClassAd(value) if isinstance(value, dict) else value
        return None

    def hold(self, held: Held) -> str:
        """Put the hold's attributes into the ad; the word for the exit hook (evict
        when the pool was unreachable: the job runs again)."""
        if held.retry:
            log.warning("%s; the job goes back to the queue", held.reason)
            return EVICT
        self.ad["HoldReason"] = held.reason
        self.ad["HoldReasonCode"] = held.code
        self.ad["HoldReasonSubCode"] = held.subcode
        log.warning("job held: %s (code %s)", held.reason, held.code)
        return HOLD
