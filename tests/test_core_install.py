"""The core install (`pip install -e .`) holds what eval, score, report, compare, human and the demo
need; the packages only a builder or a token counter needs are extras, imported only where used, and
their absence is one sentence naming the extra (exit 2). Absence is simulated: `sys.modules[name] =
None` makes `import name` fail as if the package were not installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import one_sentence, run_quiet
from helpers.coco import make_coco, sft_build_args
from helpers.paths import REPO

from needlepoint.benchmarks.mc_bench.sft import coco
from needlepoint.core.errors import DataError
from needlepoint.models.tokencount import load_tokenizer

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before Python 3.11
    import tomli as tomllib

# What the core install no longer brings (blake3 is gone altogether), what those brought with them,
# and the other extras' packages: none of them may be needed by the core commands.
OUTSIDE_THE_CORE = (
    "blake3",
    "msgspec",
    "tokenizers",
    "huggingface_hub",
    "hf_xet",
    "httpx",
    "httpx2",
    "tiktoken",
    "torch",
    "transformers",
    "pycocotools",
)
PACKAGE = REPO / "src" / "needlepoint"

# Run in a child process with the packages above blocked: every module of the package imports, the
# core commands' help works, and the demo (all three benchmarks on a simulated model, offline: the
# solvers, the call cache, the report) runs to the end.
CHILD = textwrap.dedent(
    """
    import contextlib, importlib, io, json, sys
    blocked, modules, out = json.loads(sys.argv[1])
    for name in blocked:
        sys.modules[name] = None
    for module in modules:
        importlib.import_module(module)
    from needlepoint.cli import main
    helps = {}
    for verb in ("eval", "score", "report", "compare", "human", "demo"):
        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
            main([verb, "--help"])
        helps[verb] = text.getvalue()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(["demo", "--out", out])
    print(json.dumps({"helps": helps, "demo": rc, "err": err.getvalue()[-2000:]}))
    """
)


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_the_core_commands_and_the_demo_run_without_the_extras(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps([OUTSIDE_THE_CORE, _modules(), str(out)])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.splitlines()[-1])
    for verb, text in got["helps"].items():
        assert text.startswith(f"usage: needlepoint {verb}"), (verb, text[:200])
    assert got["demo"] == 0, got["err"]
    assert (out / "report" / "index.html").is_file()
    assert {"mc_bench", "mm_niah", "ref_adv_s"} <= {p.name for p in (out / "runs").iterdir()}  # and the solvers' runs


def test_the_core_dependencies_leave_the_builders_and_counters_packages_to_extras() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {_name(d) for d in project["dependencies"]}
    extras = {name: {_name(d) for d in deps} for name, deps in project["optional-dependencies"].items()}
    assert not core & {"blake3", "msgspec", "tokenizers", "tiktoken", "torch", "transformers"}
    assert {"msgspec", "tiktoken"} <= extras["build"] and "tokenizers" in extras["tokenizer"]
    assert "needlepoint[build,tokenizer]" in extras["test"]  # .ci/run's full suite gets them through `test`


def _name(requirement: str) -> str:
    """A requirement's distribution name (with its extras, for needlepoint's own)."""
    for stop in "<>=!~;":
        requirement = requirement.split(stop)[0]
    return requirement.strip()


# --- tokenizers: the `tokenizer` extra ---------------------------------------------------------------


def test_a_dry_run_counts_without_tokenizers_and_names_the_extra_for_exact_counts(
    ref_release: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    monkeypatch.chdir(tmp_path)  # the first bodies' file (./dry-run-requests.jsonl) goes here, not into the checkout
    base = ["eval", "ref_adv_s", "--data", str(ref_release[0]), "--model", "m", "--box-format", "abs_xyxy", "--dry-run"]
    rc, err = run_quiet([*base, "--out", str(tmp_path / "plain")])
    assert rc == 0, err  # the approximation needs no tokenizer
    (tmp_path / "tokenizer.json").write_text("{}")
    rc, err = run_quiet([*base, "--out", str(tmp_path / "exact"), "--tokenizer", str(tmp_path / "tokenizer.json")])
    assert rc == 2 and "needs the tokenizers package; install it with pip install -e '.[tokenizer]'" in one_sentence(err)


def test_the_rag_solvers_tokenizer_without_tokenizers_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(DataError, match=r"--embed-tokenizer\) needs the tokenizers package; install it with pip install"):
        load_tokenizer(str(tmp_path / "tokenizer.json"))


# --- msgspec: the `build` extra -----------------------------------------------------------------------


def test_the_sft_builder_needs_msgspec_only_for_a_large_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file under COMPACT_FROM_BYTES is read the plain way, msgspec or not; a large one without
    msgspec is one sentence naming the build extra, before anything is written."""
    monkeypatch.setitem(sys.modules, "msgspec", None)
    folder = tmp_path / "coco"
    make_coco(folder)
    rc, err = run_quiet(sft_build_args(folder, tmp_path / "small", samples=20))
    assert rc == 0, err
    monkeypatch.setattr(coco, "COMPACT_FROM_BYTES", 0)  # this file counts as large
    rc, err = run_quiet(sft_build_args(folder, tmp_path / "large", samples=20))
    line = one_sentence(err)
    assert rc == 2 and "with only the keys the builder uses needs msgspec" in line
    assert "install the build extra with pip install -e '.[build]'" in line
    assert not (tmp_path / "large").exists()
