"""HTCondor submit descriptions turned into job ads (no Redis here).

`htcondor2.Submit` does the submit language: macros, `$(...)` expansion,
`if`/`else`, and the item data of every `queue` form (`queue`, `queue N`,
`queue X in (...)`, `queue X from file`, `queue X from (...)`,
`queue X matching globs`). What the commands mean is decided in
`submitmap.py`. As in condor_submit,
every statement up to a `queue` line applies to the jobs it queues, so a file
may hold several `queue` statements, and a relative `executable` or
`initialdir` is taken from the submit directory (condor_submit's current
directory), while `input`/`output`/`error` stay relative to `Iwd`.

The whole file is parsed and checked before anything is returned, so a
caller queues all of it or none of it; errors name the line.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import classad2
import htcondor2

from fetchwork.config.argsyntax import format_arguments_raw
from fetchwork.config.loader import get_config
from fetchwork.config.protocol import clip
from fetchwork.errors import SubmitFileError
from fetchwork.submit import depcommands, submitcheck
from fetchwork.submit.submitmap import SubmitContext, job_ad

# Macros set for each job as it is expanded; they are not submit commands.
_JOB_MACROS = ("Cluster", "ClusterId", "Process", "ProcId", "Step", "ItemIndex", "Row", "Node")
_ASSIGN_RE = re.compile(r"\s*(\+?[A-Za-z_][A-Za-z0-9_.]*)\s*=(.*)\Z", re.S)
_QUEUE_RE = re.compile(r"\s*queue(?:\s+(.*))?\Z", re.I | re.S)
_KEYWORD_RE = re.compile(r"\s*(if|elif|else|endif|include)\b", re.I)
_ITEMS_RE = re.compile(r"\b(in|from|matching)\b", re.I)
_HEAD_RE = re.compile(
    r"(?P<count>.*?)\s*(?P<vars>[A-Za-z_]\w*(?:\s*[,\s]\s*[A-Za-z_]\w*)*)?\s*\Z", re.S)
_TIMESTAMP_RE = re.compile(r"^\d+/\d+/\d+ \d+:\d+:\d+ ", re.M)


@dataclass(frozen=True)
class Statement:
    """One logical line (continuations joined), from physical line `line` to `end`."""

    line: int
    end: int
    text: str


@dataclass
class ParsedSubmit:
    """The job ads of a submit description (to_dict form, ProcId order) and warnings."""

    ads: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# -- the file's shape ---------------------------------------------------------

def logical_lines(text: str) -> list[Statement]:
    """Join lines ending in a backslash with the next, remembering line numbers."""
    out: list[Statement] = []
    pending: list[str] = []
    start = 0
    physical = text.splitlines()
    for number, raw in enumerate(physical, start=1):
        if not pending:
            start = number
        if raw.endswith("\\") and number < len(physical):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        out.append(Statement(start, number, "".join(pending)))
        pending = []
    return out


def split_queues(text: str, source: str, max_attrs: int | None = None
                 ) -> tuple[list[str], list[tuple[Statement, int]], dict[str, list[int]]]:
    """Check every line's form; return the physical lines, each queue statement with
    the last line of its inline item block, and the lines that set each command.
    More than `max_attrs` distinct +Attr names are refused at the first one too many."""
    lines = text.splitlines()
    queues: list[tuple[Statement, int]] = []
    defined: dict[str, list[int]] = {}
    attrs = 0
    statements = iter(logical_lines(text))
    for statement in statements:
        body = statement.text.strip()
        if not body or body.startswith("#"):
            continue
        keyword = _KEYWORD_RE.match(statement.text)
        if keyword and keyword.group(1).lower() == "include":
            raise SubmitFileError("include statements are not supported", source, statement.line)
        queue = _QUEUE_RE.match(statement.text)
        if queue:
            end = statement.end
            if (queue.group(1) or "").rstrip().endswith("("):
                end = _inline_block_end(statements, statement, source)
            queues.append((statement, end))
            continue
        if keyword:
            continue
        assign = _ASSIGN_RE.match(statement.text)
        if not assign:
            raise SubmitFileError(f"expected 'command = value', got {clip(body)!r}",
                                  source, statement.line)
        name = assign.group(1)
        if name.startswith("+"):
            name = "MY." + name[1:]
            if max_attrs is not None and name.lower() not in defined:
                attrs += 1
                if attrs > max_attrs:
                    raise SubmitFileError(
                        f"more than {max_attrs} job attributes (+Attr lines); a job may have "
                        "at most SUBMIT_MAX_JOB_ATTRS", source, statement.line)
        defined.setdefault(name.lower(), []).append(statement.line)
    if not queues:
        raise SubmitFileError("no queue statement: nothing to submit", source)
    return lines, queues, defined


def _inline_block_end(statements: Iterator[Statement], queue: Statement, source: str) -> int:
    for statement in statements:
        if statement.text.strip().startswith(")"):
            return statement.end
    raise SubmitFileError("the queue statement's item list '(' has no closing ')'",
                          source, queue.line)


class _Captured:
    """What the HTCondor library wrote on file descriptor 2 meanwhile."""

    def __init__(self) -> None:
        self.text = ""
        self.used = False  # set inside the block when the text goes into an error


@contextlib.contextmanager
def _captured_stderr() -> Iterator[_Captured]:
    """The HTCondor library prints parse errors on file descriptor 2: catch them for
    the error message. Text nobody used is written to stderr afterwards."""
    captured = _Captured()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            raw = sink.read().decode(errors="replace")
            captured.text = _TIMESTAMP_RE.sub("", raw).strip()
            if raw and not captured.used:
                os.write(2, raw.encode())


def _submit_object(lines: Sequence[str], source: str) -> htcondor2.Submit:
    text = "\n".join(lines) + "\n"
    with _captured_stderr() as said:
        try:
            return htcondor2.Submit(text)
        except Exception as exc:  # the library raises ValueError/RuntimeError
            failure = exc
            said.used = True
    line, detail = _first_bad_line(lines)
    message = detail or said.text or str(failure)
    raise SubmitFileError(f"cannot parse the submit description: {message}", source, line)


def _first_bad_line(lines: Sequence[str]) -> tuple[int | None, str]:
    """The first line at which a growing prefix of the text stops parsing."""
    for count in range(1, len(lines) + 1):
        with _captured_stderr() as said:
            try:
                htcondor2.Submit("\n".join(lines[:count]) + "\n")
            except Exception:
                failed = said.used = True
            else:
                failed = False
        if failed:
            return count, said.text
    return None, ""


# -- queue statements ---------------------------------------------------------

@dataclass(frozen=True)
class QueueSpec:
    """What one queue statement asks for: `count` jobs per item (None: no items)."""

    count: int
    items: list[dict[str, str]] | None


def split_qargs(qargs: str) -> tuple[str, str, str]:
    """(count text, variables, item part) of a queue statement's arguments."""
    keyword = _ITEMS_RE.search(qargs)
    head, tail = (qargs, "") if keyword is None else (qargs[:keyword.start()],
                                                      qargs[keyword.start():])
    match = _HEAD_RE.match(head)
    assert match is not None  # every text matches: both groups may be empty
    count, names = match.group("count").strip(), (match.group("vars") or "").strip()
    if keyword is None and names:  # `queue N` alone: no variables without items
        count, names = head.strip(), ""
    return count, names, tail


def queue_spec(submit: htcondor2.Submit, statement: Statement, source: str,
               submit_dir: str) -> QueueSpec:
    """Expand the count and read the item data of the queue statement in `submit`
    (item files and globs relative to `submit_dir`)."""
    qargs = submit.getQArgs()
    count_text, _names, items_text = split_qargs(qargs)
    count = _queue_count(submit, count_text, statement, source)
    if not items_text:
        return QueueSpec(count, None)
    with _captured_stderr() as said, _in_directory(submit_dir):
        try:
            items = submit.itemdata()
            rows = [] if items is None else [dict(row) for row in items]
        except Exception as exc:
            failure: Exception | None = exc
            said.used = True
        else:
            failure = None
    if failure is not None:
        detail = str(failure) or said.text
        raise SubmitFileError(f"bad queue statement: {detail}", source, statement.line)
    return QueueSpec(count, rows)


def _queue_count(submit: htcondor2.Submit, text: str, statement: Statement,
                 source: str) -> int:
    if not text:
        return 1
    key = "FETCHWORK_QUEUE_COUNT"
    submit[key] = text
    expanded = submit.expand(key).strip()
    submit[key] = ""
    try:
        value = classad2.ExprTree(expanded).eval()
    except Exception:
        value = None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SubmitFileError(f"the queue count {text!r} is not a whole number >= 0",
                              source, statement.line)
    return value


# -- the whole description --------------------------------------------------------

def parse_submit(text: str, cluster_id: int, submit_dir: str | None = None,
                 source: str = "<submit>",
                 extra: Mapping[str, str] | None = None,
                 max_attrs: int | None = None) -> ParsedSubmit:
    """Every job of a submit description, ProcId 0, 1, ... in queue order.

    `cluster_id` is what `$(Cluster)` expands to; `submit_dir` (default: the
    current directory) anchors relative paths, `queue ... from FILE` and
    `queue ... matching`. `extra` commands act as if written just before
    every queue statement (condor_submit's `-append`). A job may have at most
    `max_attrs` attributes (default: the SUBMIT_MAX_JOB_ATTRS knob). Raises
    SubmitFileError naming the line.
    """
    submit_dir = os.path.abspath(submit_dir or os.getcwd())
    if max_attrs is None:
        max_attrs = get_config().get_int("SUBMIT_MAX_JOB_ATTRS")
    lines, queues, defined = split_queues(text, source, max_attrs)
    result = ParsedSubmit()
    ctx = SubmitContext(submit_dir, source, defined, result.warnings, max_attrs=max_attrs)
    queue_lines = {number for statement, end in queues
                   for number in range(statement.line, end + 1)}
    for statement, end in queues:
        before = ["" if number in queue_lines else lines[number - 1]
                  for number in range(1, statement.line)]
        submit = _submit_object(before + lines[statement.line - 1:end], source)
        for name, value in (extra or {}).items():
            submit["MY." + name[1:] if name.startswith("+") else name] = value
        ctx.queue_line = statement.line
        spec = queue_spec(submit, statement, source, submit_dir)
        _queue_jobs(submit, spec, cluster_id, ctx, result)
    depcommands.resolve(result.ads, cluster_id, source, defined.get(depcommands.COMMAND, []))
    for ad in result.ads:
        ad["TotalSubmitProcs"] = len(result.ads)
    result.warnings += submitcheck.warnings(defined, lines, text, source)
    return result


@contextlib.contextmanager
def _in_directory(path: str) -> Iterator[None]:
    """The library reads item files and globs relative to the current directory."""
    if os.path.realpath(path) == os.path.realpath(os.getcwd()):
        yield
        return
    with contextlib.chdir(path):
        yield


def _queue_jobs(submit: htcondor2.Submit, spec: QueueSpec, cluster_id: int,
                ctx: SubmitContext, result: ParsedSubmit) -> None:
    commands = [name for name in submit.keys()
                if name not in _JOB_MACROS and name != "FETCHWORK_QUEUE_COUNT"]
    ctx.names.update({name.lower(): name for name in commands})
    rows: list[dict[str, str] | None] = list(spec.items) if spec.items is not None else [None]
    for item_index, row in enumerate(rows):
        for step in range(spec.count):
            proc_id = len(result.ads)
            macros = {"Cluster": cluster_id, "ClusterId": cluster_id, "Process": proc_id,
                      "ProcId": proc_id, "Step": step, "ItemIndex": item_index,
                      "Row": item_index, "Node": proc_id}
            for name, value in {**macros, **(row or {})}.items():
                submit[name] = str(value)
            values = {name.lower(): submit.expand(name) for name in commands}
            result.ads.append({**job_ad(values, ctx), **depcommands.job_attrs(values, ctx)})


def command_jobs(argv: Sequence[str], cluster_id: int, commands: Mapping[str, str] | None = None,
                 count: int = 1, submit_dir: str | None = None,
                 max_attrs: int | None = None) -> ParsedSubmit:
    """Jobs running `argv` as given on a command line, with extra submit commands
    (`max_attrs`: as parse_submit's).

    A program name without a slash is looked up on PATH, as a shell would;
    the arguments are taken literally (no macro expansion).
    """
    if not argv:
        raise SubmitFileError("no command given")
    program = argv[0]
    if "/" not in program:
        found = shutil.which(program)
        if found is None:
            raise SubmitFileError(f"command {program!r} not found on PATH")
        program = found
    parsed = parse_submit(f"queue {int(count)}\n", cluster_id, submit_dir=submit_dir,
                          source="<command line>", max_attrs=max_attrs,
                          extra={**(commands or {}), "executable": program})
    if len(argv) > 1:
        for ad in parsed.ads:
            ad.pop("Args", None)
            ad["Arguments"] = format_arguments_raw(argv[1:])
    return parsed
