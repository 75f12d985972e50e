"""The configuration language: HTCondor-style `NAME = value` files.

Syntax (one definition per logical line):

- `NAME = value`; names are case-insensitive; the value is everything after
  the first `=` with surrounding whitespace removed; later definitions win.
- `# comment` lines and blank lines are ignored.
- A line ending in a backslash continues on the next line; the backslash is
  dropped and the next line's leading whitespace is folded into one space.
- `include : path` (or `include ifexist : path`) reads another file at that
  point; a relative path is relative to the including file's folder.
- `$(NAME)` and `$(NAME:default)` expand when a value is looked up, not when
  it is defined, so a knob may refer to one defined later. A definition that
  refers to its own name (`PATH = $(PATH):/opt/bin`) sees the previous
  definition, as in HTCondor. `$ENV(VAR)` and `$ENV(VAR:default)` read the
  process environment. `$$(...)` is left alone: it belongs to job ads.

This module is pure: it turns text into `Definition`s and expands values
against a mapping. Reading files and the environment happens in `loader`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from fetchwork.errors import ConfigError, UndefinedKnobError

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_ASSIGN_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=(.*)\Z", re.S)
_INCLUDE_RE = re.compile(r"\s*include\s*(ifexist)?\s*:\s*(.*)\Z", re.I | re.S)
MAX_INCLUDE_DEPTH = 20


@dataclass(frozen=True)
class Definition:
    """One `NAME = value` as written, with where it was written."""

    name: str
    raw: str
    source: str
    line: int | None


def logical_lines(text: str, source: str) -> Iterator[tuple[int, str]]:
    """Yield (first line number, text) per logical line, joining continuations.

    A trailing backslash, the line break and the next line's indentation are
    removed; comment lines inside a continued value are skipped.
    """
    pending: list[str] = []
    start = 0
    # Only "\n" (and "\r\n") end lines; str.splitlines would also split
    # on form feeds and other separators that may sit inside a value.
    for number, physical in enumerate(text.split("\n"), start=1):
        physical = physical.removesuffix("\r")
        stripped = physical.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = number
        piece = physical.lstrip() if pending else physical
        if piece.rstrip().endswith("\\"):
            pending.append(piece.rstrip()[:-1])
            continue
        pending.append(piece)
        yield start, "".join(pending).rstrip()
        pending = []
    if pending:
        raise ConfigError("the last line ends in a backslash but nothing follows it",
                          source, start)


def parse(
    text: str,
    source: str,
    defined: dict[str, Definition],
    read_include: Callable[[str, bool], tuple[str, str] | None],
    depth: int = 0,
) -> None:
    """Parse `text` into `defined` (lower-case name -> latest Definition), in place.

    `read_include(path, required)` returns (text, source) of an included
    file, or None when an `ifexist` include names a missing file.
    """
    if depth > MAX_INCLUDE_DEPTH:
        raise ConfigError(f"includes nest deeper than {MAX_INCLUDE_DEPTH} levels "
                          "(does a file include itself?)", source)
    for number, line in logical_lines(text, source):
        include = _INCLUDE_RE.match(line)
        if include:
            target = include.group(2).strip()
            if not target:
                raise ConfigError("include names no file", source, number)
            expanded = expand(target, defined, source=source, line=number)
            if not os.path.isabs(expanded) and os.path.sep in source:
                expanded = os.path.join(os.path.dirname(source), expanded)
            try:
                found = read_include(expanded, include.group(1) is None)
            except OSError as exc:
                raise ConfigError(f"cannot read included file {expanded}: {exc.strerror}",
                                  source, number) from exc
            if found is not None:
                parse(found[0], found[1], defined, read_include, depth + 1)
            continue
        assign = _ASSIGN_RE.match(line)
        if not assign:
            raise ConfigError(f"expected 'NAME = value' or 'include : path', got {line.strip()!r}",
                              source, number)
        define(defined, Definition(assign.group(1), assign.group(2).strip(), source, number))


def define(defined: dict[str, Definition], definition: Definition) -> None:
    """Record a definition; a reference to its own name takes the previous value."""
    key = definition.name.lower()
    previous = defined.get(key)
    raw = _substitute_self(definition.raw, key, previous.raw if previous else "")
    defined[key] = Definition(definition.name, raw, definition.source, definition.line)


def _substitute_self(raw: str, key: str, previous: str) -> str:
    out: list[str] = []
    for kind, body, literal in _tokens(raw):
        if kind == "macro":
            name, _, default = body.partition(":")
            if name.strip().lower() == key:
                out.append(previous if previous else default)
                continue
        out.append(literal)
    return "".join(out)


def _tokens(raw: str) -> Iterator[tuple[str, str, str]]:
    """Split a value into ("text", "", literal) and ("macro"|"env", body, literal) pieces."""
    i = 0
    text_start = 0
    n = len(raw)
    while i < n:
        if raw.startswith("$$(", i):
            close = _matching_paren(raw, i + 2)
            i = n if close < 0 else close + 1
            continue
        opening = None
        if raw[i:i + 5].upper() == "$ENV(":
            opening = ("env", i + 4)
        elif raw.startswith("$(", i):
            opening = ("macro", i + 1)
        if opening is not None:
            kind, open_at = opening
            close = _matching_paren(raw, open_at)
            if close >= 0:
                if text_start < i:
                    yield "text", "", raw[text_start:i]
                yield kind, raw[open_at + 1:close], raw[i:close + 1]
                i = text_start = close + 1
                continue
        i += 1
    if text_start < n:
        yield "text", "", raw[text_start:]


def _matching_paren(raw: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(raw)):
        if raw[j] == "(":
            depth += 1
        elif raw[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def expand(
    raw: str,
    defined: Mapping[str, Definition],
    environ: Mapping[str, str] | None = None,
    source: str | None = None,
    line: int | None = None,
    _stack: tuple[str, ...] = (),
) -> str:
    """Expand `$(NAME)`, `$(NAME:default)` and `$ENV(VAR)` in `raw`, recursively."""
    env = os.environ if environ is None else environ
    out: list[str] = []
    for kind, body, literal in _tokens(raw):
        if kind == "text":
            out.append(literal)
            continue
        name, has_default, default = body.partition(":")
        name = name.strip()
        if kind == "env":
            value = env.get(name)
            if value is None:
                value = expand(default, defined, env, source, line, _stack) if has_default else ""
            out.append(value)
            continue
        if not NAME_RE.match(name):
            raise ConfigError(f"bad macro name {name!r} in $({body})", source, line)
        key = name.lower()
        if key in _stack:
            cycle = " -> ".join([*_stack, key]).upper()
            raise ConfigError(f"macro cycle: {cycle}", source, line)
        found = defined.get(key)
        if found is None:
            out.append(expand(default, defined, env, source, line, _stack) if has_default else "")
            continue
        out.append(expand(found.raw, defined, env, found.source, found.line, (*_stack, key)))
    return "".join(out)


def lookup(name: str, defined: Mapping[str, Definition],
           environ: Mapping[str, str] | None = None) -> str:
    """The fully expanded value of `name`; UndefinedKnobError when nothing defines it."""
    found = defined.get(name.lower())
    if found is None:
        raise UndefinedKnobError(f"{name} is not defined")
    return expand(found.raw, defined, environ, found.source, found.line, (name.lower(),))
