"""The package's layout: a core, three wings, no circle and no arrow up.

``grpo_helpers`` is one module per idea (``docs/package.md``, "How the code is
organised"). These tests read the source with ``ast`` (nothing is imported, so an
import inside a function counts as much as one at the top): every import of a
module of the package is an arrow.

* The layers, lowest first: the environment and the atomic writer; the local
  engine (``local/``); the core the notebooks teach, at the top of the package;
  ``results/``; ``classroom/`` and ``trl/`` side by side; the command line. An arrow
  goes down or stays in its wing: never up, never between the two top wings.
* The core reads as a path, in the order the data flows (:data:`CORE_PATH`): a
  step imports only steps before it.
* ``local/`` reads the settings and writes atomically; it never imports the
  rewards, the prompts or anything else of the core.
* No circle, and no module over 600 lines whose docstring does not say why.
* The tests mirror the package: each module that defines something has a test file
  named for it in its wing's folder (``grpo_helpers/local/forward.py``: its tests
  in ``tests/local/test_forward.py``, or ``test_forward_<aspect>.py``), or is
  listed in :data:`TESTED_THROUGH` with the file that tests it; a test file of a
  wing names one of its modules; no test file is over 800 lines
  (:data:`LONG_TEST_FILES` apart).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = "grpo_helpers"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

#: Lines above which a module's docstring must say why it stays whole.
MAX_LINES = 600

#: What the local engine may use outside ``local/``: the environment it reads and
#: the writer of its checkpoints and model cache.
BASE = ("settings", "atomic_write")
#: The core the notebooks teach, at the top of the package (``local/`` apart).
CORE = (
    "advantages",
    "arithmetic",
    "calculator",
    "checks",
    "config",
    "knobs",
    "data",
    "datum",
    "engines",
    "plotting",
    "presets",
    "prompts",
    "provenance",
    "rewards",
    "rollout",
    "run_checks",
    "run_files",
    "step",
    "step_math",
    "tool_rollout",
    "tracking",
    "training",
)


#: The core in the order the data flows: a step may import only the steps before it.
CORE_PATH = (
    "data",
    "prompts",
    "rewards",
    "advantages",
    "datum",
    "rollout",
    "tool_rollout",
    "step_math",
    "step",
    "training",
)


#: The command line: it reaches every wing, and nothing imports it but __main__.
DOOR = ("cli", "command_settings", "__main__")


#: Each layer, lowest first, with the layers (or wings) below it that it may import.
#: ``classroom`` and ``trl`` stand side by side: both read ``results`` (a check of
#: notebook 07's exercises compares with ``results.stats``; an exported model's
#: card quotes its held-out score), neither reads the other.
MAY_IMPORT = {
    "base": set(),
    "local": {"base"},
    "core": {"base", "local"},
    "results": {"base", "local", "core"},
    "classroom": {"base", "local", "core", "results"},
    "trl": {"base", "local", "core", "results"},
    "door": {"base", "local", "core", "results", "classroom", "trl"},
}


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


def layer(module: str, package: str = PACKAGE) -> str:
    """The layer of a dotted module name of the package (``KeyError``: none)."""
    parts = module.split(".")[1:]
    if not parts:
        return "core"  # the package's face imports nothing
    if parts[0] in ("local", "results", "classroom", "trl"):
        return parts[0]
    name = parts[0]
    if name in BASE:
        return "base"
    if name in CORE:
        return "core"
    if name in DOOR:
        return "door"
    raise KeyError(f"{module} is in no layer: add it to CORE, or move it to a wing")


def upward_arrows(graph: dict[str, dict[str, int]]) -> list[str]:
    """``a -> b (line n)`` for each import whose target's layer ``a`` may not use."""
    found = []
    for source, targets in sorted(graph.items()):
        for target, line in sorted(targets.items()):
            here, there = layer(source), layer(target)
            if there != here and there not in MAY_IMPORT[here]:
                found.append(f"{source} ({here}) -> {target} ({there}), line {line}")
    return found


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


def test_every_module_stands_in_one_layer():
    unplaced = []
    for name in module_names():
        try:
            layer(name)
        except KeyError as error:
            unplaced.append(str(error))
    assert not unplaced, "\n".join(unplaced)
    wings = {layer(name) for name in module_names()}
    assert wings == set(MAY_IMPORT), wings


def test_no_import_runs_up_or_across_the_wings():
    found = upward_arrows(import_graph(module_names()))
    assert not found, "imports against the layers:\n  " + "\n  ".join(found)


def test_the_layer_rule_catches_an_arrow_up_and_one_across():
    graph = {
        "grpo_helpers.rewards": {"grpo_helpers.results.stats": 3},
        "grpo_helpers.trl.mapping": {"grpo_helpers.classroom.course": 7},
        "grpo_helpers.classroom.self_checks": {"grpo_helpers.results.stats": 5},
        "grpo_helpers.local.models": {"grpo_helpers.settings": 2},
    }
    assert upward_arrows(graph) == [
        "grpo_helpers.rewards (core) -> grpo_helpers.results.stats (results), line 3",
        "grpo_helpers.trl.mapping (trl) -> grpo_helpers.classroom.course (classroom),"
        " line 7",
    ]


def test_the_core_reads_as_a_path():
    graph = import_graph(module_names())
    step = {f"{PACKAGE}.{name}": i for i, name in enumerate(CORE_PATH)}
    back = [
        f"{source} -> {target} (line {line})"
        for source, targets in graph.items()
        if source in step
        for target, line in targets.items()
        if target in step and step[target] > step[source]
    ]
    assert not back, "the core's path runs back:\n  " + "\n  ".join(back)


def test_the_local_engine_reads_settings_not_the_rewards_or_the_prompts():
    graph = import_graph(module_names())
    outside = {
        f"{source} -> {target}"
        for source, targets in graph.items()
        if source.startswith(f"{PACKAGE}.local")
        for target in targets
        if not target.startswith(f"{PACKAGE}.local")
    }
    allowed = {f"{PACKAGE}.{name}" for name in BASE}
    assert all(arrow.split(" -> ")[1] in allowed for arrow in outside), outside
    assert not any(arrow.endswith((".rewards", ".prompts")) for arrow in outside), (
        outside
    )


def test_no_test_imports_a_bench_script():
    """A test runs a bench as its users do (``tests/helpers/benches.py``); what it needs
    from one lives in the package."""
    bench = Path(__file__).resolve().parents[2] / "bench"
    scripts = {path.stem for path in bench.glob("*.py")}
    tests = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted(tests.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [
                f"{path.relative_to(tests)}: {n}"
                for n in names
                if n.split(".")[0] in scripts
            ]
    # the one helper that reaches bench/ runs its scripts in a process of their own
    helper = (tests / "helpers" / "benches.py").read_text()
    assert "subprocess.run" in helper and "importlib" not in helper
    assert not found, found


# --- the package's public face -------------------------------------------------


def test_package_exports_and_import_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, grpo_helpers as g\n"
        "assert g.__all__ == ['advantages', 'data', 'datum', 'prompts', 'rewards']\n"
        "assert all(getattr(g, m).__name__ == 'grpo_helpers.' + m for m in "
        "['advantages', 'data', 'datum', 'prompts', 'rewards'])\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,  # a guard against a hang
    )
    assert result.returncode == 0, result.stderr


# --- the tests mirror the package ----------------------------------------------

TESTS = Path(__file__).resolve().parents[1]

#: Lines above which a test file is split along the modules it tests.
MAX_TEST_LINES = 800
#: Test files allowed over :data:`MAX_TEST_LINES` for now, and why.
LONG_TEST_FILES: dict[str, str] = {}
#: Modules without a test file of their own: the test file (under ``tests/``) that
#: tests each, and how.
TESTED_THROUGH = {
    "grpo_helpers": (
        "project/test_layout.py",
        "the package's face: its exports, imported in a fresh process "
        "(test_package_exports_and_import_is_light)",
    ),
    "grpo_helpers.local": (
        "local/test_service.py",
        "the local engine's face: the client classes it hands out on first use",
    ),
    "grpo_helpers.provenance": (
        "core/test_training.py",
        "the provenance.json a run writes and a resume on another model file "
        "refused; results/test_recorded_runs.py, the model of a recorded run",
    ),
    "grpo_helpers.run_files": (
        "core/test_training.py",
        "the loops write, resume and read run directories; core/test_cli.py "
        "refuses damaged ones",
    ),
    "grpo_helpers.local.counters": (
        "local/test_forward.py",
        "every comparison of two paths asserts which path the counters saw "
        "(local/test_prompt_cache.py too)",
    ),
    "grpo_helpers.local.plain": (
        "classroom/test_self_checks.py",
        "notebook 04's plain-PyTorch step runs on it (grpo_step_by_hand)",
    ),
    "grpo_helpers.classroom.plain_step": (
        "classroom/test_self_checks.py",
        "plain_step_check fails grpo_step_by_hand's wrong answers",
    ),
    "grpo_helpers.results.heldout": (
        "trl/test_export_peft.py",
        "the held-out result of an export's model card; notebooks 07 and 08 call it",
    ),
    "grpo_helpers.trl.export_card": (
        "trl/test_export_peft.py",
        "the model card of an exported adapter or merged model",
    ),
    "grpo_helpers.trl.export_checks": (
        "trl/test_export_peft.py",
        "an export that disagrees with the engine is refused and not written",
    ),
    "grpo_helpers.trl.export_readme": (
        "trl/test_export.py",
        "what the exported README says the temperature and the KL change",
    ),
}


def defines_something(path: Path) -> bool:
    """Whether a module defines a function or a class (an ``__init__`` that only
    imports, and ``__main__``, need no test file of their own)."""
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return any(isinstance(node, kinds) for node in tree.body)


def folder_of(module: str) -> str:
    """The folder under ``tests/`` of a module's tests: its wing, or ``core``."""
    here = layer(module)
    return "core" if here in ("base", "core", "door") else here


def mirror(tests: Path, modules: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``({module: its test files}, test files of a wing that name no module)``.

    ``test_<name>.py`` and ``test_<name>_<aspect>.py`` in the module's folder name
    it; of two names that fit (``export``, ``export_peft``) the longer wins."""
    by_folder: dict[str, dict[str, str]] = defaultdict(dict)
    for module in modules:
        by_folder[folder_of(module)][module.rsplit(".", 1)[-1]] = module
    found: dict[str, list[str]] = defaultdict(list)
    strays = []
    for folder, names in sorted(by_folder.items()):
        for path in sorted((tests / folder).glob("test_*.py")):
            stem = path.stem.removeprefix("test_")
            fits = [n for n in names if stem == n or stem.startswith(n + "_")]
            where = f"{folder}/{path.name}"
            if fits:
                found[names[max(fits, key=len)]].append(where)
            else:
                strays.append(where)
    return dict(found), strays


def untested(
    tests: Path, modules: list[str], through: dict[str, tuple[str, str]]
) -> list[str]:
    """What breaks the mirror: a module with neither a test file nor an entry in
    ``through``, an entry naming a missing file, or one for a module that has a
    test file of its own (or is no module)."""
    found, _ = mirror(tests, modules)
    problems = [
        f"{m}: no tests/{folder_of(m)}/test_{m.rsplit('.', 1)[-1]}.py"
        for m in modules
        if m not in found and m not in through
    ]
    for module, (path, _) in sorted(through.items()):
        if module not in modules:
            problems.append(f"{module}: listed as tested through {path}, no module")
        elif module in found:
            problems.append(f"{module}: listed, but has {found[module]}")
        elif not (tests / path).is_file():
            problems.append(f"{module}: tested through {path}, which does not exist")
    return problems


def modules_to_test() -> list[str]:
    return [name for name, path in module_names().items() if defines_something(path)]


def test_every_module_has_a_test_file_named_for_it():
    modules = modules_to_test()
    assert len(modules) > 50  # the walker read the package
    problems = untested(TESTS, modules, TESTED_THROUGH)
    assert not problems, "\n".join(problems)


def test_every_test_file_of_a_wing_names_one_of_its_modules():
    _, strays = mirror(TESTS, modules_to_test())
    assert not strays, (
        "name each after the module whose behaviour it asserts "
        "(tests/<wing>/test_<module>[_<aspect>].py): " + ", ".join(strays)
    )


def test_the_mirror_rule_catches_a_new_module_without_tests(tmp_path):
    tests = tmp_path / "tests"
    for folder in ("core", "local", "trl"):
        (tests / folder).mkdir(parents=True)
    for name in (
        "core/test_data.py",
        "local/test_forward_shared.py",
        "trl/test_export_peft.py",
        "core/test_misc.py",
    ):
        (tests / name).write_text("")
    modules = [
        "grpo_helpers.data",
        "grpo_helpers.local.forward",
        "grpo_helpers.trl.export",
        "grpo_helpers.trl.export_peft",
        "grpo_helpers.rewards",
    ]
    found, strays = mirror(tests, modules)
    assert found == {
        "grpo_helpers.data": ["core/test_data.py"],
        "grpo_helpers.local.forward": ["local/test_forward_shared.py"],
        "grpo_helpers.trl.export_peft": ["trl/test_export_peft.py"],
    }
    assert strays == ["core/test_misc.py"]
    through = {"grpo_helpers.trl.export": ("trl/test_export_peft.py", "its card")}
    assert untested(tests, modules, through) == [
        "grpo_helpers.rewards: no tests/core/test_rewards.py"
    ]
    stale = {**through, "grpo_helpers.data": ("core/test_data.py", "")}
    assert untested(tests, modules, stale)[-1].startswith("grpo_helpers.data: listed")


def test_no_test_file_is_over_800_lines():
    """A test file over 800 lines is split along the modules it tests (a file
    allowed over it would be listed in ``LONG_TEST_FILES`` with its reason)."""
    long = {
        path.relative_to(TESTS).as_posix(): lines
        for path in sorted(TESTS.rglob("*.py"))
        if (lines := path.read_text().count("\n")) > MAX_TEST_LINES
    }
    assert set(long) <= set(LONG_TEST_FILES), {
        name: lines for name, lines in long.items() if name not in LONG_TEST_FILES
    }
    assert all((TESTS / name).is_file() for name in LONG_TEST_FILES)


def package_map(text: str) -> dict[str, list[str]]:
    """``{module: the test files its row names}`` from the tables of
    ``docs/package.md`` (rows whose first cell is a module in backquotes and whose
    last cell names test files under ``tests/``, "through" one or not)."""
    rows = {}
    table = None
    for line in text.splitlines():
        if line.startswith("| module |"):
            table = "local" if "taught in" not in line and "used in" not in line else ""
            continue
        if not line.startswith("| `") or table is None:
            table = None if not line.startswith("|") else table
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        name = cells[0].strip("`").replace("/", ".")
        module = ".".join(filter(None, [PACKAGE, table, name]))
        files = re.findall(
            r"`((?:core|local|results|classroom|trl|notebooks|project)"
            r"/test_[a-z0-9_]+)",
            cells[-1],
        )
        rows[module] = [f"{f}.py" for f in files]
    return rows


def test_the_package_map_names_every_module_and_its_tests():
    """``docs/package.md``'s map follows the package: one row per module that
    defines something (the packages' faces apart), naming the file of its tests
    (or the file it is tested through), and only test files that exist."""
    text = (TESTS.parent / "docs" / "package.md").read_text()
    rows = package_map(text)
    modules = [m for m in modules_to_test() if module_names()[m].name != "__init__.py"]
    assert sorted(rows) == sorted(modules), set(rows) ^ set(modules)
    found, _ = mirror(TESTS, modules)
    wrong = {}
    for module, named in rows.items():
        want = found.get(module) or [TESTED_THROUGH[module][0]]
        missing = [f for f in named if not (TESTS / f).is_file()]
        if not set(named) & set(want) or missing:
            wrong[module] = (named, want)
    assert not wrong, wrong
