"""HTCondor's option spelling for click commands: one dash, many letters.

condor_q takes `-watch`, `-hold`, `-af`, `-nobatch`; click would read
`-watch` as the short options `-w -a -t -c -h`. `CondorCommand` rewrites a
single-dash word into the long option it names (`-watch` -> `--watch`,
`-better-analyze=12.0` -> `--better-analyze=12.0`) before click parses, and
lets `-af`/`-autoformat` take every following word that is not an option,
as condor_q does (`-af Owner JobStatus`).
"""

from __future__ import annotations

from collections.abc import Iterable

import click

# Options that, as in condor_q, take all following words up to the next option.
GREEDY = ("--autoformat",)


def _aliases(command: click.Command) -> dict[str, str]:
    """Single-dash spelling -> the name click knows, for every long option."""
    aliases: dict[str, str] = {}
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        spellings = [*param.opts, *param.secondary_opts]
        for name in spellings:
            if name.startswith("--") and len(name) > 3:
                aliases.setdefault(name[1:], name)
            elif name.startswith("-") and len(name) > 2:
                aliases[name] = name
    return aliases


def _canonical(command: click.Command) -> dict[str, str]:
    """Any spelling of a greedy option -> its greedy name."""
    found: dict[str, str] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            spellings = [*param.opts, *param.secondary_opts]
            for greedy in GREEDY:
                if greedy in spellings:
                    found.update((name, greedy) for name in spellings)
    return found


def condor_args(command: click.Command, args: Iterable[str]) -> list[str]:
    """`args` with single-dash long options spelled as click knows them; a greedy
    option repeated once per following word. `--` ends the rewriting."""
    aliases = _aliases(command)
    greedy = _canonical(command)
    words = list(args)
    out: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word == "--":
            out += words[index - 1:]
            break
        name, equals, value = word.partition("=")
        if word.startswith("-") and not word.startswith("--") and name in aliases:
            name = aliases[name]
            word = name + equals + value
        if name in greedy and not equals:
            taken = 0
            while index < len(words) and not words[index].startswith("-"):
                out += [greedy[name], words[index]]
                index += 1
                taken += 1
            if not taken:
                out.append(word)  # click reports the missing value
            continue
        out.append(word)
    return out


class CondorCommand(click.Command):
    """A click command that also accepts HTCondor's single-dash long options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, condor_args(self, args))
