"""The package's layout: no import circle, no oversized module without a reason.

``grpo_helpers`` is one module per idea (README, "How the code is organised"). These
tests read the source with ``ast`` (nothing is imported, so an import inside a
function counts as much as one at the top): every import of a module of the
package is an arrow, and no arrow may lead back to where it started.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = "grpo_helpers"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: Lines above which a module's docstring must say why it stays whole.
MAX_LINES = 600


def module_names(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """``{dotted module name: file}`` for every module of the package."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an ``import`` or ``from ... import`` statement reaches."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1 packages
        anchor = module.split(".")
        if not is_package:
            anchor = anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    # ``from package import name``: the submodule when there is one, else the
    # package itself (resolved against the known modules by the caller).
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """``{module: {imported module: line of the first such import}}``, inside the
    package only, imports inside functions and ``if TYPE_CHECKING`` included."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            targets = imported(node, name, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom) and targets:
                *submodules, base = targets
                found = [t for t in submodules if t in modules]
                # Names that are not submodules come from the base module itself.
                if len(found) < len(submodules) and base in modules:
                    found.append(base)
                targets = found
            for target in targets:
                # ``import grpo_helpers.local.models`` reaches that module.
                if target in modules and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    arrows = [
        f"  {a} -> {b} (line {graph[a][b]})"
        for a in component
        for b in sorted(graph[a])
        if b in members
    ]
    return "circle of " + ", ".join(component) + ":\n" + "\n".join(arrows)


def test_the_walker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from ..a import f\nimport pkg.c\n")
    (pkg / "c.py").write_text("from pkg import a, name_of_the_package\n")
    graph = import_graph(module_names(pkg, "pkg"))
    assert graph["pkg.a"] == {"pkg.sub.b": 2}
    assert graph["pkg.sub.b"] == {"pkg.a": 1, "pkg.c": 2}
    assert graph["pkg.sub"] == {"pkg.sub.b": 1}
    assert graph["pkg.c"] == {"pkg.a": 1, "pkg": 1}
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_grpo_helpers_has_no_import_circle():
    graph = import_graph(module_names())
    assert len(graph) > 30  # the walker read the package
    found = cycles(graph)
    assert not found, "\n".join(describe(c, graph) for c in found)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_a_module_over_600_lines_says_why_it_stays_whole():
    unexplained = [
        f"{name} ({lines} lines)"
        for name, path in module_names().items()
        if (lines := path.read_text().count("\n")) > MAX_LINES
        and not re.search(r"\b(stays whole|stay together)\b", _docstring(path))
    ]
    assert not unexplained, (
        f"over {MAX_LINES} lines: split by idea, or say in the module's docstring "
        "why it stays whole: " + ", ".join(unexplained)
    )
