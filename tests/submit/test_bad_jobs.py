"""Bad jobs and bad hook output give one clear error, never a traceback, never
a half-queued cluster: property-based tests (hypothesis) over job ads with
huge or deeply nested values submitted to a real broker, submit files through
`fetchwork submit`, and hook output beyond the size cap from real programs.
Each test prints how many cases it tried (shown with `pytest -rA`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from fetchwork.broker.client import Broker
from fetchwork.broker.store import valuecheck
from fetchwork.cli import main
from fetchwork.config.loader import environ_without_config
from fetchwork.errors import FetchworkError
from fetchwork.hooks.runner import HookSpec, run_hook
from fetchwork.startd.fetchoutput import read_fetch_output
from tests.config.test_bad_text import BOUNDED, SUBMIT, Tally

pytestmark = pytest.mark.timeout(120)

FEW = BOUNDED.__class__(BOUNDED, max_examples=25)

# Values a program (not a submit file) may hand the broker API: plain
# literals, lists nested deep, huge numbers and text, mappings, odd types.
LEAVES = st.one_of(st.integers(min_value=-2**80, max_value=2**80), st.floats(),
                   st.text(max_size=20), st.booleans(), st.none(), st.binary(max_size=8),
                   st.just("x" * (2 * 1024 * 1024)), st.just({"$expr": "[[["}),
                   st.just({"$expr": "Memory > 1"}), st.just({"a": 1}))


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


VALUES = st.one_of(LEAVES, st.lists(LEAVES, max_size=4),
                   st.builds(_nested, st.integers(min_value=1, max_value=3000), LEAVES))
NAMES = st.sampled_from(["Extra", "Deep", "Big", "Note", "Requirements"])


def _over_a_limit(value: Any) -> bool:
    """Whether `value` must be refused: a huge text, a 64-bit overflow, deep nesting."""
    depth = 0
    while isinstance(value, list) and len(value) == 1:
        value, depth = value[0], depth + 1
    items = value if isinstance(value, list) else [value]
    depth += isinstance(value, list)
    return depth > valuecheck.MAX_DEPTH or any(
        (isinstance(item, str) and len(item) > valuecheck.MAX_VALUE_BYTES)
        or (type(item) is int and not valuecheck.INT_MIN <= item <= valuecheck.INT_MAX)
        for item in items)


@pytest.fixture
def broker(redis_client, pool_name) -> Broker:
    return Broker(redis_client, pool=pool_name)


def _queued(broker: Broker) -> int:
    return len(broker.queued_ids())


def test_job_ads_queue_whole_or_not_at_all_with_the_attribute_named(broker):
    tally = Tally("job ads with odd values")

    @FEW
    @given(st.dictionaries(NAMES, VALUES, min_size=1, max_size=3),
           st.integers(min_value=0, max_value=2))
    def check(odd: dict[str, Any], position: int) -> None:
        good = {"Cmd": "/bin/true", "Iwd": "/tmp"}
        cluster = [good, good, good]
        cluster[position] = {**good, **odd}
        before = _queued(broker)
        try:
            ids = broker.submit(cluster, owner="fuzz")
        except FetchworkError as exc:
            assert any(f"attribute {name}" in str(exc) for name in odd), str(exc)
            assert _queued(broker) == before, "a refused cluster left jobs queued"
            tally.saw("refused")
            return
        assert not any(_over_a_limit(value) for value in odd.values()), odd
        assert len(ids) == 3 and _queued(broker) == before + 3
        broker.remove(ids)
        tally.saw("queued")

    check()
    tally.report()


def test_submit_command_queues_or_says_why_without_a_traceback(redis_url, pool_name, broker,
                                                               tmp_path: Path):
    tally = Tally("fetchwork submit")
    env = {**environ_without_config(), "FETCHWORK_BROKER": redis_url,
           "FETCHWORK_POOL": pool_name, "FETCHWORK_CONFIG": os.devnull,
           "_FETCHWORK_SUBMIT_MAX_JOB_ATTRS": "200"}
    runner = CliRunner()
    path = tmp_path / "fuzz.sub"

    @FEW
    @given(SUBMIT)
    def check(text: str) -> None:
        path.write_text(text)
        before = _queued(broker)
        old = os.getcwd()
        os.chdir(tmp_path)
        try:
            result = runner.invoke(main, ["submit", str(path)], env=env)
        finally:
            os.chdir(old)
        assert result.exit_code in (0, 1), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), \
            repr(result.exception)
        assert "Traceback" not in result.output
        if result.exit_code == 1:
            assert _queued(broker) == before, result.output
            assert "fetchwork: " in result.output, result.output
            tally.saw("refused")
        else:
            broker.remove(broker.queued_ids())
            tally.saw("queued")

    check()
    tally.report()


def test_a_submit_file_value_over_the_size_limit_is_refused_by_name(redis_url, pool_name,
                                                                    broker, tmp_path: Path):
    env = {**environ_without_config(), "FETCHWORK_BROKER": redis_url,
           "FETCHWORK_POOL": pool_name, "FETCHWORK_CONFIG": os.devnull}
    path = tmp_path / "huge.sub"
    huge = "x" * (valuecheck.MAX_VALUE_BYTES + 1)
    path.write_text(f'executable = /bin/true\n+Fine = 1\n+Huge = "{huge}"\nqueue 3\n')
    result = CliRunner().invoke(main, ["submit", str(path)], env=env)
    assert result.exit_code == 1, result.output
    assert "attribute Huge: its value is over" in result.output
    assert _queued(broker) == 0


def test_hook_output_beyond_the_cap_is_bad_output(tmp_path: Path):
    tally = Tally("hook output sizes")
    hook = tmp_path / "talk.sh"
    hook.write_text('#!/bin/sh\nhead -c "$1" /dev/zero | tr "\\0" "A"\n')
    hook.chmod(0o755)

    @FEW
    @given(st.integers(min_value=0, max_value=300000), st.integers(min_value=1, max_value=200000))
    def check(size: int, limit: int) -> None:
        spec = HookSpec(hook="FETCH_WORK", keyword="T", value=str(hook), args=(str(size),),
                        timeout_s=30, output_limit=limit)
        result = run_hook(spec)
        assert result.output_too_large == (size > limit), (size, limit)
        assert len(result.stdout) == min(size, limit)
        fetched = read_fetch_output(result.stdout, output_too_large=result.output_too_large)
        if size > limit:
            assert fetched.bad_reason == "output over the hook output limit"
            tally.saw("over the cap")
        else:
            tally.saw("within the cap")

    check()
    tally.report()


def talk(args: list[str], stdin_text: str) -> str:
    """An in-process hook printing args[0] times args[1]."""
    return args[1] * int(args[0])


def test_in_process_hook_output_beyond_the_cap_is_bad_output_and_cut_to_the_cap():
    tally = Tally("in-process hook output sizes")

    @FEW
    @given(st.integers(min_value=0, max_value=50000), st.integers(min_value=1, max_value=40000),
           st.sampled_from(["A", "é", "💥"]))
    def check(count: int, limit: int, char: str) -> None:
        spec = HookSpec(hook="FETCH_WORK", keyword="T", value=f"python:{__name__}:talk",
                        args=(str(count), char), timeout_s=30, output_limit=limit)
        result = run_hook(spec)
        size = count * len(char.encode())
        assert result.output_too_large == (size > limit), (size, limit)
        assert len(result.stdout.encode()) <= limit
        fetched = read_fetch_output(result.stdout, output_too_large=result.output_too_large)
        assert (fetched.bad_reason == "output over the hook output limit") == (size > limit)
        tally.saw("over the cap" if size > limit else "within the cap")

    check()
    tally.report()
