"""Draw needlepoint's layers from its real imports: docs/images/architecture.png.

Each folder of src/needlepoint is a box, stacked in the order tests/test_package.py declares
(`LAYERS`, lowest at the bottom), and each folder that imports another gets one arrow to it. The
imports are read the way that test reads them: an AST walk over every module, function-level
imports included, `if TYPE_CHECKING:` blocks left out; `from needlepoint import __version__` (the
public surface, `needlepoint/__init__.py`) belongs to no layer and draws no arrow.

    python scripts/draw_architecture.py                # writes docs/images/architecture.png
    python scripts/draw_architecture.py --out x.png    # elsewhere

Rerun it after moving a module between folders or adding a folder; docs/architecture.md shows the
picture and tests/test_architecture_doc.py draws it on the package as it is.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "needlepoint"
LAYER_TABLE = REPO / "tests" / "test_package.py"  # the one declaration of the layer order
PUBLIC_SURFACE = "needlepoint"
DEFAULT_OUT = REPO / "docs" / "images" / "architecture.png"
SUMMARY_KEY = "needlepoint-architecture"  # the PNG text chunk that says what the picture shows
# the importers' colours, from the lowest importer up: dark enough to follow a line on white
PALETTE = (
    "#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f #bcbd22 #17becf #393b79 #303030 #843c39 #637939".split()
)

# One line under each box's name; a folder missing here is drawn without one.
GLOSS = {
    "core": "helpers: the file writer, JSONL, numbers, IoU, text, images, errors; config, store",
    "models": "the OpenAI-compatible client and its HTTP layer, embedders, detectors, simulated model",
    "serve": "starts vLLM or SGLang for --serve and stops them",
    "families": "model families: each one's prompt, box syntax, box format, frame and limits",
    "contract": "what a benchmark implements: protocols, Declaration, boards, boxes, registry",
    "stats": "seeded bootstrap intervals over a benchmark's own unit",
    "solvers": "how a sample becomes an answer: the protocol, the default solver, the call cache",
    "benchmarks": "mc_bench/, ref_adv/, mm_niah/, refcoco/: load, prompt, parse, score, export",
    "report": "the run page, the leaderboard (report), the runs list, human agreement",
    "compare": "needlepoint compare: paired bootstrap, McNemar, a page of cards",
    "run": "evaluate and score: runner, run folder, processes, batches, merge, repeats",
    "human": "the human-evaluation page and Label Studio",
    "demo": "needlepoint demo and demo --serve: generated sets, the simulated model served",
    "entry points": "evaluate(), score() and the needlepoint command",
}


@dataclass(frozen=True)
class Layer:
    """One box: a folder of the package (or the top-level entry points) and its modules."""

    name: str  # as LAYERS names it: "core", ..., "entry points"
    prefixes: tuple[str, ...]  # the modules it covers: "needlepoint.core" or "needlepoint.api", ...
    modules: int

    @property
    def label(self) -> str:
        """`core/` for a folder; the file names for the top-level modules."""
        if len(self.prefixes) == 1 and self.prefixes[0].count(".") == 1 and (PACKAGE / self.prefixes[0].split(".")[1]).is_dir():
            return self.prefixes[0].split(".")[1] + "/"
        return ", ".join(p.split(".")[-1] + ".py" for p in self.prefixes)


@dataclass
class Architecture:
    """The layers, lowest first, and the folder-level imports: (importer, imported) -> import sites."""

    layers: list[Layer]
    edges: dict[tuple[str, str], int]

    def index(self, name: str) -> int:
        return [layer.name for layer in self.layers].index(name)

    def summary(self) -> str:
        """The layers in order and the folder-level imports, as one line of JSON: what the PNG
        carries in its text chunk, so that a test can tell a picture drawn before a change."""
        edges = sorted(self.edges, key=lambda e: (self.index(e[0]), self.index(e[1])))
        return json.dumps({"layers": [layer.name for layer in self.layers], "imports": [list(e) for e in edges]})


@dataclass
class Drawing:
    """What `draw` put on the figure: each box's label and height, each arrow's two ends."""

    figure: Any  # matplotlib.figure.Figure
    boxes: dict[str, tuple[str, float]] = field(default_factory=dict)  # layer name -> (label, y of its centre)
    arrows: list[tuple[str, str, float, float]] = field(default_factory=list)  # (from, to, y leaving, y arriving)


def package_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_sites(module: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, package module) of every run-time import of `known` modules in `module` (read from
    `path`), at any depth: function-level imports count, `if TYPE_CHECKING:` blocks do not; `from a
    import b` names `a.b` when that is a module, else `a`; relative imports are resolved. The one
    reader of the package's imports (tests/test_package.py checks the layers with it)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and type_checking_only(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name) for alias in child.names if alias.name in known)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    head = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*head, *([child.module] if child.module else [])])
                for alias in child.names:
                    name = f"{base}.{alias.name}"
                    if name in known:
                        found.append((child.lineno, name))
                    elif base in known:
                        found.append((child.lineno, base))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return [(line, target) for line, target in found if target != module]


def imported_modules(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules `module` imports at run time (see `import_sites`)."""
    return {target for _, target in import_sites(module, path, known)}


def declared_layers(table: Path = LAYER_TABLE) -> list[tuple[str, tuple[str, ...]]]:
    """`LAYERS` as tests/test_package.py declares it (read, not imported): (name, module prefixes)."""
    for node in ast.parse(table.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "LAYERS":
            value = node.value
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets):
            value = node.value
        else:
            continue
        if value is not None:
            return [(str(name), tuple(prefixes)) for name, prefixes in ast.literal_eval(value)]
    raise SystemExit(f"no LAYERS table in {table}")


def read_architecture(package: Path = PACKAGE, table: Path = LAYER_TABLE) -> Architecture:
    """The layers of `package` in the declared order and the imports between them."""
    known = package_modules(package)
    declared = declared_layers(table)

    def layer_of(module: str) -> str:
        for name, prefixes in declared:
            if any(module == p or module.startswith(p + ".") for p in prefixes):
                return name
        raise SystemExit(f"{module} belongs to no layer: add its folder to LAYERS in {table.name}")

    counts: dict[str, int] = {}
    edges: dict[tuple[str, str], int] = {}
    for module, path in known.items():
        if module == PUBLIC_SURFACE:
            continue
        here = layer_of(module)
        counts[here] = counts.get(here, 0) + 1
        for target in imported_modules(module, path, known):
            if target != PUBLIC_SURFACE and (there := layer_of(target)) != here:
                edges[(here, there)] = edges.get((here, there), 0) + 1
    layers = [Layer(name, prefixes, counts.get(name, 0)) for name, prefixes in declared]
    return Architecture(layers, edges)


def draw(arch: Architecture) -> Drawing:
    """The boxes, lowest layer at the bottom, and one arrow per folder-level import: it leaves the
    importer on the right, runs down a track of the importer's colour and enters the folder it
    imports from the right."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    n = len(arch.layers)
    sources = sorted({a for a, _ in arch.edges}, key=arch.index)
    box_w, box_h, gap, track_dx = 6.4, 0.84, 0.4, 0.26  # in inches across, layers up
    width, bottom, top_edge = box_w + gap + track_dx * len(sources) + 0.15, -0.55, n - 0.05
    per_layer = 0.72  # inches
    figure = plt.figure(figsize=(width + 0.1, (top_edge - bottom) * per_layer), dpi=150)
    ax = figure.add_axes((0, 0, 1, 1))
    ax.set_xlim(-0.1, width)
    ax.set_ylim(bottom, top_edge)
    ax.axis("off")
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sources)}
    drawing = Drawing(figure)

    for i, layer in enumerate(arch.layers):
        ax.add_patch(
            FancyBboxPatch(
                (0, i - box_h / 2),
                box_w,
                box_h,
                boxstyle="round,pad=0,rounding_size=0.08",
                facecolor="#f4f6fa" if i % 2 else "#e9eef6",
                edgecolor="#34495e",
                linewidth=1.1,
            )
        )
        ax.text(0.15, i + 0.15, layer.label, fontsize=12, fontweight="bold", va="center", family="monospace")
        ax.text(box_w - 0.12, i + 0.15, f"{layer.modules} modules", fontsize=8, va="center", ha="right", color="#555")
        ax.text(0.15, i - 0.2, GLOSS.get(layer.name, ""), fontsize=8.6, va="center", color="#222")
        drawing.boxes[layer.name] = (layer.label, float(i))

    # where each arrow enters its target: spread over the lower part of the box so that no two
    # share a line, the nearest track highest, so that an arrow crosses no track that ends there
    incoming: dict[str, list[str]] = {}
    for a, b in sorted(arch.edges, key=lambda e: (arch.index(e[0]), arch.index(e[1]))):
        incoming.setdefault(b, []).append(a)
    for k, source in enumerate(sources):
        x = box_w + gap + track_dx * k
        top = arch.index(source) + 0.33
        targets = sorted((b for a, b in arch.edges if a == source), key=arch.index)
        entries = []
        for target in targets:
            rank, count = incoming[target].index(source), len(incoming[target])
            entries.append(arch.index(target) + 0.22 - 0.62 * (rank + 0.5) / count)
        style: dict[str, Any] = {"color": colour[source], "linewidth": 1.3, "solid_capstyle": "round"}
        ax.plot([box_w, x], [top, top], **style)
        ax.plot([box_w], [top], marker="o", markersize=3.5, color=colour[source])
        ax.plot([x, x], [top, min(entries)], **style)
        for target, y in zip(targets, entries):
            weight = arch.edges[(source, target)]
            ax.annotate(
                "",
                xy=(box_w + 0.01, y),
                xytext=(x, y),
                arrowprops={
                    "arrowstyle": "-|>,head_length=0.5,head_width=0.22",
                    "color": colour[source],
                    "linewidth": 0.7 + 0.45 * math.log10(weight + 1),
                    "shrinkA": 0,
                    "shrinkB": 0,
                },
            )
            drawing.arrows.append((source, target, top, y))

    ax.text(
        0,
        n - 0.45,
        "src/needlepoint: folders are layers, lowest at the bottom; an arrow: the folder at its tail imports the one at its head",
        fontsize=9.5,
        va="bottom",
        color="#333",
    )
    return drawing


def png(drawing: Drawing, arch: Architecture) -> bytes:
    """The drawing as PNG bytes, with `arch.summary()` in its text chunk `SUMMARY_KEY`."""
    buffer = io.BytesIO()
    drawing.figure.savefig(buffer, format="png", facecolor="white", metadata={SUMMARY_KEY: arch.summary()})
    return buffer.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"the PNG to write (default {DEFAULT_OUT.relative_to(REPO)})"
    )
    ns = parser.parse_args(argv)
    from needlepoint.core.files import write_atomic  # the project's one writer of files

    arch = read_architecture()
    write_atomic(ns.out, png(draw(arch), arch))
    print(f"{ns.out}: {len(arch.layers)} layers, {len(arch.edges)} folder-level imports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
