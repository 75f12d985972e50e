"""HTCondor's old and new argument/environment syntaxes."""

from __future__ import annotations

import classad2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fetchwork.config import argsyntax as ax
from fetchwork.errors import ArgSyntaxError

_words = st.lists(st.text(st.characters(blacklist_categories=("Cs",),
                                        blacklist_characters="\x00"), max_size=12),
                  max_size=8)
_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
_plain = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc"),
                               blacklist_characters="\x00;\"'"), min_size=1, max_size=10)


@pytest.mark.parametrize(("text", "words"), [
    ("a b c", ["a", "b", "c"]),
    ("  a\t b  ", ["a", "b"]),
    ('say \\"hi\\"', ["say", '"hi"']),
    ("", []),
    ("x'y", ["x'y"]),
])
def test_old_args(text, words):
    assert ax.parse_args_old(text) == words


@pytest.mark.parametrize(("text", "words"), [
    ('"a \'b c\' d"', ["a", "b c", "d"]),
    ("a 'b c' d", ["a", "b c", "d"]),
    ("'it''s' here", ["it's", "here"]),
    ("a '' b", ["a", "", "b"]),
    ("x'y z'w", ["xy zw"]),
    ('"say ""hi"""', ["say", '"hi"']),
    ('""', []),
    ("  ", []),
    ("back\\slash", ["back\\slash"]),
])
def test_new_arguments(text, words):
    assert ax.parse_arguments_new(text) == words


@pytest.mark.parametrize("text", ["a 'b", "'", '"a " b"'])
def test_new_arguments_errors(text):
    with pytest.raises(ArgSyntaxError):
        ax.parse_arguments_new(text)


def test_hook_args_quoted_or_not():
    assert ax.parse_hook_args('"--name \'a b\'"') == ["--name", "a b"]
    assert ax.parse_hook_args("--name 'a b'") == ["--name", "'a", "b'"]
    assert ax.parse_hook_args(None) == []


def test_environments():
    assert ax.parse_env_old("A=1;B=x y;;C=") == {"A": "1", "B": "x y", "C": ""}
    assert ax.parse_env_old("A=b=c") == {"A": "b=c"}
    assert ax.parse_environment_raw("A=1 B='x y'") == {"A": "1", "B": "x y"}
    assert ax.parse_environment_raw("A=1 'B=it''s'") == {"A": "1", "B": "it's"}
    with pytest.raises(ArgSyntaxError):
        ax.parse_env_old("A=1;novalue")
    with pytest.raises(ArgSyntaxError):
        ax.parse_environment_raw("=1")


def test_job_ad_new_attributes_win():
    ad = classad2.ClassAd({"Cmd": "/bin/echo", "Args": "old one", "Arguments": "new 'two words'",
                           "Env": "A=old", "Environment": "A=new B='x y'"})
    assert ax.job_args(ad) == ["new", "two words"]
    assert ax.job_env(ad) == {"A": "new", "B": "x y"}
    old = {"cmd": "/bin/echo", "args": "old one", "env": "A=old"}
    assert ax.job_args(old) == ["old", "one"]
    assert ax.job_text(old, "Cmd") == "/bin/echo"
    assert ax.job_env(old) == {"A": "old"}
    assert ax.job_env({}) == {} and ax.job_args({}) == []
    with pytest.raises(ArgSyntaxError):
        ax.job_args({"Arguments": 5})


def _quoted(raw: str) -> str:
    """The double-quoted form a submit file or a hook's `_ARGS` knob writes."""
    return '"' + raw.replace('"', '""') + '"'


@given(_words)
def test_new_syntax_round_trips(words):
    assert ax.parse_arguments_raw(ax.format_arguments_raw(words)) == words
    assert ax.parse_arguments_new(_quoted(ax.format_arguments_raw(words))) == words
    assert ax.parse_hook_args(_quoted(ax.format_arguments_raw(words))) == words


@given(st.lists(_plain, max_size=8))
def test_old_syntax_round_trips(words):
    assert ax.parse_args_old(" ".join(word.replace('"', '\\"') for word in words)) == words


@given(st.dictionaries(_names, st.text(st.characters(blacklist_categories=("Cs",),
                                                       blacklist_characters="\x00"),
                                        max_size=10), max_size=6))
def test_environment_round_trips(env):
    raw = ax.format_arguments_raw(f"{name}={value}" for name, value in env.items())
    assert ax.parse_environment_raw(raw) == env
    old = {name: value for name, value in env.items() if ";" not in value}
    assert ax.parse_env_old(";".join(f"{name}={value}" for name, value in old.items())) == old


@given(st.text(max_size=40))
def test_any_text_parses_or_raises_the_syntax_error(text):
    for parse in (ax.parse_args_old, ax.parse_arguments_new, ax.parse_hook_args,
                  ax.parse_env_old, ax.parse_environment_raw):
        try:
            parse(text)
        except ArgSyntaxError:
            pass
