"""A `python:` hook that declares the words it ignores is not called for them.

The reference reply hook does nothing for an accepted job and says so
(`reply_fetch.ignores = ("accept",)`), so the startd skips that call, and its
thread, for every job it accepts. A real startd runs one good job and one
garbage fetch under such a reply hook: the hook is called for the reject
only. A program hook, which cannot declare anything, is called for both.
"""

from __future__ import annotations

import os
import textwrap

import pytest

from fetchwork.hooks.runner import HookSpec, ignores
from tests.support.startd import QUEUE_DELAY, Pool, pool_root

_QUIET = '''\
import os
import time

CALLS = {calls!r}


def reply(args, stdin_text):
    path = os.path.join(CALLS, "%d.%d" % (time.time_ns(), os.getpid()))
    with open(path, "w") as handle:
        handle.write(" ".join(args))


reply.ignores = ("accept",)


def plain(args, stdin_text):
    return None


def odd(args, stdin_text):
    return None


odd.ignores = "accept"  # not a collection of words: declares nothing
'''


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """The module's name and the folder its reply hook records calls in."""
    root = tmp_path_factory.mktemp("quiet-reply")
    calls = root / "quiet-calls"
    calls.mkdir()
    calls.chmod(0o1777)
    name = f"fwquietreply_{os.getpid()}"
    (root / f"{name}.py").write_text(_QUIET.format(calls=str(calls)))
    return root, name, calls


def spec(value: str) -> HookSpec:
    return HookSpec(hook="REPLY_FETCH", keyword="QUIET", value=value, args=(),
                    timeout_s=5.0, output_limit=1 << 20)


def test_only_a_python_function_listing_the_word_ignores_it(quiet, monkeypatch):
    root, name, _calls = quiet
    monkeypatch.syspath_prepend(str(root))
    assert ignores(spec(f"python:{name}:reply"), "accept")
    assert not ignores(spec(f"python:{name}:reply"), "reject")
    assert not ignores(spec(f"python:{name}:plain"), "accept")
    assert not ignores(spec(f"python:{name}:odd"), "accept")
    assert not ignores(spec(f"python:{name}:missing"), "accept")
    assert not ignores(spec("/bin/true"), "accept")


def test_the_reference_reply_hook_ignores_accept_only():
    value = "python:fetchwork.hooks.reference:reply_fetch"
    assert ignores(spec(value), "accept")
    assert not ignores(spec(value), "reject")


def test_the_startd_skips_the_ignored_reply_and_makes_the_other(quiet):
    _root, name, calls = quiet
    with pool_root("quiet-reply") as root:
        pool = Pool(root, "python")
        (root / f"{name}.py").write_text((_root / f"{name}.py").read_text())
        pool.write_config(pool.keyword_config("QUIET") + textwrap.dedent(f"""
            STARTD_JOB_HOOK_KEYWORD = QUIET
            FetchWorkDelay = {QUEUE_DELAY}
            QUIET_HOOK_REPLY_FETCH = python:{name}:reply
        """))
        pool.add_job("QUIET", cmd="/bin/true")
        (pool.jobs_dir / "QUIET" / "90000").write_text("this is not a ClassAd at all\n")
        status = pool.start("--once").wait(60)
        assert status == 0, pool.log_text()[-3000:]
        words = sorted(path.read_text() for path in calls.iterdir())
        assert words == ["QUIET reject"], pool.log_text()[-3000:]
        assert len(pool.calls("exit")) == 1  # the accepted job ran
