"""The package's import graph: no module imports another that imports it back, directly or
through others, counting imports inside functions too (a deferred import is still a circle);
and every module imports on its own, without the package ``__init__`` loading the rest first."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import mmapbloom

#: The package under test: the checkout's, or the installed one when the tests run from an
#: unpacked sdist (which has no source copy beside them).
PACKAGE = Path(mmapbloom.__file__).resolve().parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
#: Imports left out of the graph, as (module, function): none since ``sizing.__getattr__``
#: (a BloomConfig alias that nothing released ever used) went; kept for the mechanism.
COMPATIBILITY_SHIMS: set[tuple[str, str]] = set()


def _imports(module: str) -> set[str]:
    """The package modules that ``module`` imports anywhere in its source (module level,
    functions, ``TYPE_CHECKING`` blocks), except inside a listed compatibility shim."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    skipped = {
        id(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and (module, node.name) in COMPATIBILITY_SHIMS
    }
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if id(node) in skipped:
            return
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mmapbloom."):
            out.add(node.module.split(".")[1])  # type: ignore[union-attr]
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("mmapbloom."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out.discard(module)
    return out & set(MODULES)


def _find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of ``graph`` as a list of modules (first == last), or [] if it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return []

    for start in MODULES:
        if start not in state:
            found = dfs(start)
            if found:
                return found
    return []


def test_no_import_circle() -> None:
    graph = {m: _imports(m) for m in MODULES}
    assert _find_cycle(graph) == []
    # The strategy registry and the formulas do not know about configs (_lazy, _warn: leaf helpers).
    assert "config" not in graph["hashing"] and "config" not in graph["sizing"]
    assert graph["sizing"] == {"errors"} and graph["hashing"] <= {"errors", "sizing", "_lazy", "_warn"}


def test_the_cycle_finder_finds_a_circle() -> None:
    """The check above would fail on the circle the package used to have."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    graph["hashing"], graph["sizing"] = {"sizing"}, {"hashing"}
    assert _find_cycle(graph) == ["hashing", "sizing", "hashing"]


def test_no_module_level_getattr_alias() -> None:
    """No module ``__getattr__`` (a lazy alias hides an import from the graph above); the
    package ``__init__``'s lazy loader of the public names is the one exception."""
    for module in MODULES + ["__init__"]:
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert module == "__init__" or "__getattr__" not in names, module
        text = (PACKAGE / f"{module}.py").read_text()
        assert "sizing import BloomConfig" not in text and "sizing.BloomConfig" not in text, module


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone(module: str) -> None:
    """In a fresh interpreter whose ``mmapbloom`` is a bare package (its ``__init__`` not run),
    importing one module loads only what it needs: a circle at import time would fail here
    with a partially initialised module."""
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('mmapbloom'); pkg.__path__ = [{str(PACKAGE)!r}]\n"
        "sys.modules['mmapbloom'] = pkg\n"
        f"import mmapbloom.{module}\n"
        "print(sorted(m for m in sys.modules if m.startswith('mmapbloom.')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if module == "sizing":
        assert proc.stdout.split() == ["['mmapbloom.errors',", "'mmapbloom.sizing']"]
