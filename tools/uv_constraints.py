"""Copy constraints.txt's pins into pyproject.toml's ``[tool.uv]`` constraints.

``make lock`` runs it after compiling constraints.txt: ``uv sync`` reads no
constraint file, so the uv route (``uv sync``, README.md) holds the same pins as
``constraint-dependencies`` in pyproject.toml, and installs the versions that
``make setup`` installs. tests/project/test_uv_setup.py checks that they agree.

    python tools/uv_constraints.py            # rewrites ./pyproject.toml
    python tools/uv_constraints.py --root DIR
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

#: One pinned requirement of a ``uv pip compile`` output, with its marker if any.
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*==[^\s;]+( ; .+)?$")
#: The list this script owns: from its first line to the ``]`` that closes it.
BLOCK = re.compile(r"^constraint-dependencies = \[\n.*?^\]\n", re.M | re.S)


def pins(constraints: str) -> list[str]:
    """The pinned lines of a constraints file, comments and ``# via`` lines left
    out, in the file's order.

    >>> pins("a==1\\n    # via b\\nc==2 ; sys_platform == 'linux'\\n")
    ['a==1', "c==2 ; sys_platform == 'linux'"]
    """
    found = [line.strip() for line in constraints.splitlines() if PIN.match(line)]
    for pin in found:
        if '"' in pin or "\\" in pin:
            raise ValueError(f"cannot quote {pin!r} as a TOML string")
    return found


def rewrite(pyproject: str, constraints: str) -> str:
    """pyproject.toml's text with its ``constraint-dependencies`` list replaced by
    the pins of ``constraints``, one a line."""
    body = "".join(f'    "{pin}",\n' for pin in pins(constraints))
    text, count = BLOCK.subn(
        lambda _: f"constraint-dependencies = [\n{body}]\n", pyproject
    )
    if count != 1:
        raise ValueError(
            f"pyproject.toml holds {count} constraint-dependencies lists, not one"
        )
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."))
    root = parser.parse_args(argv).root
    pyproject = root / "pyproject.toml"
    constraints = (root / "constraints.txt").read_text()
    pyproject.write_text(rewrite(pyproject.read_text(), constraints))
    print(f"{pyproject}: {len(pins(constraints))} constraints from constraints.txt")


if __name__ == "__main__":
    main()
