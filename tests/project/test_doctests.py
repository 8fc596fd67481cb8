"""The examples in ``grpo_helpers``' docstrings hold (issue 38).

Every module whose source shows a ``>>>`` example is imported and its examples run
with :mod:`doctest` (``ELLIPSIS`` and ``NORMALIZE_WHITESPACE``). Some examples are
the only check of a function (the split of a gain in
:mod:`grpo_helpers.results.answers`), and every one is what a learner reads first. An
example that cannot run here is marked ``# doctest: +SKIP`` with its reason beside it.
"""

from __future__ import annotations

import doctest
import importlib
import io
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "grpo_helpers"


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__main__.py" or ">>>" not in path.read_text():
            continue
        parts = ["grpo_helpers", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


MODULES = _modules_with_examples()


def test_the_package_has_examples_to_run():
    assert len(MODULES) >= 25, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_in_the_docstrings_hold(name):
    module = importlib.import_module(name)
    tests = [
        t
        for t in doctest.DocTestFinder(exclude_empty=True).find(module, name)
        if t.examples
    ]
    assert tests, f"{name} shows '>>>' but doctest finds no example in a docstring"
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    report = io.StringIO()
    for test in tests:
        runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()
    assert runner.tries > 0
