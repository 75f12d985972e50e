"""Where configuration comes from, and the typed view of it (`Config`).

Sources, each overriding the one before:

1. detected facts: `DETECTED_CPUS`, `DETECTED_MEMORY` (MB), `HOSTNAME`,
   `FULL_HOSTNAME`, `OPSYS`, `ARCH` (as HTCondor provides them);
2. the packaged `defaults.conf`, which names every knob fetchwork reads;
3. `<FETCHWORK_STATE_DIR>/pool.conf` when `fetchwork up` wrote one there;
4. the file named by `FETCHWORK_CONFIG`, else `/etc/fetchwork/fetchwork.conf`
   when it exists;
5. the environment: `FETCHWORK_<X>` for knobs whose own name starts with
   `FETCHWORK_` (so `FETCHWORK_BROKER=redis://...` works as users expect),
   then `_FETCHWORK_<NAME>` for any knob, as HTCondor's `_CONDOR_<NAME>`.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

import classad2
import psutil

from fetchwork.config import convert, memo
from fetchwork.config.language import Definition, define, expand, lookup, parse
from fetchwork.errors import ConfigError, UndefinedKnobError

DEFAULTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "defaults.conf")
SYSTEM_CONFIG = "/etc/fetchwork/fetchwork.conf"
CONFIG_ENV = "FETCHWORK_CONFIG"
OVERRIDE_PREFIX = "_FETCHWORK_"
# Written into the state directory by `fetchwork up`; read after defaults.conf.
POOL_FILE = "pool.conf"
DETECTED = "<detected>"
ENVIRONMENT = "<environment>"
T = TypeVar("T")


def environ_without_config(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: this process's) less every variable fetchwork reads as
    configuration (`FETCHWORK_*`, `_FETCHWORK_*`): for a child that must see only
    the configuration it is given, such as the demo's private pool."""
    env = os.environ if environ is None else environ
    return {name: value for name, value in env.items()
            if not name.startswith(("FETCHWORK_", OVERRIDE_PREFIX))}


def detected_definitions() -> list[Definition]:
    """Facts about this machine, available as macros and to the startd."""
    hostname = socket.gethostname()
    try:
        full = socket.getfqdn()
    except OSError:  # pragma: no cover - resolver trouble
        full = hostname
    facts = {
        "DETECTED_CPUS": str(os.cpu_count() or 1),
        "DETECTED_CORES": str(psutil.cpu_count(logical=False) or os.cpu_count() or 1),
        "DETECTED_MEMORY": str(psutil.virtual_memory().total // (1024 * 1024)),
        "HOSTNAME": hostname.split(".")[0],
        "FULL_HOSTNAME": full,
        "OPSYS": platform.system().upper(),
        "ARCH": platform.machine().upper(),
    }
    return [Definition(name, value, DETECTED, None) for name, value in facts.items()]


def _read_file(path: str, required: bool) -> tuple[str, str] | None:
    if not required and not os.path.exists(path):
        return None
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        return raw.decode("utf-8"), path
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"byte 0x{raw[exc.start]:02x} is not UTF-8 text; configuration "
                          "files must be UTF-8", path, line) from exc


def _noting(sources: memo.Sources) -> Callable[[str, bool], tuple[str, str] | None]:
    """`_read_file` that records each path it looks at in `sources`."""
    def read(path: str, required: bool) -> tuple[str, str] | None:
        sources.note(path)
        return _read_file(path, required)
    return read


def _parse_file(path: str, defined: dict[str, Definition], sources: memo.Sources) -> None:
    read = _noting(sources)
    found = read(path, True)
    assert found is not None
    parse(found[0], found[1], defined, read)


def _merge(detected: list[Definition], env: Mapping[str, str], config_file: str | None,
           use_defaults: bool, pool_file: str | None,
           sources: memo.Sources) -> dict[str, Definition]:
    defined: dict[str, Definition] = {}
    for definition in detected:
        define(defined, definition)
    if use_defaults:
        _parse_file(DEFAULTS_FILE, defined, sources)
    if pool_file is not None:
        _parse_file(pool_file, defined, sources)
    path = config_file if config_file is not None else env.get(CONFIG_ENV) or None
    if path is not None:
        try:
            _parse_file(path, defined, sources)
        except OSError as exc:
            raise ConfigError(f"cannot read the configuration file: {exc.strerror} "
                              f"(set {CONFIG_ENV} to a readable file)", path) from exc
    elif sources.note(SYSTEM_CONFIG) is not None:
        _parse_file(SYSTEM_CONFIG, defined, sources)
    for name, value in sorted(env.items()):
        if name.startswith("FETCHWORK_") and name != CONFIG_ENV:
            define(defined, Definition(name, value, f"{ENVIRONMENT} {name}", None))
    for name, value in sorted(env.items()):
        if name.startswith(OVERRIDE_PREFIX) and len(name) > len(OVERRIDE_PREFIX):
            knob = name[len(OVERRIDE_PREFIX):]
            define(defined, Definition(knob, value, f"{ENVIRONMENT} {name}", None))
    return defined


class Config:
    """The merged configuration: expanded lookups and typed accessors."""

    def __init__(self, definitions: Mapping[str, Definition],
                 environ: Mapping[str, str] | None = None):
        self._defined = dict(definitions)
        self._environ = dict(os.environ if environ is None else environ)
        self._expanded: dict[str, str] = {}

    # -- building ---------------------------------------------------------

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None,
             config_file: str | None = None, use_defaults: bool = True) -> Config:
        """Read every source in order. `config_file` overrides `FETCHWORK_CONFIG`.

        When the state directory holds a pool file (written by `fetchwork up`),
        it is read right after the defaults, so a local pool is found with no
        configuration while the admin's file and the environment still win.
        The configuration (immutable, with the knobs it has expanded) is remembered
        (memo.py) and given back while no file it read changed.
        """
        env = dict(os.environ if environ is None else environ)
        key = memo.inputs_key(env, config_file, use_defaults, DEFAULTS_FILE, SYSTEM_CONFIG,
                              socket.gethostname())
        config = memo.remembered(key)
        if config is None:
            sources = memo.Sources()
            config = cls(cls._merge_all(env, config_file, use_defaults, sources), env)
            memo.remember(key, sources, config)
        return config

    @classmethod
    def _merge_all(cls, env: dict[str, str], config_file: str | None, use_defaults: bool,
                   sources: memo.Sources) -> dict[str, Definition]:
        detected = detected_definitions()  # once: the resolver can be slow
        defined = _merge(detected, env, config_file, use_defaults, None, sources)
        if use_defaults:
            state_dir = cls(defined, env).get("FETCHWORK_STATE_DIR")
            pool_file = os.path.join(state_dir, POOL_FILE) if state_dir else None
            if pool_file and sources.note(pool_file) is not None and os.path.isfile(pool_file):
                defined = _merge(detected, env, config_file, use_defaults, pool_file, sources)
        return defined

    @classmethod
    def from_text(cls, text: str, source: str = "<text>",
                  environ: Mapping[str, str] | None = None) -> Config:
        """A configuration from one text alone (no defaults, no files): for tools and tests."""
        defined: dict[str, Definition] = {}
        parse(text, source, defined, _read_file)
        return cls(defined, environ if environ is not None else {})

    def with_values(self, **values: object) -> Config:
        """A copy with some knobs set (source `<override>`)."""
        defined = dict(self._defined)
        for name, value in values.items():
            define(defined, Definition(name, str(value), "<override>", None))
        return Config(defined, self._environ)

    # -- plain lookups ----------------------------------------------------

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._defined

    def where(self, name: str) -> Definition | None:
        """The definition in force for `name` (file, line, raw text), or None."""
        return self._defined.get(name.lower())

    def get(self, name: str, default: str | None = None) -> str | None:
        """The expanded value, or `default` when nothing defines `name`."""
        try:
            return self.require(name)
        except UndefinedKnobError:
            return default

    def require(self, name: str) -> str:
        """The expanded value; UndefinedKnobError when nothing defines `name`."""
        # A configuration never changes: each knob is expanded once.
        found = self._expanded.get(name)
        if found is None:
            found = self._expanded[name] = lookup(name, self._defined, self._environ)
        return found

    def expand(self, text: str) -> str:
        """Expand macros in arbitrary text against this configuration."""
        return expand(text, self._defined, self._environ)

    def items(self) -> Iterator[tuple[Definition, str]]:
        """Every definition in force, sorted by name, with its expanded value."""
        for key in sorted(self._defined):
            definition = self._defined[key]
            try:
                value = self.require(key)
            except ConfigError as exc:
                value = f"<error: {exc}>"
            yield definition, value

    # -- typed lookups ----------------------------------------------------

    def _typed(self, name: str, convert_fn: Callable[[str], T], default: T | None) -> T:
        text = self.get(name)
        if text is None or not text.strip():
            if default is not None:
                return default
            definition = self.where(name)
            if definition is None:
                raise UndefinedKnobError(f"{name} is not defined")
            raise ConfigError(f"{name} is empty", definition.source, definition.line)
        try:
            return convert_fn(text)
        except ValueError as exc:
            definition = self.where(name)
            assert definition is not None
            raise ConfigError(f"{name}: {exc}", definition.source, definition.line) from exc

    def get_int(self, name: str, default: int | None = None) -> int:
        return self._typed(name, convert.to_int, default)

    def get_float(self, name: str, default: float | None = None) -> float:
        return self._typed(name, convert.to_float, default)

    def get_bool(self, name: str, default: bool | None = None) -> bool:
        return self._typed(name, convert.to_bool, default)

    def get_duration_s(self, name: str, default: float | None = None) -> float:
        return self._typed(name, convert.to_duration_s, default)

    def get_expr(self, name: str, default: str | None = None) -> classad2.ExprTree:
        """A ClassAd expression knob, parsed; `default` is expression text."""
        fallback = convert.to_expr(default) if default is not None else None
        return self._typed(name, convert.to_expr, fallback)

    def get_list(self, name: str) -> list[str]:
        return convert.to_list(self.get(name) or "")


_current: Config | None = None


def get_config() -> Config:
    """The process's configuration, loaded on first use."""
    global _current
    if _current is None:
        _current = Config.load()
    return _current


def reload_config() -> Config:
    """Read every source again (SIGHUP); on error the previous configuration stays."""
    global _current
    _current = Config.load()
    return _current
