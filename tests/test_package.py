"""The package as shipped: every module imports, no import cycle, one version, typing marker."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest
from draw_architecture import import_sites as read_import_sites
from draw_architecture import package_modules, type_checking_only
from helpers import MC_BENCH_RELEASE, REF_ADV_PREDICTIONS, REPO, TEST_DATA

import needlepoint
from needlepoint.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before Python 3.11
    import tomli as tomllib

PACKAGE = REPO / "src" / "needlepoint"


MODULES = package_modules(PACKAGE)


def import_sites(module: str, path: Path | None = None) -> list[tuple[int, str]]:
    """(line, package module) of every run-time import of needlepoint's modules in `module` (read
    from `path`, by default the package's file): scripts/draw_architecture.py's reader, the one
    the architecture picture is drawn with."""
    return read_import_sites(module, path or MODULES[module], MODULES)


def imports_of(module: str) -> set[str]:
    """The package modules `module` imports at run time (see `import_sites`)."""
    return {target for _, target in import_sites(module)}


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
    assert "needlepoint.run.evaluate" not in imports_of("needlepoint"), "TYPE_CHECKING imports are not run-time imports"
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    graph = {module: imports_of(module) for module in MODULES}
    assert cycles(graph) == []
    # the run report is a page writer the leaderboard uses, never the other way round
    assert "needlepoint.report.leaderboard" not in graph["needlepoint.report.html"]


# The layers, lowest first, one per folder: a module may import its own layer and those below it,
# never one above, and a folder's place says its layer. Decisions the code makes:
# - core/ holds the helpers and, above them, the run's settings (config) and folder format (store):
#   the models read records, benchmarks' demo runs are RunConfigs.
# - serve/ starts the servers a run talks to; it needs only the core, so it sits low.
# - families/ knows how each model family grounds (prompt, box syntax, box format, frame, limits) and
#   no benchmark: the benchmarks read their replies through it.
# - contract/ is what a benchmark package and the rest agree on (protocols, declaration, boards,
#   box parsing, the registry, which reaches benchmark packages only by the names their
#   declarations give, at run time); its `__init__` is the public face benchmark authors import.
# - stats/ lies below the benchmark packages: a benchmark brings its own resampler built on it.
# - solvers/ (the protocol, the default solver, the call cache) lies below the benchmark packages,
#   whose own solvers are built on it; a benchmark package never imports a sibling.
# - report/ lies below run/: a run writes its report when it ends; the report reads run folders.
# - the entry points (api.py, cli.py) sit on top; needlepoint/__init__.py is the public surface (it
#   re-exports the API lazily): exempt, and `from needlepoint import __version__` reads it anywhere.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("needlepoint.core",)),
    ("models", ("needlepoint.models",)),
    ("serve", ("needlepoint.serve",)),
    ("families", ("needlepoint.families",)),
    ("contract", ("needlepoint.contract",)),
    ("stats", ("needlepoint.stats",)),
    ("solvers", ("needlepoint.solvers",)),
    ("benchmarks", ("needlepoint.benchmarks",)),
    ("report", ("needlepoint.report",)),
    ("compare", ("needlepoint.compare",)),
    ("run", ("needlepoint.run",)),
    ("human", ("needlepoint.human",)),
    ("demo", ("needlepoint.demo",)),
    ("entry points", ("needlepoint.api", "needlepoint.cli")),
]
PUBLIC_SURFACE = "needlepoint"


def layer_of(module: str) -> int:
    """The index in LAYERS of the prefix naming `module` (a prefix covers the module itself and its
    submodules)."""
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return index
    raise AssertionError(f"{module} belongs to no layer: add its folder to LAYERS in tests/test_package.py")


def benchmark_package(module: str) -> str | None:
    """ "needlepoint.benchmarks.NAME" for a module of benchmark package NAME, else None."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["needlepoint", "benchmarks"] and len(parts) > 2 else None


def upward_imports(module: str) -> list[str]:
    """Each import of `module` that runs up a layer or into a sibling benchmark, as one line."""
    if module == PUBLIC_SURFACE:
        return []
    found = []
    here, path = layer_of(module), MODULES[module].relative_to(REPO)
    for line, target in sorted(set(import_sites(module))):
        if target == PUBLIC_SURFACE:
            continue
        there = layer_of(target)
        if there > here:
            found.append(f"{path}:{line}: {module} ({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]})")
        elif benchmark_package(module) and benchmark_package(target) not in (None, benchmark_package(module)):
            found.append(f"{path}:{line}: {module} imports {target}, a sibling benchmark's module")
    return found


def sub_package(module: str) -> str | None:
    """The folder of needlepoint a module lies in ("needlepoint.core"), None at the top level."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and MODULES[module].name == "__init__.py"):
        return ".".join(parts[:2])
    return None


def mutual_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The pairs of sub-packages that import each other (at any depth), each pair once, sorted."""
    pairs = {(sub_package(m), sub_package(t)) for m, targets in graph.items() for t in targets}
    edges = {(a, b) for a, b in pairs if a and b and a != b}
    return sorted((a, b) for a, b in edges if a < b and (b, a) in edges)


def test_the_layer_check_finds_an_import_that_runs_up_and_a_sibling_benchmark() -> None:
    """The checker itself: the layers order the folders as declared, and a fake module that
    imports up or into a sibling benchmark is named with its line."""
    order = [
        layer_of(m)
        for m in (
            "needlepoint.core.geometry",
            "needlepoint.models.replay",
            "needlepoint.serve.plan",
            "needlepoint.families.catalog",
            "needlepoint.contract.boards",
            "needlepoint.stats.bootstrap",
            "needlepoint.solvers.base",
            "needlepoint.benchmarks.mc_bench.agentic",
            "needlepoint.report.leaderboard",
            "needlepoint.compare.paired",
            "needlepoint.run.runner",
            "needlepoint.human.server",
            "needlepoint.demo",
            "needlepoint.cli",
        )
    ]
    assert order == sorted(order) and len(set(order)) == len(LAYERS)
    assert (
        layer_of("needlepoint.contract.registry") == layer_of("needlepoint.contract") < layer_of("needlepoint.benchmarks.ref_adv")
    )
    fake = "needlepoint.benchmarks.mc_bench.fake_for_the_test"
    source = "from needlepoint.benchmarks.ref_adv import benchmark\n\n\ndef f():\n    from needlepoint.report import html\n"
    MODULES[fake] = REPO / "fake_for_the_test.py"
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Path, "read_text", lambda self, encoding=None: source)
            found = upward_imports(fake)
    finally:
        del MODULES[fake]
    assert found == [
        "fake_for_the_test.py:1: needlepoint.benchmarks.mc_bench.fake_for_the_test imports "
        "needlepoint.benchmarks.ref_adv.benchmark, a sibling benchmark's module",
        "fake_for_the_test.py:5: needlepoint.benchmarks.mc_bench.fake_for_the_test (benchmarks) imports "
        "needlepoint.report.html (report)",
    ]


def test_every_folder_is_one_layer() -> None:
    """LAYERS names each sub-package of needlepoint once, as a folder (one line a folder), and
    only the entry points lie at the top level beside it."""
    folders = sorted({sub for m in MODULES if (sub := sub_package(m))})
    listed = [prefix for _, prefixes in LAYERS for prefix in prefixes]
    assert sorted(p for p in listed if p in folders) == folders
    assert len(listed) == len(set(listed))
    top = sorted(m for m in MODULES if m != PUBLIC_SURFACE and sub_package(m) is None)
    assert top == sorted(LAYERS[-1][1])


def test_the_top_level_holds_at_most_eight_modules() -> None:
    """src/needlepoint/ itself holds the public surface and the entry points, no more than eight
    modules: everything else lives in the folder of its layer."""
    assert len(list(PACKAGE.glob("*.py"))) <= 8


def test_the_mutual_import_check_finds_a_pair() -> None:
    """The checker itself: two folders that import each other, by a function-level import too."""
    graph = {
        "needlepoint.core.a": {"needlepoint.models.b"},
        "needlepoint.models.b": {"needlepoint.core.c"},
        "needlepoint.core.c": set(),
        "needlepoint.cli": {"needlepoint.core.a"},
    }
    with pytest.MonkeyPatch.context() as patch:
        for name in graph:
            patch.setitem(MODULES, name, REPO / f"{name}.py")
        assert mutual_imports(graph) == [("needlepoint.core", "needlepoint.models")]
        assert mutual_imports({**graph, "needlepoint.core.a": set()}) == []


def test_no_two_folders_import_each_other() -> None:
    """No two sub-packages of needlepoint import each other, function-level imports included."""
    assert mutual_imports({module: imports_of(module) for module in MODULES}) == []


# The public faces: benchmark authors import needlepoint through `needlepoint.contract`, solver
# authors through `needlepoint.solvers` (a layer above: a solver's names cannot come from the
# contract). The contract's face names its modules lazily (strings, which `import_sites` cannot
# see), so its own test below holds each name to the layers.
FACES = ("needlepoint.contract", "needlepoint.solvers")


def face_imports(path: Path) -> list[tuple[str, str]]:
    """(face, name) of every `from FACE import name` in the file at `path`, at any depth."""
    return [
        (node.module, alias.name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module in FACES
        for alias in node.names
    ]


def defined_in(face: str, name: str) -> str:
    """The module that defines the name a face offers (the contract's own map for its lazy names)."""
    module = importlib.import_module(face)
    lazy: dict[str, str] = getattr(module, "_WHERE", {})
    if name in lazy:
        return lazy[name]
    value = getattr(module, name)
    return value.__name__ if inspect.ismodule(value) else str(value.__module__)


def test_the_toy_grounding_benchmark_imports_needlepoint_only_through_the_faces() -> None:
    """tests/toybench, a grounding benchmark built like a built-in one (an image, a box, a published
    CSV, a board, a solver of its own), imports nothing of needlepoint but the public faces, and
    what it takes from them (boards, boxes in a reply, IoU, the solver's context) lies below the
    benchmark packages: a new benchmark needs no edit and no import anywhere else (no built-in
    benchmark's module, no report, no runner)."""
    toybench = REPO / "tests" / "toybench"
    below = [name for name, _ in LAYERS].index("benchmarks")
    files = sorted(toybench.glob("*.py"))
    used = {target for path in files for _, target in import_sites(f"toybench.{path.stem}", path)}
    assert used == set(FACES)
    taken = {defined_in(face, name) for path in files for face, name in face_imports(path)}
    assert {"needlepoint.contract.boards", "needlepoint.contract.boxes", "needlepoint.core.geometry"} <= taken
    assert {"needlepoint.contract.base", "needlepoint.contract.declaration", "needlepoint.solvers.base"} <= taken
    assert sorted(m for m in taken if layer_of(m) >= below) == []


def _lazy_face_imports() -> list[tuple[str, str]]:
    """(module, name) of the contract face's `if TYPE_CHECKING:` imports (what mypy reads)."""
    tree = ast.parse(MODULES["needlepoint.contract"].read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and type_checking_only(n))
    return [(str(n.module), a.name) for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names]


def test_the_contract_face_lists_each_name_once_and_imports_nothing_above_it() -> None:
    """needlepoint.contract: `__all__`, its lazy map and its typing imports name the same names
    from the same modules; each name resolves; every module behind it lies in the contract's
    layer or below (the lazy map is strings: the import check cannot see it)."""
    import needlepoint.contract as face

    lazy: dict[str, str] = face._WHERE
    assert sorted(face.__all__) == sorted(lazy) and len(face.__all__) == len(set(face.__all__))
    assert sorted(_lazy_face_imports()) == sorted((module, name) for name, module in lazy.items())
    here = layer_of("needlepoint.contract")
    assert sorted(m for m in set(lazy.values()) if layer_of(m) > here) == []
    for name in face.__all__:
        assert getattr(face, name) is not None, name


def test_the_solver_face_offers_what_it_lists() -> None:
    import needlepoint.solvers as face

    assert [name for name in face.__all__ if not hasattr(face, name)] == []
    assert layer_of(defined_in("needlepoint.solvers", "SolveContext")) == layer_of("needlepoint.solvers")


def test_a_declaration_through_the_face_stays_cheap() -> None:
    """A declaration module imports the face whenever the command line is built: the face loads
    its modules when a name is first used, so `Declaration` and `Option` come without numpy."""
    code = "import sys\nfrom needlepoint.contract import Declaration, Option\nprint('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_imports_run_down_the_layers_only() -> None:
    """Every module's imports stay in its layer or below (LAYERS), and no benchmark package imports
    a sibling: a new benchmark is its own package and touches no other."""
    assert [line for module in sorted(MODULES) for line in upward_imports(module)] == []


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
