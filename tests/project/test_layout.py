"""The layout docs/design.md describes: dependencies point one way between the
components and between the broker's layers, no import cycles, every package
installed, no module reaching into another's private members, and a prompt to
look for a second idea in a long module. Read from the source (no imports
run), over every package and subpackage.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Past this many lines a module likely holds a second idea: split it where that
# idea ends, or, when it is one big idea, name it in LONG_MODULES with why.
LINES_PROMPT = 800
LONG_MODULES: dict[str, str] = {}

# What each component may import (besides itself and fetchwork.errors, the
# root of the exception hierarchy). `config` is the bottom; the broker
# depends on config only; the startd never imports the broker; the submit
# side depends on the broker, never the reverse. The reference hooks (and
# only they) speak to the broker's client API.
ALLOWED = {
    "config": set(),
    "broker": {"config"},
    "hooks": {"config"},
    # The starter runs a job's file transfer in a child it forks (transferstep.py).
    "starter": {"config", "hooks", "transfer"},
    "startd": {"config", "hooks", "starter"},
    "submit": {"config", "broker", "transfer"},
    # File transfer: the chunk store and manifests over the broker's store, used by
    # the submit side and run by the starter in a forked child.
    "transfer": {"config", "broker"},
}
HOOKS_THAT_SPEAK_TO_THE_BROKER = {"fetchwork.hooks.reference", "fetchwork.hooks.brokerconn",
                                  # the rq bridge's client: the broker's URL to client factory
                                  "fetchwork.hooks.rqbridge.redisconn"}

# The broker's layers, by package (or top-level module) under fetchwork.broker.
# The store (keys, codec, states, job ads, Lua scripts) is the bottom. Each
# feature imports the store and autoclusters only, so no feature reaches into
# another. The two paths a job takes in, submission and the claim, combine
# the features they consult; the client API, the leader, the metrics and the
# command sit on top.
FEATURES = {"backfill", "dependencies", "filters", "jobpolicy", "scheduling", "userlog"}
BROKER_LAYERS: dict[str, set[str]] = {
    "": set(),
    "store": set(),
    "autoclusters": {"store"},
    "connections": {"store"},
    **{feature: {"store", "autoclusters"} for feature in FEATURES},
    "submission": {"store", "autoclusters", "connections", "dependencies", "jobpolicy",
                   "scheduling"},
    "claim": {"store", "autoclusters", "backfill", "filters", "scheduling"},
    # People, their requests and job signing: the client and the leader use it.
    "trust": {"store", "autoclusters", "connections", "submission"},
    "client": {"store", "autoclusters", "connections", "submission", "claim", "trust",
               *FEATURES},
    "leader": {"store", "autoclusters", "connections", "client", "trust", *FEATURES},
    "metrics": {"store", "connections", "client"},
    "cli": {"store", "connections", "client", "leader", "metrics", "trust"},
}


def package_dirs() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return project["tool"]["setuptools"]["package-dir"]


def product_modules() -> dict[str, Path]:
    """Module name -> file, for every module under the folders pyproject.toml maps."""
    modules: dict[str, Path] = {}
    for package, folder in package_dirs().items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            names = [package, *(part for part in parts if part != "__init__")]
            modules[".".join(names)] = path
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


def package_of(name: str, path: Path) -> str:
    return name if path.stem == "__init__" else name.rpartition(".")[0]


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def broker_layer(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


def import_edges(top_level_only: bool) -> list[tuple[str, str]]:
    modules = product_modules()
    return [(name, target) for name, path in modules.items()
            for target in imports(path, package_of(name, path), top_level_only, set(modules))
            if target in modules and target != name]


def test_every_package_is_installed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                 ["tool"]["setuptools"]["packages"])
    found = {name for name, path in product_modules().items() if path.stem == "__init__"}
    assert found == listed, ("pyproject.toml's packages differ from the folders: missing "
                             f"{sorted(found - listed)}, stale {sorted(listed - found)}")


def test_dependencies_point_one_way():
    wrong = []
    for name, target in import_edges(top_level_only=False):
        own, other = component(name), component(target)
        if own not in ALLOWED or other in ("", own, "errors") or target == "fetchwork":
            continue  # the fetchwork package itself: the CLI and the local pool
        if name.endswith(".__main__") and target == "fetchwork.cli":
            continue  # an entry point sets logging up as the `fetchwork` command does
        allowed = ALLOWED[own] | ({"broker"} if name in HOOKS_THAT_SPEAK_TO_THE_BROKER
                                  else set())
        if other not in allowed:
            wrong.append(f"{name} imports {target}")
    assert not wrong, "dependencies against docs/design.md:\n" + "\n".join(sorted(wrong))


def test_the_broker_layers_point_one_way():
    wrong = []
    for name, target in import_edges(top_level_only=False):
        if component(name) != "broker" or component(target) != "broker":
            continue
        own, other = broker_layer(name), broker_layer(target)
        assert own in BROKER_LAYERS, f"{name}: broker/{own} is in no layer of this test"
        if other != own and other not in BROKER_LAYERS[own]:
            wrong.append(f"{name} ({own}) imports {target} ({other})")
    assert not wrong, "the broker's layers (docs/design.md):\n" + "\n".join(sorted(wrong))


def test_no_import_cycles():
    graph: dict[str, set[str]] = {name: set() for name in product_modules()}
    for name, target in import_edges(top_level_only=True):
        graph[name].add(target)
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


def test_long_modules_hold_one_idea():
    long = []
    for name, path in product_modules().items():
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > LINES_PROMPT and name not in LONG_MODULES:
            long.append(f"{path.relative_to(ROOT)}: {count} lines")
    assert not long, (f"modules over {LINES_PROMPT} lines: split where an idea ends, or name "
                      "the module in LONG_MODULES with the one idea it holds:\n"
                      + "\n".join(long))


# Private names of other libraries that are their public API (namedtuple's
# _replace, os._exit: leave a forked child without the interpreter's teardown).
FOREIGN_PRIVATE_API = {"_replace", "_asdict", "_fields", "_exit"}


def own_private_names(tree: ast.Module) -> set[str]:
    """The `_names` a module defines: its functions, classes, attributes it sets."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def private_reaches(source: str) -> list[tuple[int, str]]:
    """(line, expression) of each reach into a private member the module does not
    define itself (`other._name`; `self._name`, `cls._name` and `super()._name`
    are the class's own or its parent's)."""
    tree = ast.parse(source)
    own = own_private_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or attr.startswith("__") or attr in own:
            continue
        if attr in FOREIGN_PRIVATE_API:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "super":
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def test_a_reach_into_another_modules_private_member_is_found():
    source = ("import os\nfrom x import y\n\n\nclass A:\n    _kept = 1\n\n"
              "    def f(self, other):\n        os._exit(0)\n"
              "        return self._kept, other._kept, super()._base, y._hidden\n")
    assert private_reaches(source) == [(10, "y._hidden")]


def test_no_module_touches_another_modules_private_members():
    wrong = [f"{path.relative_to(ROOT)}:{line}: {text}"
             for path in product_modules().values()
             for line, text in private_reaches(path.read_text(encoding="utf-8"))]
    assert not wrong, ("modules reaching into another module's private members (make "
                       "the member public, or move the code to its module):\n"
                       + "\n".join(wrong))
