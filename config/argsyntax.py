"""HTCondor's argument and environment syntaxes, parsed and written (pure).

Two generations exist, and job ads carry either:

- old ("V1"): `Args = "a b c"`, words split on whitespace, `\\"` for a double
  quote, no way to pass a space; `Env = "A=1;B=2"`, entries split on `;`.
- new ("V2"): `Arguments` and `Environment`. Words are split on whitespace;
  a single-quoted stretch keeps its spaces, and inside it `''` is one single
  quote (`''` alone is an empty word). In a submit file or a hook's `_ARGS`
  knob the whole string is wrapped in double quotes, with `""` for one double
  quote inside; in a job ad it is stored without that wrapping ("raw").

A job ad's new attribute wins over the old one, as in HTCondor's starter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import classad2

from fetchwork.errors import ArgSyntaxError

_SPACE = " \t\r\n"


# -- reading ---------------------------------------------------------------

def parse_args_old(text: str) -> list[str]:
    """Old syntax: words split on whitespace, `\\"` stands for `"`."""
    return [word.replace('\\"', '"') for word in text.split()]


def is_quoted(text: str) -> bool:
    """Whether `text` is in the double-quoted form that marks the new syntax."""
    stripped = text.strip()
    return len(stripped) >= 2 and stripped[0] == '"' and stripped[-1] == '"'


def unquote(text: str) -> str:
    """The raw new-syntax text inside `"..."`, with `""` read as `"`."""
    stripped = text.strip()
    inner = stripped[1:-1]
    out = []
    index = 0
    while index < len(inner):
        char = inner[index]
        if char == '"':
            if inner[index + 1:index + 2] != '"':
                raise ArgSyntaxError(f"a double quote inside {text!r} must be doubled")
            index += 1
        out.append(char)
        index += 1
    return "".join(out)


def parse_arguments_raw(text: str) -> list[str]:
    """New syntax as stored in a job ad (no outer double quotes)."""
    words: list[str] = []
    current: list[str] = []
    in_word = False
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if char in _SPACE:
            if in_word:
                words.append("".join(current))
                current = []
                in_word = False
            index += 1
            continue
        in_word = True
        if char != "'":
            current.append(char)
            index += 1
            continue
        index += 1  # opening quote: copy up to the closing one, '' is a quote
        while True:
            if index >= length:
                raise ArgSyntaxError(f"unbalanced single quote in {text!r}")
            if text[index] == "'":
                if text[index + 1:index + 2] == "'":
                    current.append("'")
                    index += 2
                    continue
                index += 1
                break
            current.append(text[index])
            index += 1
    if in_word:
        words.append("".join(current))
    return words


def parse_arguments_new(text: str) -> list[str]:
    """New syntax, double-quoted (`"a 'b c' d"`) or raw (`a 'b c' d`)."""
    return parse_arguments_raw(unquote(text) if is_quoted(text) else text)


def parse_hook_args(text: str | None) -> list[str]:
    """A hook's `_ARGS` knob: new syntax when double-quoted, else the old syntax.

    This is how HTCondor reads the knob (V1 "wacked" or V2 quoted).
    """
    if not text:
        return []
    return parse_arguments_new(text) if is_quoted(text) else parse_args_old(text)


def _env_entry(entry: str, source: str) -> tuple[str, str]:
    name, equals, value = entry.partition("=")
    name = name.strip()
    if not equals or not name:
        raise ArgSyntaxError(f"environment entry {entry!r} in {source!r} is not NAME=value")
    return name, value


def parse_env_old(text: str) -> dict[str, str]:
    """Old syntax: `A=1;B=2` (empty entries are skipped)."""
    env: dict[str, str] = {}
    for entry in text.split(";"):
        if entry.strip():  # values are kept verbatim, spaces included
            name, value = _env_entry(entry, text)
            env[name] = value
    return env


def parse_environment_raw(text: str) -> dict[str, str]:
    """New syntax as stored in a job ad; words are NAME=value."""
    env: dict[str, str] = {}
    for word in parse_arguments_raw(text):
        name, value = _env_entry(word, text)
        env[name] = value
    return env


# -- writing ---------------------------------------------------------------

def _quote_word(word: str) -> str:
    if word and not any(char in _SPACE or char == "'" for char in word):
        return word
    return "'" + word.replace("'", "''") + "'"


def format_arguments_raw(words: Iterable[str]) -> str:
    """New syntax without outer quotes, as a job ad stores `Arguments`."""
    return " ".join(_quote_word(word) for word in words)


# -- job ads ---------------------------------------------------------------

def _lookup(ad: Any, name: str) -> Any:
    """An attribute of a ClassAd or mapping, case-insensitively; None when absent."""
    if isinstance(ad, classad2.ClassAd):
        return ad.get(name)  # a ClassAd's names are case-insensitive already
    if name in ad:
        return ad[name]
    if isinstance(ad, Mapping):
        for key, value in ad.items():
            if key.lower() == name.lower():
                return value
    return None


def job_text(ad: Any, name: str) -> str | None:
    """A string attribute of a job ad (case-insensitive), None when absent;
    ArgSyntaxError when it holds something other than a string."""
    value = _lookup(ad, name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ArgSyntaxError(f"job attribute {name} must be a string, got {value!r}")
    return value


def job_args(ad: Any) -> list[str]:
    """The job's arguments (without the program): `Arguments`, else `Args`."""
    arguments = job_text(ad, "Arguments")
    if arguments is not None:
        # A job ad holds the raw new syntax, as HTCondor's starter reads it.
        return parse_arguments_raw(arguments)
    args = job_text(ad, "Args")
    return parse_args_old(args) if args is not None else []


def job_env(ad: Any) -> dict[str, str]:
    """The job's own environment: `Environment`, else `Env` (empty when neither)."""
    environment = job_text(ad, "Environment")
    if environment is not None:
        return parse_environment_raw(environment)
    env = job_text(ad, "Env")
    return parse_env_old(env) if env is not None else {}
