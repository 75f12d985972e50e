"""`fetchwork config`: show knob values and where they came from."""

from __future__ import annotations

import click

from fetchwork.config.loader import Config
from fetchwork.errors import UndefinedKnobError


def _where(source: str, line: int | None) -> str:
    return f"{source}, line {line}" if line is not None else source


@click.command("config")
@click.argument("names", nargs=-1)
@click.option("--dump", is_flag=True, help="Print every knob with the file and line that set it.")
@click.option("--verbose", "-V", "show_where", is_flag=True,
              help="With NAMES, also print where each value was set.")
def config_command(names: tuple[str, ...], dump: bool, show_where: bool) -> None:
    """Print the fully expanded value of each configuration knob NAME.

    Names are case-insensitive. Exits 1 when a name is not defined. With
    --dump, prints every knob, its value, the file and line that set it and
    the text as written (as condor_config_val -dump -verbose does).
    """
    config = Config.load()
    if dump:
        for definition, value in config.items():
            click.echo(f"{definition.name} = {value}")
            click.echo(f" # at: {_where(definition.source, definition.line)}")
            if definition.raw != value:
                click.echo(f" # raw: {definition.name} = {definition.raw}")
        return
    if not names:
        raise click.UsageError("name a knob, or use --dump")
    missing = []
    for name in names:
        try:
            value = config.require(name)
        except UndefinedKnobError:
            missing.append(name)
            click.echo(f"fetchwork config: {name} is not defined", err=True)
            continue
        click.echo(value)
        if show_where:
            found = config.where(name)
            assert found is not None
            click.echo(f" # at: {_where(found.source, found.line)}")
    if missing:
        raise SystemExit(1)

