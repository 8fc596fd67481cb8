"""What the README's first section says a newcomer needs, held to its sources.

The total time of ``make series`` is the syllabus's full times added up; that of
``make test`` the latest fresh-clone measurement in docs/results.md; the model file's
SHA-256 is the installed file's; the licence and citation files exist and agree
with pyproject.toml, and the citation with the README.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from grpo_helpers import provenance, settings

ROOT = Path(__file__).resolve().parents[2]


README = (ROOT / "README.md").read_text()


def _seconds(text: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?) (s|min)", text.strip()).groups()
    return float(number) * (60 if unit == "min" else 1)


def test_the_series_total_is_the_syllabus_added_up():
    rows = [r for r in README.splitlines() if re.match(r"\| \d\d \| \[", r)]
    assert len(rows) == 11
    total = sum(_seconds(r.strip("|").split("|")[-1]) for r in rows)
    (quoted,) = re.findall(r"`make series` takes about (\d+) min", README)
    assert int(quoted) == round(total / 60), (quoted, total)


def test_the_test_total_is_the_latest_measurement():
    table = (
        (ROOT / "docs" / "results.md")
        .read_text()
        .split("## How long the tests take")[1]
    )
    runs = re.findall(r"^\| 20\d\d-\d\d-\d\d \|[^|]*\| (\d+) s \|", table, re.M)
    (quoted,) = re.findall(r"`make test` about (\d+) min", README)
    assert int(quoted) == round(int(runs[-1]) / 60), (quoted, runs[-1])


def test_the_model_file_named_is_the_installed_one():
    record = provenance.model_file(settings.SMOLLM2)
    assert f"`{record['file']}`" in README
    (prefix,) = re.findall(r"SHA-256 `([0-9a-f]{8})\.\.\.`", README)
    assert record["sha256"].startswith(prefix)


def test_the_licence_and_the_citation_agree_with_the_project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    licence = (ROOT / "LICENSE").read_text()
    # the MIT text alone, so licence detection reads it; third parties in NOTICE
    assert licence.startswith("MIT License") and licence.endswith("SOFTWARE.\n")
    assert "Apache" in (ROOT / "NOTICE").read_text()
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["license"] == "MIT"
    assert citation["version"] == project["version"]


def test_the_citation_says_what_the_readme_says():
    """CITATION.cff's title and abstract are the README's heading and first
    paragraph; it cites the method and the data the series uses; and it gives a
    repository address only where pyproject.toml gives one (none is known yet)."""
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    heading, first = README.split("\n\n")[:2]
    assert citation["title"] == heading.removeprefix("# ")
    assert citation["abstract"] == " ".join(first.replace("`", "").split())
    cited = [ref["identifiers"][0]["value"] for ref in citation["references"][:2]]
    assert cited == ["arXiv:2402.03300", "arXiv:2110.14168"]  # DeepSeekMath, GSM8K
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get(
        "urls", {}
    )
    assert citation.get("repository-code") == urls.get("Repository")


def test_the_download_quoted_is_the_measured_one():
    """The README's download for ``make setup`` is the learner's set-up as
    ``VENV=<it> bash bench/setup_download.sh`` measured it; docs/package.md gives
    both set-ups' figures from their result files."""
    results = ROOT / "bench" / "results"
    totals = {}
    for name in ("setup_download-learner.txt", "setup_download.txt"):
        line = (results / name).read_text().strip().splitlines()[-1]
        totals[name] = re.search(r"total (\d+)MB", line).group(1)
    assert f"{totals['setup_download-learner.txt']} MB download" in " ".join(
        README.split()
    )
    package = " ".join((ROOT / "docs" / "package.md").read_text().split())
    assert f"downloads about {totals['setup_download-learner.txt']} MB" in package
    assert f"`make setup-all` about {totals['setup_download.txt']} MB" in package
