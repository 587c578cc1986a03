"""The shape of the source tree: sizes, import direction and privacy of names.

These are the rules a newcomer relies on to find things (see the README's layout table): no
module over 600 lines and no function over 80 outside the studies, no import circle (imports
inside functions included), and no module reaching into another package's private names.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import dpstream

ROOT = Path(dpstream.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


MODULES = _modules()


def _package(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str) -> list[tuple[str, str]]:
    """(module, imported name) for every ``from dpstream... import`` and ``import dpstream...`` in ``name``."""
    found = []
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(name).split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found += [(module, alias.name) for alias in node.names if module.startswith("dpstream")]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.startswith("dpstream")]
    return found


def _edges(name: str) -> set[str]:
    targets = set()
    for module, imported in _imports(name):
        full = f"{module}.{imported}"
        targets.add(full if full in MODULES else module)
    return targets & set(MODULES)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _studies(name: str) -> bool:
    return name.startswith("dpstream.evaluation")


def test_no_module_is_too_long():
    long = {name: len(path.read_text().splitlines()) for name, path in MODULES.items() if not _studies(name)}
    assert {name: n for name, n in long.items() if n > MAX_MODULE_LINES} == {}


def test_no_function_is_too_long():
    long = []
    for name, path in MODULES.items():
        if _studies(name):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert long == []


def test_no_import_circle():
    assert _cycles({name: _edges(name) for name in MODULES}) == []


def test_no_private_name_crosses_a_package():
    crossing = []
    for name in MODULES:
        for module, imported in _imports(name):
            if not imported.startswith("_") or imported.startswith("__") or module not in MODULES:
                continue
            if _package(module) != _package(name):
                crossing.append(f"{name} imports {imported} from {module}")
    assert crossing == []


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set(), "c": {"b"}}, []),
])
def test_the_circle_finder_finds_circles(edges, expected):
    assert _cycles(edges) == expected


def test_command_modules_share_code_through_underscore_modules_only():
    cli = [name for name in MODULES if name.startswith("dpstream.cli.")]
    commands = {name for name in cli if not name.rpartition(".")[2].startswith("_")}
    crossing = [f"{name} imports {target}" for name in cli for target in _edges(name) if target in commands - {name}]
    assert crossing == []


def test_every_import_follows_the_readmes_layout_table():
    """The README's layout table lists the top-level modules in the order data flows: each imports from its own
    row and the rows above it only."""
    readme = (Path(__file__).parents[1] / "README.md").read_text().split("## Layout", 1)[1]
    rows = [name.rstrip("/").removesuffix(".py") for name in re.findall(r"^\| `([^`]+)` \|", readme, re.M)]
    top = {name.split(".")[1] for name in MODULES if name != "dpstream"}
    assert set(rows) == top, "the layout table lists every top-level module and package once"
    place = {name: index for index, name in enumerate(rows)}
    upward = sorted({(name.split(".")[1], target.split(".")[1]) for name in MODULES if name != "dpstream"
                     for target in _edges(name) if target != "dpstream"
                     and place[target.split(".")[1]] > place[name.split(".")[1]]})
    assert upward == []
