"""Running a program hook as HTCondor runs one.

The program runs directly (no shell) in its own session and process group,
as the given user when this is root. Its stdin gets the given text and is
then closed; its stdout and stderr are read up to the spec's output limit.
When the main process exits, whatever it left behind is killed, in its
group or not (`family`); at the timeout or a cancel, the whole family is.
A program that is not absolute, not executable or writable by others is
refused (`program_refusal`), as HTCondor refuses it.
"""

from __future__ import annotations

import os
import selectors
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fetchwork.hooks.family import kill_family, marked_env
from fetchwork.hooks.pipes import CHUNK_BYTES, open_pidfd, read_available
from fetchwork.hooks.spec import HookResult, HookSpec

# After the main process is gone and its group killed, output still in the
# pipes is read for at most this long (a descendant the family search cannot
# see, such as one of another user, may hold them open).
_DRAIN_S = 1.0
_POLL_S = 0.02
_CANCEL_POLL_S = 0.05


# -- refusing unsafe programs ----------------------------------------------

def program_refusal(path: str) -> str | None:
    """Why the program at `path` must not run as a hook, or None when it may.

    HTCondor's hook path check: an executable file that is not
    world-writable and does not sit in a world-writable directory (the
    sticky bit does not help). Here the path must also be absolute: a
    relative one would depend on the daemon's working directory.
    """
    if not os.path.isabs(path):
        return f"{path} is not an absolute path"
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"{path} cannot be used: {exc.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_mode & stat.S_IWOTH:
        return f"{path} is world-writable"
    if not os.access(path, os.X_OK) or not info.st_mode & 0o111:
        return f"{path} is not executable"
    directory = os.path.dirname(path)
    try:
        dir_info = os.stat(directory)
    except OSError as exc:  # pragma: no cover - the file was just found
        return f"{directory} cannot be used: {exc.strerror}"
    # HTCondor refuses a world-writable directory even with the sticky bit.
    if dir_info.st_mode & stat.S_IWOTH:
        return f"{path} is in a world-writable directory ({directory})"
    return None


# -- running -----------------------------------------------------------------

@dataclass
class _Pipes:
    limit: int
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    too_large: bool = False


def _spawn(argv: list[str], env: dict[str, str], cwd: str | None,
           user: tuple[int, int] | None) -> subprocess.Popen[bytes]:
    options: dict[str, Any] = {}
    if user is not None and os.geteuid() == 0 and user[0] != 0:
        options.update(user=user[0], group=user[1], extra_groups=[])
    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env, cwd=cwd, close_fds=True,
        start_new_session=True, **options)


def run_program(spec: HookSpec, argv: list[str], stdin_text: str,
                 env: Mapping[str, str] | None, cwd: str | None,
                 user: tuple[int, int] | None, cancel: threading.Event | None) -> HookResult:
    result = HookResult(spec=spec, argv=argv)
    refusal = program_refusal(spec.value)
    if refusal is not None:
        result.error = refusal
        return result
    family_env, marker = marked_env(env)
    started_at = time.time()
    try:
        proc = _spawn(argv, family_env, cwd, user)
    except OSError as exc:
        result.error = f"cannot start {spec.value}: {exc.strerror or exc}"
        return result
    pipes = _Pipes(limit=spec.output_limit)
    family = (proc.pid, marker, started_at)
    try:
        ending = _pump(proc, stdin_text.encode(), pipes, spec.timeout_s, cancel, family)
        result.timed_out = ending == "timeout"
        result.cancelled = ending == "cancelled"
    finally:
        _kill_group(proc.pid)
        kill_family(*family)  # before the wait: the leader's pid stays ours until then
        status = proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    if status < 0:
        result.signal = -status
    else:
        result.exit_code = status
    result.output_too_large = pipes.too_large
    result.stdout = pipes.stdout.decode("utf-8", "replace")
    result.stderr = pipes.stderr.decode("utf-8", "replace")
    return result


def _kill_group(pgid: int) -> None:
    """SIGKILL the hook's process group. The leader is not reaped yet, so the id is ours."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _main_exited(pid: int) -> bool:
    """Whether the main process has exited, leaving it unreaped (a zombie)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _pump(proc: subprocess.Popen[bytes], data: bytes, pipes: _Pipes, timeout_s: float,
          cancel: threading.Event | None, family: tuple[int, str, float]) -> str:
    """Feed stdin and read output until the main process exits.

    Returns "exited", "timeout" or "cancelled"; the caller kills the group.
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    selector = selectors.DefaultSelector()
    pidfd = open_pidfd(proc.pid)
    try:
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ, "exit")
        for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, selectors.EVENT_READ, name)
        offset = 0
        if data:
            os.set_blocking(proc.stdin.fileno(), False)
            selector.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
        else:
            proc.stdin.close()
        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if exited_at is None and _main_exited(proc.pid):
                exited_at = now
                _kill_group(proc.pid)  # leftovers in its group go with it,
                kill_family(*family)   # and those that left it, so the pipes close
                _drop(selector, proc.stdin)
            if exited_at is not None and (not _has_pipes(selector) or now - exited_at > _DRAIN_S):
                return "exited"
            if exited_at is None and now >= deadline:
                return "timeout"
            if exited_at is None and cancel is not None and cancel.is_set():
                return "cancelled"
            if pipes.too_large:
                _kill_group(proc.pid)
            wait_s = _POLL_S if pidfd is None else max(0.0, deadline - now)
            if cancel is not None:
                wait_s = min(wait_s, _CANCEL_POLL_S)
            if exited_at is not None:
                wait_s = min(wait_s, max(0.0, exited_at + _DRAIN_S - now))
            for key, _events in selector.select(timeout=wait_s):
                if key.data == "exit":
                    selector.unregister(key.fileobj)
                elif key.data == "stdin":
                    offset = _feed(selector, proc.stdin, data, offset)
                else:
                    _read(selector, key.fileobj, key.data, pipes)
    finally:
        selector.close()
        if pidfd is not None:
            os.close(pidfd)


def _has_pipes(selector: selectors.BaseSelector) -> bool:
    return any(key.data in ("stdout", "stderr") for key in selector.get_map().values())


def _drop(selector: selectors.BaseSelector, stream: Any) -> None:
    try:
        selector.unregister(stream)
    except (KeyError, ValueError):
        pass
    try:
        stream.close()
    except OSError:
        pass


def _feed(selector: selectors.BaseSelector, stream: Any, data: bytes, offset: int) -> int:
    try:
        offset += os.write(stream.fileno(), data[offset:offset + CHUNK_BYTES])
    except BlockingIOError:
        return offset
    except (BrokenPipeError, OSError):  # the hook closed its stdin: fine
        offset = len(data)
    if offset >= len(data):
        _drop(selector, stream)
    return offset


def _read(selector: selectors.BaseSelector, stream: Any, name: str, pipes: _Pipes) -> None:
    chunk = read_available(stream.fileno())
    if chunk is None:
        return
    if not chunk:
        _drop(selector, stream)
        return
    buffer = pipes.stdout if name == "stdout" else pipes.stderr
    room = pipes.limit - len(buffer)
    if len(chunk) > room:
        buffer.extend(chunk[:max(room, 0)])
        # Too much stdout is bad output; too much stderr is only cut short.
        if name == "stdout":
            pipes.too_large = True
    else:
        buffer.extend(chunk)
