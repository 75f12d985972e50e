"""From a job ad to what the starter spawns, and back to the attributes it reports (pure)."""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fetchwork.config.argsyntax import job_args, job_env, job_text
from fetchwork.config.protocol import (
    EVICT,
    EXIT,
    HOLD,
    JOB_AD_FILE,
    MACHINE_AD_FILE,
    REMOVE,
    HoldCode,
)
from fetchwork.errors import ArgSyntaxError, JobStartError, StarterError

NULL_DEVICE = os.devnull

# HTCondor's words for the job's three files.
STANDARD_INPUT, STANDARD_OUTPUT, STANDARD_ERROR = (
    "standard input", "standard output", "standard error")


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to spawn the job, resolved against its directory."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    stdin_path: str
    stdout_path: str
    stderr_path: str
    kill_sig: int


def _text(ad: Any, name: str) -> str | None:
    try:
        return job_text(ad, name)
    except ArgSyntaxError as exc:
        raise StarterError(str(exc)) from exc


def parse_signal(value: Any, default: int = signal.SIGTERM) -> int:
    """`KillSig` as HTCondor takes it: a number, `SIGTERM` or `TERM`; absent -> `default`."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise StarterError(f"{value!r} is not a signal")
    if isinstance(value, int | float):
        number = int(value)
    else:
        text = str(value).strip().upper()
        if text.lstrip("-").isdigit():
            number = int(text)
        else:
            name = text if text.startswith("SIG") else "SIG" + text
            try:
                number = int(signal.Signals[name])
            except KeyError:
                raise StarterError(f"{value!r} is not a signal name") from None
    if number <= 0 or number >= signal.NSIG:
        raise StarterError(f"{value!r} is not a signal number")
    return number


def job_directory(ad: Any, sandbox: str) -> str:
    """`Iwd` when the ad has one (relative to the sandbox), else the sandbox."""
    iwd = _text(ad, "Iwd")
    return os.path.join(sandbox, iwd) if iwd else sandbox


def condor_env(sandbox: str, slot: int, iwd: str) -> dict[str, str]:
    """The `_CONDOR_*` variables HTCondor gives hooks and jobs."""
    return {
        "_CONDOR_JOB_AD": os.path.join(sandbox, JOB_AD_FILE),
        "_CONDOR_MACHINE_AD": os.path.join(sandbox, MACHINE_AD_FILE),
        "_CONDOR_SCRATCH_DIR": sandbox,
        "_CONDOR_SLOT": f"slot{slot}",
        "_CONDOR_JOB_IWD": iwd,
        "BATCH_SYSTEM": "HTCondor",
    }


def hook_env(base: Mapping[str, str], sandbox: str, slot: int, iwd: str) -> dict[str, str]:
    """The starter's environment plus the `_CONDOR_*` variables."""
    return {**base, **condor_env(sandbox, slot, iwd)}


class HookEnv(Mapping[str, str]):
    """`hook_env`, made at its first read. An in-process hook is handed its
    environment to read through `current_call()` and most never do: a copy of
    the starter's whole environment (every variable decoded) for each of a job's
    hook calls is then saved. A program hook's runner reads it at once."""

    def __init__(self, base: Mapping[str, str], sandbox: str, slot: int, iwd: str):
        self._args = (base, sandbox, slot, iwd)
        self._made: dict[str, str] | None = None

    def _env(self) -> dict[str, str]:
        if self._made is None:
            self._made = hook_env(*self._args)
        return self._made

    def __getitem__(self, name: str) -> str:
        return self._env()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._env())

    def __len__(self) -> int:
        return len(self._env())


def launch_plan(ad: Any, sandbox: str, slot: int, marker: tuple[str, str]) -> LaunchPlan:
    """Resolve `Cmd`, arguments, environment, `Iwd`, `In`/`Out`/`Err` and `KillSig`.

    The job's environment is its own `Environment`/`Env` plus the `_CONDOR_*`
    variables and `TMPDIR` pointing at the scratch directory, as HTCondor
    gives it; the starter's own environment is not passed on. `marker` is a
    variable that identifies the job's processes.
    """
    cmd = _text(ad, "Cmd")
    if not cmd:
        raise StarterError("the job ad has no Cmd")
    cwd = job_directory(ad, sandbox)
    program = cmd if os.path.isabs(cmd) else os.path.join(cwd, cmd)
    try:
        args = job_args(ad)
        own_env = job_env(ad)
    except ArgSyntaxError as exc:
        raise StarterError(str(exc)) from exc
    env = {"TMPDIR": sandbox, "TMP": sandbox, "TEMP": sandbox}
    env.update(own_env)
    env.update(condor_env(sandbox, slot, cwd))
    env[marker[0]] = marker[1]

    def stream(name: str) -> str:
        path = _text(ad, name)
        if not path:
            return NULL_DEVICE
        return path if os.path.isabs(path) else os.path.join(cwd, path)

    return LaunchPlan(
        argv=(program, *args), env=env, cwd=cwd, stdin_path=stream("In"),
        stdout_path=stream("Out"), stderr_path=stream("Err"),
        kill_sig=parse_signal(ad["KillSig"] if "KillSig" in ad else None),
    )


def exit_attributes(status: int | None, how: str, duration_s: float,
                    reason: str | None = None) -> dict[str, Any]:
    """`ExitReason`, `ExitBySignal`, `ExitSignal` or `ExitCode`, `JobDuration`.

    `status` is a decoded wait status: >= 0 an exit code, < 0 minus a
    signal number, None when the job never ran.
    """
    attrs: dict[str, Any] = {"JobDuration": round(duration_s, 3)}
    if status is None:
        attrs["ExitBySignal"] = False
        attrs["ExitReason"] = reason or "the job did not run"
        return attrs
    if status < 0:
        number = -status
        attrs.update(ExitBySignal=True, ExitSignal=number)
        described = f"died on signal {number} ({_signal_name(number)})"
    else:
        attrs.update(ExitBySignal=False, ExitCode=status)
        described = f"exited normally with status {status}"
    prefix = {EXIT: "", EVICT: "evicted; ", REMOVE: "removed; ", HOLD: "held; "}
    attrs["ExitReason"] = reason or prefix.get(how, f"{how}; ") + described
    return attrs


def open_failure(path: str, stream: str, error: OSError) -> JobStartError:
    """`Failed to open '/x/out' as standard output: Permission denied (errno 13)`."""
    return JobStartError(f"Failed to open '{path}' as {stream}: {_os_reason(error)}",
                         error.errno or 0)


def exec_failure(program: str, error: OSError) -> JobStartError:
    """`Failed to execute '/x/prog': Permission denied (errno 13)`."""
    return JobStartError(f"Failed to execute '{program}': {_os_reason(error)}", error.errno or 0)


def _os_reason(error: OSError) -> str:
    if not error.errno:
        return error.strerror or str(error)
    return f"{error.strerror or os.strerror(error.errno)} (errno {error.errno})"


def hold_attributes(slot_ad: Any, slot: int, failure: StarterError) -> dict[str, Any]:
    """`HoldReason`, `HoldReasonCode` and `HoldReasonSubCode` for a job that could not
    start, as HTCondor's starter words them (`Error from slot1@host: ...`, the errno)."""
    name = slot_ad["Name"] if "Name" in slot_ad else None
    where = name if isinstance(name, str) and name else f"slot{slot}"
    return {"HoldReason": f"Error from {where}: {failure}",
            "HoldReasonCode": int(HoldCode.STARTER_ERROR),
            "HoldReasonSubCode": failure.errno if isinstance(failure, JobStartError) else 0}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def replace_file(path: str, text: str, owner: tuple[int, int] | None) -> None:
    """Write `text` to `path` by a rename, the file `owner`'s when given. The job owns
    the sandbox, so the new file gets a fresh name and no link is ever followed."""
    temporary = f"{path}.{uuid.uuid4().hex}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        if owner is not None:
            os.fchown(handle.fileno(), *owner)
    os.replace(temporary, path)


def remove_sandbox(path: str) -> None:
    """Remove the sandbox `path` and all in it; nothing when it is gone. A job that
    left nothing but its two ads (most) takes three system calls; anything else
    (files, folders, a link where an ad was) goes through shutil.rmtree, which
    never follows a link. The job cannot move the folder itself: its parent,
    EXECUTE, is not the job's."""
    for name in (JOB_AD_FILE, MACHINE_AD_FILE):
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass
        except OSError:  # a folder where the ad was: rmtree below
            break
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:  # not empty (or not a folder): the whole walk
        shutil.rmtree(path, ignore_errors=True)
