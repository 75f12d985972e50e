"""Bad input gives one clear error, never a traceback: property-based tests
(hypothesis) over configuration files, fetch hook output (ClassAd text) and
submit files. Each error is a FetchworkError naming the file or hook and the
line; anything else escaping is a defect. Each test prints how many cases it
tried (shown with `pytest -rA`).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fetchwork.config import ads
from fetchwork.config.loader import Config
from fetchwork.errors import AdError, ConfigError, FetchworkError, SubmitFileError
from fetchwork.startd.fetchoutput import read_fetch_output
from fetchwork.submit.submitfile import parse_submit

pytestmark = pytest.mark.timeout(120)

BOUNDED = settings(max_examples=50, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow,
                                          HealthCheck.function_scoped_fixture])
# Loading a whole configuration detects the machine's facts each time: fewer cases.
FEWER = settings(BOUNDED, max_examples=20)
LINE_AT = re.compile(r":(\d+): ")

# Pieces that bad input is made of: names, operators, quotes, brackets,
# macros, comments, continuations, huge numbers, control and non-ASCII text.
NAMES = st.sampled_from(["A", "NUM_SLOTS", "Requirements", "+Extra", "MY.x", "request_memory",
                         "arguments", "environment", "executable", "queue", "include",
                         "$(A)", "if", "elif", "endif", "use", "@="])
PIECES = st.sampled_from(["=", " = ", ":", "\"", "'", "[", "]", "{", "}", "(", ")", "$(", ")",
                          "$ENV(HOME)", "#", "\\", "\n", "\\\n", "  ", "1", "-1", "1e309",
                          "99999999999999999999999", "true", "undefined", "error", "&&", "||",
                          "\t", "\x00", "\x7f", "é", "💥", "\ud7ff", ",", ";", "from", "in",
                          "matching", "1.5", "10MB", "0x10", ".", "..", "/", "*"])
TEXT = st.lists(st.one_of(NAMES, PIECES, st.text(max_size=4)), max_size=12).map("".join)
# A plausible value, and one line of a file: mostly `name = value`, some of it junk.
VALUE = st.one_of(st.sampled_from(["1", "0", "true", "5m", "\"s\"", "$(A)", "a, b",
                                   "Memory > 1", "10 * 60", ""]), TEXT)
DEFINITION = st.builds(lambda n, v: f"{n} = {v}",
                       st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True), VALUE)
LINES = st.lists(st.one_of(DEFINITION, DEFINITION, TEXT), max_size=8).map("\n".join)


class Tally:
    """How many cases a property saw, and how they ended; printed at the end of the test."""

    def __init__(self, what: str):
        self.what = what
        self.endings: Counter[str] = Counter()

    def saw(self, ending: str) -> None:
        self.endings[ending] += 1

    def report(self) -> None:
        total = sum(self.endings.values())
        parts = ", ".join(f"{count} {ending}" for ending, count in sorted(self.endings.items()))
        print(f"{self.what}: {total} cases tried ({parts})")
        assert total > 0


def _names_the_line(message: str, source: str) -> bool:
    return message.startswith(f"{source}:") and (LINE_AT.search(message) is not None
                                                 or message.startswith(f"{source}: "))


# -- configuration files ------------------------------------------------------

def test_configuration_text_loads_or_names_file_and_line():
    tally = Tally("configuration text")

    @BOUNDED
    @given(LINES)
    def check(text: str) -> None:
        try:
            config = Config.from_text(text, source="fuzz.conf")
        except ConfigError as exc:
            assert _names_the_line(str(exc), "fuzz.conf"), str(exc)
            tally.saw("refused")
            return
        for definition, _value in config.items():
            for read in (config.get_int, config.get_bool, config.get_duration_s,
                         config.get_expr):
                try:
                    read(definition.name)
                except ConfigError as exc:
                    assert definition.name in str(exc), str(exc)
        tally.saw("loaded")

    check()
    tally.report()


def test_configuration_files_with_any_bytes_name_file_and_line(tmp_path: Path):
    tally = Tally("configuration files (bytes)")
    path = tmp_path / "fuzz.conf"

    @FEWER
    @given(st.lists(st.one_of(LINES.map(str.encode), st.binary(max_size=12)), max_size=4)
           .map(b"\n".join))
    def check(raw: bytes) -> None:
        path.write_bytes(raw)
        try:
            Config.load(environ={}, config_file=str(path), use_defaults=False)
        except ConfigError as exc:
            assert _names_the_line(str(exc), str(path)), str(exc)
            tally.saw("refused")
            return
        tally.saw("loaded")

    check()
    tally.report()


# -- ClassAd text from fetch hooks ---------------------------------------------------

def test_fetch_hook_output_is_a_job_no_work_or_bad_output_naming_the_line():
    tally = Tally("fetch hook output")

    @BOUNDED
    @given(st.one_of(LINES, LINES.map(lambda text: f'Cmd = "/bin/true"\n{text}')))
    def check(text: str) -> None:
        fetched = read_fetch_output(text)
        if fetched.empty:
            tally.saw("no work")
        elif fetched.bad_reason is not None:
            reason = fetched.bad_reason
            assert "line " in reason or "no Cmd" in reason or "not a ClassAd" in reason, reason
            tally.saw("bad output")
        else:
            tally.saw("a job")

    check()
    tally.report()


def test_ad_text_parses_or_raises_an_ad_error_naming_the_line():
    tally = Tally("ad text")
    attr = st.builds(lambda n, v: f"{n} = {v}", st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}",
                                                             fullmatch=True), TEXT)

    @BOUNDED
    @given(st.lists(st.one_of(attr, TEXT), max_size=10).map("\n".join))
    def check(text: str) -> None:
        try:
            ad = ads.parse_ad(text, source="hook")
        except AdError as exc:
            assert str(exc).startswith("hook: "), str(exc)
            tally.saw("refused")
            return
        ads.to_dict(ad)  # whatever parsed can be stored
        tally.saw("parsed")

    check()
    tally.report()


# -- submit files ------------------------------------------------------------

SUBMIT_COMMANDS = st.sampled_from([
    "executable = /bin/true", "executable = ", "arguments = \"a b' c\"", "arguments = a\"b",
    "request_memory = -1", "request_memory = 1e99", "request_memory = many", "request_cpus = 0",
    "+Deep = " + "{" * 300 + "1" + "}" * 300, "+Huge = \"" + "x" * 200000 + "\"",
    "+Big = 99999999999999999999999", "+Bad = [[[", "environment = \"A=1 B\"",
    "requirements = Memory >", "priority = high", "initialdir = /no/such/dir",
    "queue", "queue 0", "queue 3", "queue -1", "queue 99999999999", "queue x in (a, b",
    "queue x from (\n1\n2\n)", "queue matching *.none", "queue x from /no/such/file",
    "include : /etc/passwd", "if $(A)", "endif", "transfer_input_files = a,,b",
    "output = out.$(Process)", "log = job.log", "universe = grid", "hold = true",
])


QUEUES = st.sampled_from(["queue", "queue 2", "queue 0", "queue -1", "queue 99999999999",
                          "queue x in (a, b", "queue x in (a, b)", "queue x from (\n1\n2\n)",
                          "queue matching *.none", "queue x from /no/such/file", "queue 1 x",
                          ""])
SUBMIT = st.builds(lambda first, body, queue: "\n".join([first, *body, queue]),
                   st.sampled_from(["executable = /bin/true", "executable = /bin/sh", ""]),
                   st.lists(st.one_of(SUBMIT_COMMANDS, SUBMIT_COMMANDS, TEXT), max_size=5),
                   QUEUES)


def test_submit_files_queue_jobs_or_name_the_line(tmp_path: Path):
    tally = Tally("submit files")

    @BOUNDED
    @given(SUBMIT)
    def check(text: str) -> None:
        try:
            parsed = parse_submit(text, 1, submit_dir=str(tmp_path), source="fuzz.sub",
                                  max_attrs=200)
        except SubmitFileError as exc:
            assert str(exc).startswith("fuzz.sub"), str(exc)
            tally.saw("refused")
            return
        except FetchworkError as exc:
            raise AssertionError(f"not a submit file error: {type(exc).__name__}: {exc}") from exc
        for ad in parsed.ads:
            ads.to_dict(ad)
        tally.saw(f"{min(len(parsed.ads), 2)}+ jobs" if parsed.ads else "no jobs")

    check()
    tally.report()


# -- what the startd does with any job ad a fetch hook prints -------------------------

EXPRS = st.one_of(st.integers(), st.floats(allow_nan=False).map(repr),
                  st.sampled_from(["undefined", "error", "\"text\"", "{1, 2}", "true",
                                   "[a = 1]", "1 / 0", "Memory > \"x\"", "Memory > 1",
                                   "99999999999999999999", "-1e308 * 10", "X", "1e309",
                                   "strcat(1)", "TARGET.Missing", "MY.Requirements"]))


def test_any_fetched_job_ad_gets_a_decision_not_an_exception():
    from fetchwork.startd.acceptance import decide
    from fetchwork.startd.slots.slotad import MachineFacts, SlotPolicy
    from fetchwork.startd.states import Activity, SlotStatus, State
    from tests.support.slotads import build_slot_ad

    tally = Tally("fetched job ads decided")
    facts = MachineFacts("m", "LINUX", "X86_64", 2, 2048, 10**6, 0.5)
    policy = SlotPolicy(start="TARGET.X =!= 13", rank="TARGET.X + TARGET.JobPrio")
    statuses = [SlotStatus(State.UNCLAIMED, Activity.IDLE, 0.0, 0.0),
                SlotStatus(State.CLAIMED, Activity.BUSY, 0.0, 0.0)]

    @BOUNDED
    @given(st.dictionaries(st.sampled_from(["Requirements", "Rank", "X", "JobPrio",
                                            "RequestMemory", "RequestCpus"]),
                           EXPRS, max_size=5), st.sampled_from(statuses))
    def check(attrs: dict[str, object], status: SlotStatus) -> None:
        text = 'Cmd = "/bin/true"\n' + "".join(f"{k} = {v}\n" for k, v in attrs.items())
        fetched = read_fetch_output(text)
        if fetched.job_ad is None or fetched.bad_reason is not None:
            tally.saw("bad output")
            return
        slot_ad = build_slot_ad(1, "m", 1, facts, status, policy, 0.0)
        decision = decide(status, slot_ad, fetched.job_ad, 0.0)
        tally.saw(decision.reply)

    check()
    tally.report()
