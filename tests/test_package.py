"""The package as shipped: every module imports, no import cycle, one version, typing marker."""

from __future__ import annotations

import ast
import importlib
import sys
from importlib.resources import files
from pathlib import Path

import pytest
from conftest import MC_BENCH_RELEASE, REF_ADV_PREDICTIONS, REPO, TEST_DATA

import needlepoint
from needlepoint.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before Python 3.11
    import tomli as tomllib

PACKAGE = REPO / "src" / "needlepoint"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str) -> set[str]:
    """The package modules `module` imports at run time, at any depth (function-level imports
    count; `if TYPE_CHECKING:` blocks do not). `from a import b` names `a.b` when that is a
    module, else `a`."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name in MODULES)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    head = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*head, *([child.module] if child.module else [])])
                for alias in child.names:
                    name = f"{base}.{alias.name}"
                    if name in MODULES:
                        found.add(name)
                    elif base in MODULES:
                        found.add(base)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    found.discard(module)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_the_import_graph_sees_imports_at_every_depth() -> None:
    """The checker itself: it finds a function-level import and a cycle through one."""
    assert "needlepoint.report.leaderboard" in imports_of("needlepoint.report.index")
    assert "needlepoint.report.html" in imports_of("needlepoint.report.leaderboard")
    assert "needlepoint.api" not in imports_of("needlepoint"), "TYPE_CHECKING imports are not run-time imports"
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    graph = {module: imports_of(module) for module in MODULES}
    assert cycles(graph) == []
    # the run report is a page writer the leaderboard uses, never the other way round
    assert "needlepoint.report.leaderboard" not in graph["needlepoint.report.html"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module: str) -> None:
    """Also without the optional extras: torch and friends are imported only where used."""
    imported = importlib.import_module(module)
    assert Path(imported.__file__ or "").resolve() == MODULES[module].resolve()


def test_typing_marker_ships_with_the_package() -> None:
    assert files("needlepoint").joinpath("py.typed").is_file()
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["needlepoint"]


def test_the_version_has_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    """pyproject.toml reads `needlepoint.__version__`; `--version` prints that same string."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "needlepoint.__version__"}
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"needlepoint {needlepoint.__version__}"


def test_reference_data_ships_with_the_tests() -> None:
    """The reference data the suite reads lies in tests/data, inside the checkout (a clone runs the
    suite as it is), and tests/data/README.md names every file there with its source and licence."""
    for path in (REF_ADV_PREDICTIONS, MC_BENCH_RELEASE):
        assert path.resolve().is_relative_to(TEST_DATA.resolve()) and path.is_file(), path
    readme = (TEST_DATA / "README.md").read_text(encoding="utf-8")
    shipped = [p.relative_to(TEST_DATA).as_posix() for p in sorted(TEST_DATA.rglob("*")) if p.is_file()]
    assert len(shipped) > 2
    assert [name for name in shipped if name != "README.md" and f"`{name}`" not in readme] == []
