"""`fetchwork completion SHELL` prints a script that makes the shell ask fetchwork."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fetchwork.config.loader import environ_without_config

pytestmark = pytest.mark.timeout(60)


# The installed console script: the shell asks it by its own name.
SCRIPT = os.path.join(os.path.dirname(sys.executable), "fetchwork")


def fetchwork(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args],
                          env={**environ_without_config(), "FETCHWORK_CONFIG": os.devnull, **env},
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    result = fetchwork("completion", shell)
    assert result.returncode == 0, result.stderr
    assert "_FETCHWORK_COMPLETE" in result.stdout


def test_the_script_completes_commands_and_condor_q_options() -> None:
    commands = fetchwork(_FETCHWORK_COMPLETE="bash_complete", COMP_WORDS="fetchwork hi",
                         COMP_CWORD="1")
    assert commands.stdout.split() == ["plain,history"]
    options = fetchwork(_FETCHWORK_COMPLETE="bash_complete", COMP_WORDS="fetchwork q -no",
                        COMP_CWORD="2")
    assert "plain,-nobatch" in options.stdout.split()


def test_an_unknown_shell_is_refused() -> None:
    result = fetchwork("completion", "tcsh")
    assert result.returncode == 2 and "tcsh" in result.stderr
