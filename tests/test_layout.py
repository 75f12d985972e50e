"""The layout DESIGN.md promises: dependencies point one way, no import cycles,
no module over 400 lines. Read from the source (no imports run)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400

# What each component may import (besides itself and fetchwork.errors, the
# root of the exception hierarchy). `config` is the bottom; the broker
# depends on config only; the startd never imports the broker; the submit
# side depends on the broker, never the reverse. The reference hooks (and
# only they) speak to the broker's client API.
ALLOWED = {
    "config": set(),
    "broker": {"config"},
    "hooks": {"config"},
    "starter": {"config", "hooks"},
    "startd": {"config", "hooks", "starter"},
    "submit": {"config", "broker"},
}
HOOKS_THAT_SPEAK_TO_THE_BROKER = {"fetchwork.hooks.reference", "fetchwork.hooks.brokerconn"}


def product_modules() -> dict[str, Path]:
    """Module name -> file, for every package pyproject.toml installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    modules: dict[str, Path] = {}
    for package, folder in project["tool"]["setuptools"]["package-dir"].items():
        for path in sorted((ROOT / folder).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def imports(path: Path, package: str, top_level_only: bool, known: set[str]) -> set[str]:
    """The fetchwork modules `path` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            # `from package import module` depends on the module, not the package.
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {base})
    return {name for name in found if name.startswith("fetchwork")}


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_dependencies_point_one_way():
    modules = product_modules()
    wrong = []
    for name, path in modules.items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        own = component(name)
        if own not in ALLOWED:
            continue  # the fetchwork package itself: the CLI and the local pool
        for target in imports(path, package, top_level_only=False, known=set(modules)):
            other = component(target)
            if target not in modules or other in ("", own, "errors") or target == "fetchwork":
                continue
            if name.endswith(".__main__") and target == "fetchwork.cli":
                continue  # an entry point sets logging up as the `fetchwork` command does
            allowed = ALLOWED[own] | ({"broker"} if name in HOOKS_THAT_SPEAK_TO_THE_BROKER
                                      else set())
            if other not in allowed:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "dependencies against DESIGN.md:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles():
    modules = product_modules()
    graph = {}
    for name, path in modules.items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        graph[name] = {t for t in imports(path, package, top_level_only=True, known=set(modules))
                       if t in modules and t != name}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(trail[trail.index(nxt):] + [node, nxt])
                              if nxt in trail else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_is_over_the_size_limit():
    long = [f"{path.relative_to(ROOT)}: {count} lines"
            for path in product_modules().values()
            if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines (split them by idea):\n" + "\n".join(long)
