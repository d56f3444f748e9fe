"""What a benchmark package declares about itself, in one place: the `Declaration` that its
`__init__.py` exports as `BENCHMARK`.

The core, the CLI, the report, the leaderboard and the demo read declarations and import no
benchmark module by name: a new benchmark is one new package and one registry line (or a
`register` call, or an entry point of the group `needlepoint.benchmarks`; see
needlepoint.contract.registry and docs/writing-a-benchmark.md). A declaration names code as
"module:attribute" strings that are imported only when used, so that reading every declaration
(as the CLI does to build its flags) stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from needlepoint.core.errors import DataError
from needlepoint.core.options import Option

__all__ = ["HUMAN_KINDS", "Builder", "Declaration", "PublishedTable", "load_target"]

# The kinds of human page (`needlepoint human`), each with the sample attributes it reads:
# "one_box": one image, a caption, one box (`image`, `width`, `height`, `caption`, `gt` as pixel xyxy);
# "image_pair": two images, boxes in numbered groups (MC-Bench's samples and ground truth);
# "document": a long document of text and images, then a question (MM-NIAH's samples).
HUMAN_KINDS = ("one_box", "image_pair", "document")


@dataclass(frozen=True)
class PublishedTable:
    """One published table shipped as a CSV file inside a package (`file` relative to `package`):
    the source it transcribes, the leaderboard's name for each of its columns that the leaderboard
    spells differently (CSV name -> leaderboard name; the others keep their names, and a name the
    leaderboard lacks becomes a column), a caveat for readers."""

    file: str
    source: str
    columns: Mapping[str, str] = field(default_factory=dict)
    note: str = ""
    package: str = "needlepoint.report"


@dataclass(frozen=True)
class Builder:
    """A `needlepoint build NAME` sub-command: `target` is a module with `add_arguments(parser)`
    and `run(ns) -> int`, imported only when the command is built or run."""

    name: str
    target: str
    help: str


@dataclass(frozen=True)
class Declaration:
    """Everything the rest of needlepoint knows about one benchmark.

    - `name`: the registry name (`needlepoint eval NAME`); `title`: how pages and tables name it;
    - `benchmark`: "module:Class" of its `Benchmark` (base.py), built as `Class(**options)`;
    - `options`: its `needlepoint eval` flags, each `dest` a keyword of the class (a flag several
      benchmarks share is declared by each and merged by the CLI); `score_options`: the flags of
      `needlepoint score` it takes;
    - `solvers`: solver name -> "module:Class", besides the default solver (docs/solvers.md);
    - `demo`: "module:function", `function(folder) -> (data path, options, simulated answers)`
      for `needlepoint demo`; `demo_runs`: more demo runs of the same set (a solver's), each
      "module:function", `function(data, options, server, runs folder) -> RunConfig`, which may add
      answers to the simulated server's script first;
    - `prompt_label`, `sort_label`: how the run report names a sample's prompt and sort key (the
      filters come from `report_items`);
    - `leaderboard`: "module:function", `function(runs) -> list[Board]` (contract/boards.py), the
      paper's table layout for `needlepoint report`;
    - `published`: the papers' tables for `needlepoint report --with-published`;
    - `builders`: its `needlepoint build` sub-commands;
    - `primary_metric`: the metric (metrics.json path, e.g. "acc@0.5") a comparison is about, its
      other rows a family of secondary ones with Holm-adjusted p-values (`needlepoint compare`);
    - `task_order`: its tasks in the paper's order, for tables that list results by task;
    - `human`: the kind of human page its samples use (one of HUMAN_KINDS), None for no
      `needlepoint human BENCH` page; `human_options`: the keyword options the benchmark is built
      with for a person (the page gives boxes in image pixels: `{"box_format": "abs_xyxy"}`).
    """

    name: str
    title: str
    benchmark: str
    options: tuple[Option, ...] = ()
    score_options: tuple[Option, ...] = ()
    solvers: Mapping[str, str] = field(default_factory=dict)
    demo: str | None = None
    demo_runs: tuple[str, ...] = ()
    prompt_label: str = "prompt"
    sort_label: str = "score"
    leaderboard: str | None = None
    published: tuple[PublishedTable, ...] = ()
    builders: tuple[Builder, ...] = ()
    primary_metric: str | None = None
    task_order: tuple[str, ...] = ()
    human: str | None = None
    human_options: Mapping[str, Any] = field(default_factory=dict)


def load_target(target: str) -> Any:
    """The object a "module:attribute" string names (a bare "module" names the module)."""
    module, _, attr = target.partition(":")
    try:
        loaded = importlib.import_module(module)
        return getattr(loaded, attr) if attr else loaded
    except (ImportError, AttributeError) as exc:
        raise DataError(
            f"cannot load {target!r}, which a benchmark declaration names ({exc}); fix or remove that benchmark"
        ) from None
