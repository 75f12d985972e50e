"""The mapping of submit commands to job attributes (no Redis, no file syntax).

`submitfile.py` expands a submit description into per-job command values;
this module decides what they mean: `executable` -> `Cmd`, `arguments` ->
`Arguments`, `request_memory` -> `RequestMemory` in MB, `+Attr` verbatim,
and so on, with errors that name the line that set the command.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import classad2

from fetchwork.config import convert
from fetchwork.config.ads import EXPR_KEY, parse_expr, unparse
from fetchwork.config.protocol import clip
from fetchwork.errors import AdError, SubmitFileError

from .jobpolicymap import policy_attrs
from .transfermap import in_iwd, transfer_attrs

VANILLA_UNIVERSE = 5
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGTP]?)B?\s*\Z", re.I)
_UNIT_KB = {"": None, "K": 1, "M": 1024, "G": 1024 ** 2, "T": 1024 ** 3, "P": 1024 ** 4}


@dataclass
class SubmitContext:
    submit_dir: str
    source: str
    defined: Mapping[str, list[int]]
    warnings: list[str]
    names: dict[str, str] = field(default_factory=dict)
    queue_line: int = 0
    seen: dict[tuple[str, str], bool] = field(default_factory=dict)
    max_attrs: int | None = None
    transfer_executable: bool = True

    def checked(self, key: tuple[str, str], check: Callable[[], bool]) -> bool:
        """`check()`, asked once per key (the same path for many jobs)."""
        if key not in self.seen:
            self.seen[key] = check()
        return self.seen[key]

    def fail(self, message: str, command: str | None = None) -> SubmitFileError:
        """An error naming the line that set `command` for the current queue statement,
        else the queue statement's line."""
        lines = [n for n in self.defined.get((command or "").lower(), []) if n < self.queue_line]
        return SubmitFileError(message, self.source, max(lines) if lines else self.queue_line)


class _JobAd(dict[str, Any]):
    """A job ad in to_dict form whose names, as in a ClassAd, ignore case; setting a
    name looks up its other spelling in a map of lower-case names (no scan), and a
    job past `ctx.max_attrs` attributes is refused."""

    def __init__(self, ctx: SubmitContext):
        super().__init__()
        self._ctx = ctx
        self._spelling: dict[str, str] = {}

    def __setitem__(self, name: str, value: Any) -> None:
        lower = name.lower()
        existing = self._spelling.get(lower)
        if existing is not None and existing != name:
            del self[existing]
        elif existing is None and self._ctx.max_attrs is not None \
                and len(self) >= self._ctx.max_attrs:
            raise self._ctx.fail(f"a job may have at most {self._ctx.max_attrs} attributes "
                                 f"(SUBMIT_MAX_JOB_ATTRS); {name} is one too many",
                                 "my." + lower)
        self._spelling[lower] = name
        super().__setitem__(name, value)


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> Any:
    """An expression's to_dict value (a literal, or {"$expr": text}); AdError if invalid."""
    parsed = parse_expr(text)
    return {EXPR_KEY: unparse(parsed)} if isinstance(parsed, classad2.ExprTree) else parsed


def _expr(value: str, command: str, ctx: SubmitContext) -> Any:
    try:
        parsed = _parsed(value.strip())
    except AdError as exc:
        raise ctx.fail(f"{command}: not a ClassAd expression: {clip(value)!r}", command) from exc
    return dict(parsed) if isinstance(parsed, dict) else parsed


def _int(value: str, command: str, ctx: SubmitContext, minimum: int | None = None) -> int:
    try:
        number = convert.to_int(value)
    except ValueError as exc:
        raise ctx.fail(f"{command} must be a whole number, got {value!r}", command) from exc
    if minimum is not None and number < minimum:
        raise ctx.fail(f"{command} must be at least {minimum}, got {number}", command)
    return number


def _size(value: str, command: str, ctx: SubmitContext, unit_kb: int) -> Any:
    """A size in units of `unit_kb` KB (rounded up); a bare number is in that unit.
    Anything that is not a number with a unit is kept as an expression."""
    match = _SIZE_RE.match(value)
    if not match:
        return _expr(value, command, ctx)
    factor_kb = _UNIT_KB[match.group(2).upper()] or unit_kb
    return math.ceil(float(match.group(1)) * factor_kb / unit_kb)


def _bool(value: str, command: str, ctx: SubmitContext) -> bool:
    try:
        return convert.to_bool(value)
    except ValueError as exc:
        raise ctx.fail(f"{command} must be true or false, got {value!r}", command) from exc


def _quoted_inner(value: str, command: str, ctx: SubmitContext) -> str:
    """The new-syntax text inside `"..."`, with `""` read as one `"`; quotes must pair."""
    inner = value.strip()[1:-1]
    if '"' in inner.replace('""', ""):
        raise ctx.fail(f'{command}: a double quote inside "..." must be doubled', command)
    raw = inner.replace('""', '"')
    if raw.replace("''", "").count("'") % 2:
        raise ctx.fail(f"{command}: unbalanced single quote in {clip(value)!r}", command)
    return raw


def _is_quoted(value: str) -> bool:
    stripped = value.strip()
    return len(stripped) >= 2 and stripped[0] == stripped[-1] == '"'


def _absolute(path: str, base: str) -> str:
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def job_ad(values: Mapping[str, str], ctx: SubmitContext) -> dict[str, Any]:
    """The job ad (to_dict form) of one job from its expanded submit commands
    (lower-case names)."""
    ad = _JobAd(ctx)
    universe = values.get("universe", "vanilla").strip().lower() or "vanilla"
    if universe != "vanilla":
        raise ctx.fail(f"universe {universe} is not supported; fetchwork runs vanilla jobs only",
                       "universe")
    ad["JobUniverse"] = VANILLA_UNIVERSE
    iwd_command = "initialdir" if values.get("initialdir", "").strip() else "initial_dir"
    iwd = _absolute(values.get(iwd_command) or ".", ctx.submit_dir)
    if not ctx.checked(("dir", iwd), lambda: os.path.isdir(iwd)):
        raise ctx.fail(f"{iwd_command} {iwd} is not a directory", iwd_command)
    ad["Iwd"] = iwd
    if values.get("log", "").strip():
        # The job's user log (HTCondor's UserLog), stored absolute as condor_submit does.
        ad["UserLog"] = _absolute(values["log"].strip(), iwd)
    ad["Cmd"] = _executable(values, ctx)
    _arguments(ad, values, ctx)
    for command, attr in (("input", "In"), ("output", "Out"), ("error", "Err"),
                          ("batch_name", "JobBatchName"), ("kill_sig", "KillSig")):
        if values.get(command, "").strip():
            ad[attr] = values[command].strip()
    _requests(ad, values, ctx)
    for command, attr in (("requirements", "Requirements"), ("rank", "Rank")):
        if values.get(command, "").strip():
            ad[attr] = _expr(values[command], command, ctx)
    if values.get("priority", "").strip():
        ad["JobPrio"] = _int(values["priority"], "priority", ctx)
    for command, attr, least in (("job_lease_duration", "JobLeaseDuration", 1),
                                 ("allowed_job_duration", "AllowedJobDuration", 1),
                                 ("job_max_vacate_time", "JobMaxVacateTime", 0)):
        if values.get(command, "").strip():
            ad[attr] = _int(values[command], command, ctx, least)
    # The scheduling policy's project.
    if values.get("accounting_group", "").strip():
        ad["AccountingGroup"] = values["accounting_group"].strip()
    if values.get("hold", "").strip() and _bool(values["hold"], "hold", ctx):
        ad["Hold"] = True
    for attr, value in policy_attrs(values, lambda text, command: _expr(text, command, ctx),
                                    lambda text, command, least: _int(text, command, ctx, least)):
        ad[attr] = value
    for attr, value in transfer_attrs(values, ctx.fail,
                                      lambda text, command: _bool(text, command, ctx),
                                      lambda text, command, least: _int(text, command, ctx,
                                                                        least)):
        ad[attr] = value
    if ad.get("ShouldTransferFiles", "NO") != "NO":
        _transferred_streams(ad, ctx)
    for name, value in values.items():
        if name.startswith("my."):
            attr = ctx.names.get(name, name)[3:]
            if not value.strip():
                raise ctx.fail(f"attribute {attr} has no value", name)
            ad[attr] = _expr(value, name, ctx)
    return ad


def _transferred_streams(ad: dict[str, Any], ctx: SubmitContext) -> None:
    """A transferring job's output and error come back into its Iwd: each must name a
    file inside it (kept relative to it); input is sent from there."""
    if "TransferExecutable" not in ad:
        ad["TransferExecutable"] = ctx.transfer_executable
    for command, attr in (("output", "Out"), ("error", "Err"), ("input", "In")):
        path = ad.get(attr)
        if not isinstance(path, str) or path == os.devnull:
            continue
        relative = in_iwd(path, ad["Iwd"])
        if relative is None:
            raise ctx.fail(f"{command} {path} is outside initialdir {ad['Iwd']}: with file "
                           "transfer it comes back into initialdir", command)
        ad[attr] = relative


def _executable(values: Mapping[str, str], ctx: SubmitContext) -> str:
    executable = values.get("executable", "").strip()
    if not executable:
        raise ctx.fail("no executable given (executable = /path/to/program)")
    cmd = _absolute(executable, ctx.submit_dir)
    check = _bool(values.get("transfer_executable") or "true", "transfer_executable", ctx)
    ctx.transfer_executable = check
    if check and not ctx.checked(("program", cmd),
                                 lambda: os.path.isfile(cmd) and os.access(cmd, os.X_OK)):
        raise ctx.fail(f"executable {cmd} is not an executable file", "executable")
    return cmd


def _arguments(ad: dict[str, Any], values: Mapping[str, str], ctx: SubmitContext) -> None:
    for command, new_attr, old_attr in (("arguments", "Arguments", "Args"),
                                        ("environment", "Environment", "Env")):
        value = values.get(command, "")
        if not value.strip():
            continue
        if _is_quoted(value):
            ad[new_attr] = _quoted_inner(value, command, ctx)
        elif re.search(r'(?<!\\)"', value):
            raise ctx.fail(f'{command}: the old syntax takes a double quote only as \\"; '
                           'or write the whole value in double quotes (new syntax)', command)
        else:
            ad[old_attr] = value.strip()


def _requests(ad: dict[str, Any], values: Mapping[str, str], ctx: SubmitContext) -> None:
    if values.get("request_cpus", "").strip():
        text = values["request_cpus"]
        ad["RequestCpus"] = (_int(text, "request_cpus", ctx, 1) if text.strip().isdigit()
                             else _expr(text, "request_cpus", ctx))
    for command, attr, unit_kb in (("request_memory", "RequestMemory", 1024),
                                   ("request_disk", "RequestDisk", 1)):
        if values.get(command, "").strip():
            size = _size(values[command], command, ctx, unit_kb)
            if isinstance(size, int | float) and not isinstance(size, bool) and size <= 0:
                raise ctx.fail(f"{command} must be more than zero, got "
                               f"{values[command].strip()!r}", command)
            ad[attr] = size

