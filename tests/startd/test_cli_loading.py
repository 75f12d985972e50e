"""`fetchwork startd` loads the startd and nothing of the user commands."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from fetchwork import cli

pytestmark = pytest.mark.timeout(60)

# Resolve a command the way `fetchwork NAME` does, import what it runs, and
# print every loaded module.
_PROBE = """
import json, sys
import click
from fetchwork.cli import main
command = main.get_command(click.Context(main), sys.argv[1])
assert command is not None
for module in sys.argv[2:]:
    __import__(module)
print(json.dumps(sorted(sys.modules)))
"""

# Modules of the submit side and the user commands, by name.
_USER_SIDE = ("submitcli", "usercli", "submitfile", "submitmap", "tables", "demo", "poolcli",
              "fetchwork.submit")


def loaded_after(command: str, *imports: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, command, *imports],
                          capture_output=True, text=True, timeout=50, check=True)
    modules: list[str] = json.loads(done.stdout)
    return modules


def test_the_startd_loads_no_user_command_and_no_rich():
    modules = loaded_after("startd", "fetchwork.startd.daemon")
    assert "fetchwork.startd.cli" in modules and "fetchwork.startd.daemon" in modules
    ours = [m for m in modules if m.startswith("fetchwork.")]
    assert not [m for m in ours if any(word in m for word in _USER_SIDE)], ours
    assert not [m for m in modules if m == "rich" or m.startswith("rich.")]
    assert "fetchwork.broker.cli" not in modules


def test_every_command_in_the_table_resolves_to_its_name():
    group = cli.main
    ctx = click.Context(group)
    assert group.list_commands(ctx) == sorted(cli.COMMANDS)
    for name in cli.COMMANDS:
        command = group.get_command(ctx, name)
        assert command is not None and command.name == name


def test_an_unknown_command_is_still_refused():
    result = subprocess.run([sys.executable, "-m", "fetchwork", "no-such-command"],
                            capture_output=True, text=True, timeout=50)
    assert result.returncode == 2 and "No such command" in result.stderr
