"""The starter's file transfer steps: the job's inputs after the prepare hook, its
outputs after it ran and before the exit hook (HTCondor's order).

The transfer itself (transfer/sandbox.py, which speaks to the pool's Redis) runs
in the starter's own process, on the pool client the starter keeps: as the
starter's own user when that is not root, and in a root starter with the job's
user's effective ids around its file work (transfer/privstate.py, HTCondor's
"priv states": the transferring thread alone takes them, and root's come back
after), so no file of the sandbox is read or written with root's rights. The
process shows as fw-xfer-input or fw-xfer-output meanwhile. Control words still
count: a stop request is seen between two files.

Why not a forked child for every transfer: two forks a job (input and output),
each with its copy-on-write page faults and its new connection to the pool, were
most of the CPU that transfer added to a job with small files; in the starter's
process a transfer of a few small files costs a few round trips. A child is
still forked where it earns its place (`_in_child`): a transfer that runs
programs (URL plugins: the job's own program must never start in a process
whose real uid is root), an input larger than sandbox.IN_PROCESS_MAX_BYTES
(killed at once by a stop request), or a root starter that cannot change ids for
one thread while it has others. That child runs in a session of its own, as
root only until it has connected, then as the job's user for good, sends its
answer back as JSON on a pipe, and a stop request kills its session. The
decisions here are pure (`applies`, `sends_outputs`, `run_ad`); `TransferStep`
runs the transfer and turns its answer into job ad attributes or a hold.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import posixpath
import select
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import classad2

from fetchwork.config.ads import EXPR_KEY, format_ad, unparse
from fetchwork.config.loader import Config
from fetchwork.config.protocol import EVICT, EXIT, HOLD, HoldCode

log = logging.getLogger(__name__)

# The original Iwd of a job that runs in its sandbox (transfer/outputs.py reads it).
SUBMIT_IWD_ATTR = "FetchworkSubmitIwd"
_POLL_S = 0.2
# Signals the starter handles itself: the child takes them at their defaults.
_STARTER_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)


def preload() -> None:
    """Import the transfer code (the starter zygote calls this before its forks, so
    neither a starter nor its transfer children import it for their jobs)."""
    from fetchwork.transfer import sandbox  # noqa: F401 - imported ahead on purpose


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


class AdValues(Mapping[str, Any]):
    """The job ad's values as `config.ads.to_dict` gives them (literals as values,
    anything else as `{"$expr": text}`), each converted when it is read: a transfer
    reads a dozen attributes of an ad of a hundred, and converting them all cost
    about half a millisecond of CPU a step."""

    def __init__(self, ad: classad2.ClassAd):
        self._ad = ad

    def __getitem__(self, name: str) -> Any:
        if name not in self._ad:
            raise KeyError(name)
        value = self._ad[name]
        # undefined/error are an IntEnum: checked before the literals.
        if not isinstance(value, classad2.Value) and isinstance(value, bool | int | float | str):
            return value
        return {EXPR_KEY: unparse(self._ad.lookup(name))}

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._ad.keys()))

    def __len__(self) -> int:
        return len(self._ad)


class TransferStep:
    """The transfer steps of one job in one sandbox."""

    def __init__(self, config: Config, ad: classad2.ClassAd, slot_ad: classad2.ClassAd,
                 sandbox: str, user: tuple[int, int] | None, env: Mapping[str, str]):
        self.config = config
        self.ad = ad
        self.sandbox = sandbox
        self.user = user
        self.env = dict(env)
        # The machine's domain (a host name lookup at worst) matters to IF_NEEDED only.
        self.on = _word(ad, "ShouldTransferFiles", "NO") == "YES" or applies(
            ad, file_system_domain(config, slot_ad))

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
        code = (HoldCode.TRANSFER_INPUT_ERROR if direction == "input"
                else HoldCode.TRANSFER_OUTPUT_ERROR)
        log.info("transferring the job's %s files", direction)
        preload()  # once per starter, ahead in the zygote: not in each child
        from fetchwork.transfer import sandbox as transfer

        transfer.prepare(self.config)  # the pool's client, once per starter
        done, answer = self._here(direction, stop, evicted)
        if not done:
            answer = self._in_child(direction, stop, evicted)
        if answer is None:
            log.info("a stop request ended the %s transfer", direction)
            return Held(f"the {direction} transfer was stopped", int(code))
        if not answer.get("ok"):
            return Held(str(answer.get("reason")), int(answer.get("code") or code),
                        int(answer.get("subcode") or 0), bool(answer.get("retry")))
        for name, value in dict(answer.get("attrs") or {}).items():
            self.ad[name] = classad2.ClassAd(value) if isinstance(value, dict) else value
        return None

    def _here(self, direction: str, stop: Callable[[], bool],
              evicted: bool) -> tuple[bool, dict[str, Any] | None]:
        """The transfer in the starter's own process (transfer/sandbox.py `run_here`),
        shown as fw-xfer-* meanwhile: (True, its answer or None after a stop request),
        or (False, None) when it must run in a child instead."""
        from fetchwork.transfer import privstate
        from fetchwork.transfer import sandbox as transfer

        if self.user is not None and not privstate.usable():
            log.debug("the %s transfer runs in a child: the starter runs other threads",
                      direction)
            return False, None
        before = transfer.process_name()
        transfer.name_process(direction)
        started = time.process_time()
        try:
            answer = transfer.answer_here(direction, self.sandbox, self.user, AdValues(self.ad),
                                          evicted, stop)
        except transfer.NeedsChild as why:
            log.debug("the %s transfer runs in a child: %s", direction, why)
            return False, None
        except transfer.Stopped:
            return True, None
        except Exception as exc:  # noqa: BLE001 - a fault of the transfer holds the job
            # (as a child that died without answering would), not the starter.
            log.exception("the %s transfer failed", direction)
            code = (HoldCode.TRANSFER_INPUT_ERROR if direction == "input"
                    else HoldCode.TRANSFER_OUTPUT_ERROR)
            return True, {"ok": False, "code": int(code),
                          "reason": f"Transfer {direction} files failed: {exc!r} (see the "
                                    "starter's log)"}
        finally:
            transfer.restore_name(before)
        log.debug("the %s transfer used %.1f ms of CPU in the starter", direction,
                  (time.process_time() - started) * 1000)
        return True, answer

    def _in_child(self, direction: str, stop: Callable[[], bool],
                  evicted: bool) -> dict[str, Any] | None:
        """The transfer in a child the starter forks (URL plugins, a big input, a
        starter with other threads); its answer, or None after a stop request."""
        code = (HoldCode.TRANSFER_INPUT_ERROR if direction == "input"
                else HoldCode.TRANSFER_OUTPUT_ERROR)
        user = f"{self.user[0]}:{self.user[1]}" if self.user is not None else None
        ad_text = format_ad(self.ad)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child ends in os._exit
            os.close(read_fd)
            _child(write_fd, self.env, direction, self.sandbox, user, ad_text, evicted)
        os.close(write_fd)
        try:
            out, status = _collect(pid, read_fd, stop)
        finally:
            os.close(read_fd)
        if status is None:
            return None
        try:
            answer: dict[str, Any] = json.loads(out)
        except ValueError:
            return {"ok": False, "code": int(code),
                    "reason": f"Transfer {direction} files failed: the transfer ended with "
                              f"{_ended(status)} before it answered (see the starter's log)"}
        return answer

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


def _collect(pid: int, read_fd: int, stop: Callable[[], bool]) -> tuple[bytes, int | None]:
    """The child's answer and its wait status; (b"", None) when `stop()` asked for
    the transfer to end (the child's session is then killed)."""
    parts: list[bytes] = []
    while True:
        if select.select([read_fd], [], [], _POLL_S)[0]:
            piece = os.read(read_fd, 65536)
            if not piece:
                break
            parts.append(piece)
        elif stop():
            try:  # the child and whatever it started (its own session)
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return b"", None
    _pid, status, usage = os.wait4(pid, 0)
    log.debug("the transfer child used %.1f ms of CPU",
              (usage.ru_utime + usage.ru_stime) * 1000)
    return b"".join(parts), status


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _child(write_fd: int, env: Mapping[str, str], direction: str, sandbox: str,
           user: str | None, ad_text: str, evicted: bool) -> NoReturn:
    """In the forked child: run the transfer (transfer/sandbox.py, which becomes the
    job's user) and write its answer to `write_fd`; never returns."""
    status = 1
    try:
        os.setsid()  # a stop kills the transfer and the plugins it runs, not the starter
        gc.disable()  # a short life: a collection would only copy the starter's pages
        for number in _STARTER_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        # fd 0 and 1 are the starter's control and event pipes: not the child's to use.
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        os.environ.clear()
        os.environ.update(env)
        from fetchwork.transfer import sandbox as transfer

        transfer.name_process(direction)
        data = json.dumps(transfer.answer(direction, sandbox, user, ad_text,
                                          evicted)).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
        status = 0
    except BaseException:  # noqa: BLE001 - a child must never return into the starter
        try:
            log.exception("the %s transfer failed", direction)
        finally:
            os._exit(status)
    os._exit(status)
