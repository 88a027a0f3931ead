"""Figures and install lines in the docs that go stale (issue 29, items 18 to 20): each is
checked against its source of truth (pyproject.toml, mmapbloom.__version__), or must not
appear at all. Cheap: text only, no subprocess."""

from __future__ import annotations

import re
from pathlib import Path

import mmapbloom
from tests.conftest import ROOT

ROOT_PATH = Path(ROOT)
README = (ROOT_PATH / "README.md").read_text()
PYPROJECT = (ROOT_PATH / "pyproject.toml").read_text()
# the package under test (installed, or this checkout's): an unpacked sdist in .ci/run has no copy
PACKAGE_PATH = Path(mmapbloom.__file__).parent
VERSION = re.search(r'^__version__ = "([^"]+)"', (PACKAGE_PATH / "__init__.py").read_text(), re.M)


def _names(requirements: str) -> set[str]:
    """The distribution names of a TOML list of requirement strings."""
    return set(re.findall(r'"([A-Za-z0-9_.-]+)', requirements))


def _listed(sentence_start: str, text: str) -> set[str]:
    """The backticked names of the sentence of ``text`` that starts at ``sentence_start``."""
    start = text.index(sentence_start)
    sentence = text[start : text.index(";" if "Runtime" in sentence_start else "(", start)]
    return set(re.findall(r"`([a-z0-9_-]+)`", sentence))


def test_dependency_lists_match_pyproject() -> None:
    runtime = _names(re.search(r"^dependencies = \[(.*?)\]", PYPROJECT, re.S | re.M).group(1))  # type: ignore[union-attr]
    test = _names(re.search(r"^test = \[(.*)\]$", PYPROJECT, re.M).group(1))  # type: ignore[union-attr]
    assert _listed("Runtime dependencies:", README) == runtime
    assert _listed("the test extra adds", README) == test


def test_no_test_count_in_the_readme() -> None:
    """A count of tests is stale after the next commit: the README gives none."""
    assert not re.search(r"\b[\d,]+ passed\b", README)


def test_versions_in_install_lines_are_the_package_version() -> None:
    assert VERSION is not None
    for path in ("README.md", "docs/SCRAPY.md"):
        text = (ROOT_PATH / path).read_text()
        for found in re.findall(r"mmapbloom-(\d+\.\d+\.\d+)", text):
            assert found == VERSION.group(1), (path, found)
    assert f"mmapbloom {VERSION.group(1)} (native backend: compiled kernels)" in README


def test_no_install_by_name_from_an_index() -> None:
    """mmapbloom is on no index: ``pip install mmapbloom`` or ``'mmapbloom[extra]'`` would
    install whatever someone else uploaded under that name."""
    by_name = re.compile(r"pip install[^\n`]*?(?<![/\w.-])['\"]?mmapbloom(\[|\b)(?![-/.])")
    files = [ROOT_PATH / "README.md", ROOT_PATH / "CHANGELOG.md", *ROOT_PATH.glob("docs/*.md")]
    files += [*ROOT_PATH.glob("examples/**/*.py"), *PACKAGE_PATH.glob("*.py"), *ROOT_PATH.glob("tools/**/*.py")]
    bad = [f"{p}: {m.group(0)}" for p in files for m in by_name.finditer(p.read_text())]
    assert not bad, bad


def test_wheel_portability_is_stated_exactly() -> None:
    assert "copy\n  either anywhere" not in README and "either anywhere" not in README
    assert "same Python version and platform" in README
