"""Every knob the product code reads is defined once, in config/defaults.conf.

The product source (the package folders pyproject.toml maps) is scanned for
reads of the configuration: `config.get("X")`, `get_int`, `get_float`,
`get_bool`, `get_duration_s`, `get_expr`, `get_list`, `require`, and helpers
called as `helper(config, "X", ...)`. A literal name must be defined in
defaults.conf (or be one of the facts the loader detects, such as
DETECTED_CPUS); a name built at run time (`f"SLOT{n}_JOB_HOOK_KEYWORD"`) must
match a pattern defaults.conf documents (`SLOT<N>_JOB_HOOK_KEYWORD`) or knobs
it defines (`HOOK_TIMEOUT_FETCH_WORK` for `f"HOOK_TIMEOUT_{hook}"`). No read
repeats the default in Python. Failures list every offending read by file
and line.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fetchwork.config.loader import DEFAULTS_FILE, Config, detected_definitions

ROOT = Path(__file__).resolve().parents[2]
READERS = {"get", "get_int", "get_float", "get_bool", "get_duration_s", "get_expr", "get_list",
           "require"}
TYPED = READERS - {"get_list", "require"}
_CONFIG_RE = re.compile(r"(\A|\.)(config|cfg)\Z|get_config\(\)\Z")
_PLACEHOLDER_RE = re.compile(r"<[A-Za-z_]+>")


@dataclass(frozen=True)
class Read:
    """One read of a knob: where, the name (a pattern when built at run time), any default."""

    where: str
    name: str
    dynamic: bool
    default: str | None


def product_files() -> list[Path]:
    """The .py files of every package folder pyproject.toml maps."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    folders = sorted(set(project["tool"]["setuptools"]["package-dir"].values()))
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _is_config(node: ast.expr) -> bool:
    return bool(_CONFIG_RE.search(ast.unparse(node)))


def _name(node: ast.expr) -> tuple[str, bool] | None:
    """A knob name from a literal (name, False) or an f-string (pattern, True)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, False
    if isinstance(node, ast.JoinedStr):
        # Each run-time part becomes a placeholder named after its expression.
        parts = [str(part.value) if isinstance(part, ast.Constant)
                 else f"<{ast.unparse(part.value).rsplit('.', 1)[-1].upper()}>"
                 for part in node.values]
        return "".join(parts), True
    return None


def reads_in(path: Path, root: Path = ROOT) -> Iterator[Read]:
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)),
                   key=lambda node: (node.lineno, node.col_offset))
    for node in calls:
        if not node.args:
            continue
        func, args = node.func, node.args
        default: ast.expr | None = None
        if isinstance(func, ast.Attribute) and func.attr in READERS and _is_config(func.value):
            found = _name(args[0])
            if func.attr in TYPED or func.attr == "get":
                default = args[1] if len(args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "default"), None)
        elif len(args) >= 2 and _is_config(args[0]):
            found = _name(args[1])  # a helper taking (config, "NAME", default...)
            if len(args) > 2 and isinstance(args[2], ast.Constant) and args[2].value is not None:
                default = args[2]
        else:
            continue
        if found is None:
            continue
        where = f"{path.relative_to(root)}:{node.lineno}"
        yield Read(where, found[0], found[1],
                   None if default is None else ast.unparse(default))


def all_reads() -> list[Read]:
    return [read for path in product_files() for read in reads_in(path)]


def _defaults() -> tuple[Config, str]:
    text = Path(DEFAULTS_FILE).read_text("utf-8")
    return Config.from_text(text, source=DEFAULTS_FILE), text


def undefined(reads: list[Read]) -> list[str]:
    """`file:line: NAME` for each read whose knob defaults.conf does not define."""
    defaults, text = _defaults()
    detected = {definition.name.lower() for definition in detected_definitions()}
    defined = {definition.name for definition, _value in defaults.items()}
    problems = []
    for read in reads:
        if not read.dynamic:
            if read.name not in defaults and read.name.lower() not in detected:
                problems.append(f"{read.where}: {read.name} is not defined in defaults.conf")
            continue
        pieces = [re.escape(piece) for piece in _PLACEHOLDER_RE.split(read.name)]
        documented = re.compile(r"(?<![\w<>])" + _PLACEHOLDER_RE.pattern.join(pieces)
                                + r"(?![\w<>])")
        instance = re.compile(r"[A-Za-z0-9_]+".join(pieces), re.I)
        if not documented.search(text) and not any(instance.fullmatch(n) for n in defined):
            problems.append(f"{read.where}: {read.name} is neither documented nor defined "
                            "in defaults.conf")
    return problems


def repeated_defaults(reads: list[Read]) -> list[str]:
    return [f"{read.where}: {read.name} is read with a default in Python ({read.default}); "
            "read the knob alone, defaults.conf holds its default"
            for read in reads if read.default is not None]


# -- the scanner itself ------------------------------------------------------------

def test_the_scanner_finds_literal_dynamic_helper_and_defaulted_reads(tmp_path):
    sample = tmp_path / "sample.py"
    source = (
        "def f(config, self, slot):\n"
        "    config.get_int('NUM_SLOTS')\n"
        "    self.config.get_duration_s('NO_SUCH_KNOB', 5.0)\n"
        "    config.get(f'SLOT{slot}_JOB_HOOK_KEYWORD')\n"
        "    config.get(f'SLOT{slot}_NOT_DOCUMENTED')\n"
        "    helper(config, 'ALSO_MISSING', 1)\n"
        "    {}.get('NOT_A_KNOB', 1)\n")
    sample.write_text(source)
    reads = list(reads_in(sample, root=tmp_path))
    assert [(r.name, r.dynamic, r.default) for r in reads] == [
        ("NUM_SLOTS", False, None), ("NO_SUCH_KNOB", False, "5.0"),
        ("SLOT<SLOT>_JOB_HOOK_KEYWORD", True, None), ("SLOT<SLOT>_NOT_DOCUMENTED", True, None),
        ("ALSO_MISSING", False, "1")]
    problems = undefined(reads)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "NO_SUCH_KNOB is not defined in defaults.conf",
        "SLOT<SLOT>_NOT_DOCUMENTED is neither documented nor defined in defaults.conf",
        "ALSO_MISSING is not defined in defaults.conf"]
    assert [p.split(" is read")[0] for p in repeated_defaults(reads)] == [
        "sample.py:3: NO_SUCH_KNOB", "sample.py:6: ALSO_MISSING"]


# -- the tree --------------------------------------------------------------------

def test_the_scan_sees_the_tree():
    names = {read.name for read in all_reads()}
    assert {"NUM_SLOTS", "FETCHWORK_STATE_DIR", "STARTD_SHUTDOWN_GRACE"} <= names


def test_every_knob_the_code_reads_is_defined_in_defaults_conf():
    problems = undefined(all_reads())
    assert not problems, "\n" + "\n".join(problems)


def test_no_knob_read_repeats_its_default():
    problems = repeated_defaults(all_reads())
    assert not problems, "\n" + "\n".join(problems)
