"""Showing knob values and where they came from (`fetchwork config`, whose command
lives with the user commands: it also asks the pool for the values that are its own).

A knob is either this machine's own (its value is what this machine's files
and environment say) or the pool's (its broker service's: what its leader
published is what the pool enforces, whatever this machine's files say).
`show` prints both kinds and says which is which; a `PoolView` carries what
the pool published, or why it could not be read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import click

from fetchwork.config.loader import Config
from fetchwork.errors import UndefinedKnobError


@dataclass(frozen=True)
class PoolView:
    """The pool's knobs as its broker service published them; `published` False (with
    `why`) when there are none to show."""

    published: bool
    # Knob name (as written) -> the pool's value.
    values: Mapping[str, str] = field(default_factory=dict)
    # Who published them, as a phrase: "its leader b1, version 3".
    source: str = ""
    why: str = ""

    def value(self, name: str) -> str | None:
        upper = name.upper()
        return next((value for knob, value in self.values.items() if knob.upper() == upper),
                    None)


def _where(source: str, line: int | None) -> str:
    return f"{source}, line {line}" if line is not None else source


def _own(config: Config, name: str) -> str:
    found = config.where(name)
    return _where(found.source, found.line) if found is not None else "not defined here"


def show(config: Config, names: Sequence[str], dump: bool, show_where: bool,
         is_pool_knob: Callable[[str], bool], pool: PoolView | None) -> int:
    """Print the knobs as `fetchwork config` does; the exit status (1: a name undefined).
    `pool` is what the pool published (None: no pool knob was asked for)."""
    if dump:
        _dump(config, is_pool_knob, pool)
        return 0
    missing = 0
    for name in names:
        own: str | None
        try:
            own = config.require(name)
        except UndefinedKnobError:
            own = None
        if is_pool_knob(name) and pool is not None and pool.published:
            value = pool.value(name)
            if value is None:
                missing += 1
                click.echo(f"fetchwork config: {name} is not set by the pool ({pool.source})",
                           err=True)
                continue
            click.echo(value)
            if show_where:
                click.echo(f" # the pool's: published by {pool.source}")
                if own is not None and own != value:
                    click.echo(f" # this machine's own value {own} ({_own(config, name)}) "
                               "does not apply to the pool's jobs")
            continue
        if own is None:
            missing += 1
            click.echo(f"fetchwork config: {name} is not defined", err=True)
            continue
        click.echo(own)
        if show_where:
            click.echo(f" # at: {_own(config, name)}")
            if is_pool_knob(name) and pool is not None:
                click.echo(f" # this machine's own value: the pool's would apply, but "
                           f"{pool.why}")
    return 1 if missing else 0


def _dump(config: Config, is_pool_knob: Callable[[str], bool], pool: PoolView | None) -> None:
    """condor_config_val -dump -verbose, with the pool's values where it published them."""
    if pool is not None and pool.published:
        click.echo(f"# Knobs marked 'the pool's' are the pool's, published by {pool.source};"
                   " the others are this machine's own.")
    elif pool is not None:
        click.echo(f"# Every value is this machine's own ({pool.why}).")
    shown: set[str] = set()
    for definition, value in config.items():
        shown.add(definition.name.upper())
        pool_value = (pool.value(definition.name)
                      if pool is not None and pool.published and is_pool_knob(definition.name)
                      else None)
        if pool_value is not None:
            click.echo(f"{definition.name} = {pool_value}")
            click.echo(f" # the pool's: published by {pool.source if pool else ''}")
            click.echo(f" # this machine's own: {value} "
                       f"(at: {_where(definition.source, definition.line)})")
            continue
        click.echo(f"{definition.name} = {value}")
        click.echo(f" # at: {_where(definition.source, definition.line)}")
        if definition.raw != value:
            click.echo(f" # raw: {definition.name} = {definition.raw}")
    if pool is not None and pool.published:
        for name, value in sorted(pool.values.items()):
            if name.upper() not in shown:
                click.echo(f"{name} = {value}")
                click.echo(f" # the pool's: published by {pool.source}")
