"""The configuration language, as pure functions of text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fetchwork.config.language import Definition, expand, logical_lines, lookup, parse
from fetchwork.errors import ConfigError, UndefinedKnobError


def parsed(text: str, read_include=None) -> dict[str, Definition]:
    defined: dict[str, Definition] = {}
    parse(text, "test.conf", defined, read_include or (lambda path, required: None))
    return defined


def value(text: str, name: str, environ=None) -> str:
    return lookup(name, parsed(text), environ or {})


def test_a_macro_expands_to_the_value_it_names():
    assert value("A = one\nB = $(A)-two\n", "B") == "one-two"


def test_names_are_case_insensitive():
    assert value("A = one\nB = $(a)-two\n", "b") == "one-two"


def test_later_definitions_win():
    assert value("A = one\nA = two\n", "A") == "two"


def test_expansion_is_lazy_so_order_does_not_matter():
    assert value("B = $(A)!\nA = late\n", "B") == "late!"


def test_a_default_applies_only_when_undefined():
    assert value("B = $(NOPE:fallback)\n", "B") == "fallback"
    assert value("NOPE = set\nB = $(NOPE:fallback)\n", "B") == "set"


def test_a_default_may_itself_hold_a_macro():
    assert value("C = cee\nB = $(NOPE:$(C))\n", "B") == "cee"


def test_an_undefined_macro_without_default_is_empty():
    assert value("B = [$(NOPE)]\n", "B") == "[]"


def test_env_reads_the_environment():
    assert value("B = $ENV(HOME_X)/x\n", "B", {"HOME_X": "/h"}) == "/h/x"
    assert value("B = $ENV(MISSING:dflt)\n", "B", {}) == "dflt"


def test_double_dollar_is_left_for_job_ads():
    assert value("B = $$(Memory) $(A)\nA = a\n", "B") == "$$(Memory) a"


def test_expansion_is_recursive():
    assert value("A = $(B)\nB = $(C)\nC = deep\n", "A") == "deep"


def test_a_cycle_is_an_error_that_names_it():
    with pytest.raises(ConfigError, match="cycle: A -> B -> A"):
        value("A = $(B)\nB = $(A)\n", "A")


def test_self_reference_takes_the_previous_definition():
    assert value("P = /bin\nP = $(P):/opt/bin\n", "P") == "/bin:/opt/bin"


def test_self_reference_without_previous_uses_its_default():
    assert value("P = $(P:/usr/bin):/opt\n", "P") == "/usr/bin:/opt"


def test_comments_and_blank_lines_are_ignored():
    assert value("# a comment\n\n   # indented\nA = 1\n", "A") == "1"


def test_a_hash_inside_a_value_is_kept():
    assert value("A = a#b\n", "A") == "a#b"


def test_a_continued_line_joins():
    assert value("A = one \\\n    two\n", "A") == "one two"
    assert value("A = x,\\\n  y,\\\n  z\n", "A") == "x,y,z"


def test_comment_lines_inside_a_continuation_are_skipped():
    assert value("A = one \\\n# note\n two\n", "A") == "one two"


def test_a_dangling_backslash_is_an_error_with_a_line():
    with pytest.raises(ConfigError, match=r"test.conf:2: .*backslash"):
        parsed("A = 1\nB = 2 \\")


def test_a_line_that_is_not_an_assignment_names_file_and_line():
    with pytest.raises(ConfigError, match=r"test.conf:3: expected 'NAME = value'"):
        parsed("A = 1\n\nthis is wrong\n")


def test_empty_values_are_defined_and_empty():
    assert value("A =\n", "A") == ""


def test_undefined_lookup_raises():
    with pytest.raises(UndefinedKnobError):
        value("A = 1\n", "B")


def test_include_reads_another_file_at_that_point():
    files = {"/etc/x/extra.conf": "B = from-include\nA = overridden\n"}

    def read(path, required):
        return (files[path], path) if path in files else None

    defined = parsed("A = first\ninclude : /etc/x/extra.conf\nC = $(B)\n", read)
    assert lookup("A", defined, {}) == "overridden"
    assert lookup("C", defined, {}) == "from-include"
    assert defined["b"].source == "/etc/x/extra.conf"
    assert defined["b"].line == 1


def test_include_path_may_use_macros():
    files = {"/d/sub.conf": "X = yes\n"}
    defined = parsed("DIR = /d\ninclude : $(DIR)/sub.conf\n",
                     lambda path, required: (files[path], path))
    assert lookup("X", defined, {}) == "yes"


def test_include_ifexist_tolerates_a_missing_file():
    seen = []

    def read(path, required):
        seen.append((path, required))
        return None

    parsed("include ifexist : /nowhere.conf\nA = 1\n", read)
    assert seen == [("/nowhere.conf", False)]


def test_an_include_loop_is_an_error():
    def read(path, required):
        return ("include : /loop.conf\n", "/loop.conf")

    with pytest.raises(ConfigError, match="nest deeper"):
        parsed("include : /loop.conf\n", read)


def test_definitions_record_where_they_were_made():
    defined = parsed("\n\nA = 1\n")
    assert defined["a"] == Definition("A", "1", "test.conf", 3)


def test_logical_lines_report_the_first_physical_line():
    assert list(logical_lines("A = 1 \\\n 2\nB = 3\n", "x")) == [(1, "A = 1 2"), (3, "B = 3")]


_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
_plain = st.text(st.characters(blacklist_characters="$\\\n\r#", blacklist_categories=("Cs",)),
                 max_size=30).map(str.strip)


@given(name=_names, text=_plain)
def test_any_plain_value_reads_back_unchanged(name, text):
    assert value(f"{name} = {text}\n", name.upper()) == text


@given(first=_plain, second=_plain)
def test_macro_expansion_concatenates(first, second):
    assert value(f"A = {first}\nB = $(A){second}\n", "B") == first + second


@given(parts=st.lists(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=6))
def test_continuations_join_every_piece(parts):
    text = "A = " + " \\\n   ".join(parts) + "\n"
    assert value(text, "A") == " ".join(parts)


@given(depth=st.integers(min_value=1, max_value=30))
def test_chains_of_any_depth_expand(depth):
    text = "".join(f"K{i} = $(K{i + 1})\n" for i in range(depth)) + f"K{depth} = end\n"
    assert value(text, "K0") == "end"


def test_expand_reports_bad_macro_names():
    with pytest.raises(ConfigError, match="bad macro name"):
        expand("$(not a name)", {}, {})
