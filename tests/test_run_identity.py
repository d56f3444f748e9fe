"""Numbers over answered samples only, run folders named by identity, --retry-failed / --fresh /
merge refusals, one leaderboard row per configuration, one credential rule, slugged model names,
the --localizer conflict, progress lines of merge and demo. Real servers on 127.0.0.1, real
files, the command line in-process or as a process."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, one_sentence, ref_eval_args, run_cli, scripted_ref_release

from needlepoint.cli import main
from needlepoint.core.config import model_slug, public_solver_options
from needlepoint.core.redact import is_credential_name


def _runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json"))


def _eval(data: Path, url: str, out: Path | None, *extra: str, model: str = "org/m") -> list[str]:
    return ref_eval_args(data, url, out, "--no-report", *extra, model=model)


# --- numbers over answered samples ---------------------------------------------------------------


def test_failed_requests_are_not_scored_as_wrong_answers(serve: Any, tmp_path: Path) -> None:
    data, _, keys, script = scripted_ref_release(tmp_path)
    script = {k: [json.dumps([{"bbox_2d": [0, 0, 1, 1]}])] if i < 2 else v for i, (k, v) in enumerate(script.items())}
    server = serve(script=script, default=None, faults={k: ["500"] for k in keys[5:]})  # 3 of 8 fail
    out = tmp_path / "run"
    assert main(_eval(data, server.url, out)) == 3
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n"] == 5  # the answered samples, not 8
    hits = metrics["hits@0.5"]
    assert metrics["acc@0.5"] == pytest.approx(hits / 5)
    run = metrics["run"]
    assert (run["samples"], run["requested"], run["answered"], run["failed"], run["not_requested"]) == (8, 8, 5, 3, 0)


def test_a_run_with_nothing_answered_has_no_metrics(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from needlepoint.benchmarks.mc_bench import demo as demo_mc
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME

    data, options, script = demo_mc.build(tmp_path / "mc")
    server = serve(script=script, default=None, faults={k: ["500"] * 5 for k in script})
    out = tmp_path / "run"
    args = [
        "eval",
        "mc_bench",
        "--data",
        str(data),
        "--model",
        SIMULATED_MODEL_NAME,
        "--api-url",
        server.url,
        "--max-retries",
        "0",
        "--no-progress",
        "--out",
        str(out),
    ]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "no metrics: none of the" in err and "Traceback" not in err
    metrics = json.loads((out / "metrics.json").read_text())
    assert [k for k in metrics if k != "usage"] == ["run"]  # no Acc of negatives "answered" by failed requests
    run = metrics["run"]
    assert run["answered"] == 0 and run["failed"] == run["requested"] == run["samples"] > 0
    assert (out / "report" / "index.html").is_file()
    assert main(["report", str(out), "--out", str(tmp_path / "board")]) == 0


def test_the_progress_line_counts_failed_samples_apart(serve: Any, tmp_path: Path) -> None:
    data, _, keys, script = scripted_ref_release(tmp_path, n=4)
    server = serve(script=script, default=None, faults={k: ["500"] for k in keys})
    args = [a for a in _eval(data, server.url, tmp_path / "run") if a != "--no-progress"]
    done = run_cli(args, env={"PYTHONPATH": str(REPO / "src")})  # stderr is a pipe: plain progress lines
    assert done.returncode == 3, done.stderr
    last = [line for line in done.stderr.splitlines() if line.startswith("ref_adv_s: ")][-1]
    assert last.startswith("ref_adv_s: 0/4 answered, 4 failed") and "4/4" not in last


# --- run folders a user can find and rerun --------------------------------------------------------


def test_default_run_folders_are_named_by_identity(serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, _, keys, script = scripted_ref_release(tmp_path, n=4)
    good = serve(script=script, default=None)
    bad = serve(script=script, default=None, faults={k: ["500"] * 5 for k in keys})
    monkeypatch.chdir(tmp_path)
    assert main(_eval(data, good.url, None)) == 0
    (first,) = _runs(tmp_path / "runs")
    assert first.parent == tmp_path / "runs" / "ref_adv_s" / "org__m"
    assert first.name == json.loads((first / "run.json").read_text())["hash"]
    # another configuration that fails: its own folder, and the original command still finds its run
    assert main(_eval(data, bad.url, None, "--prompt-mode", "direct", "--repair-on-length-only")) == 3
    assert len(_runs(tmp_path / "runs")) == 2
    good.log.clear()
    assert main(_eval(data, good.url, None)) == 0
    assert good.log == []  # resumed: nothing left to request
    # a third configuration right away (the same second): no collision
    assert main(_eval(data, good.url, None, "--temperature", "0.5")) == 0
    assert len(_runs(tmp_path / "runs")) == 3
    # --fresh starts the same configuration anew, the old answers moved aside
    assert main(_eval(data, good.url, None, "--fresh")) == 0
    assert any(".replaced-" in p.name for p in _runs(tmp_path / "runs"))


def test_refusal_names_fresh_with_the_same_out(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = serve(script=script, default=None)
    out = tmp_path / "run"
    assert main(_eval(data, server.url, out)) == 0
    capsys.readouterr()
    assert main(_eval(data, server.url, out, "--temperature", "0.5")) == 2
    assert f"pass --fresh with the same --out {out}" in one_sentence(capsys.readouterr().err)
    assert main(_eval(data, server.url, out, "--temperature", "0.5", "--fresh")) == 0


def test_retry_failed_without_a_run_and_with_fresh_are_refused(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = serve(script=script, default=None)
    runs = tmp_path / "runs"
    assert main(_eval(data, server.url, runs / "run-a")) == 0
    server.log.clear()
    capsys.readouterr()
    assert main(_eval(data, server.url, runs / "run-b", "--retry-failed")) == 2  # a mistyped --out
    line = one_sentence(capsys.readouterr().err)
    assert "holds no run to retry" in line and str(runs / "run-a") in line
    assert server.log == [] and not (runs / "run-b").exists()
    assert main(_eval(data, server.url, runs / "run-a", "--retry-failed", "--fresh")) == 2
    assert "--retry-failed continues a run and --fresh starts a new one" in one_sentence(capsys.readouterr().err)
    assert not any(".replaced-" in p.name for p in runs.iterdir())


def test_merge_exit_code_progress_and_other_shards(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=8)
    server = serve(script=script, default=None)
    for k in (1, 2, 3):
        assert main(_eval(data, server.url, tmp_path / f"s{k}", "--shard", f"{k}/3")) == 0
    capsys.readouterr()
    partial = [
        "merge",
        str(tmp_path / "s1"),
        str(tmp_path / "s2"),
        "--out",
        str(tmp_path / "m"),
        "--allow-partial",
        "--no-report",
    ]
    assert main(partial) == 3  # the documented code: samples missing
    assert "merge: scoring" in capsys.readouterr().err
    # another folder of shard 2 (the same run answered again elsewhere) into the same merge: refused
    assert main(_eval(data, server.url, tmp_path / "s2b", "--shard", "2/3")) == 0
    capsys.readouterr()
    other = ["merge", str(tmp_path / "s1"), str(tmp_path / "s2b"), str(tmp_path / "s3"), "--out", str(tmp_path / "m")]
    assert main(other) == 2
    err = capsys.readouterr().err
    assert "holds a merge of other shard folders (shard 2/3" in one_sentence(
        "".join(line for line in err.splitlines(True) if not line.startswith("merge: "))
    )
    # the same shards again, now all of them: completes the merge
    assert main(["merge", *(str(tmp_path / f"s{k}") for k in (1, 2, 3)), "--out", str(tmp_path / "m"), "--no-report"]) == 0


def test_leaderboard_row_per_configuration_complete_preferred(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, _, keys, script = scripted_ref_release(tmp_path, n=4)
    good = serve(script=script, default=None)
    bad = serve(script=script, default=None, faults={k: ["500"] * 5 for k in keys})
    monkeypatch.chdir(tmp_path)
    assert main(_eval(data, good.url, None)) == 0  # complete
    assert main(_eval(data, bad.url, None, "--fresh")) == 3  # the same configuration, newer, failed
    assert main(_eval(data, good.url, None, "--prompt-mode", "direct", "--repair-on-length-only")) == 0
    assert main(_eval(data, good.url, None, "--temperature", "0.5")) == 0
    assert main(["report", "runs", "--out", "board"]) == 0
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| org/m")]
    assert len(rows) == 3, md
    assert not any("incomplete" in r for r in rows)  # the complete run of the configuration, not the newer failed one
    assert sum("temperature=0.5" in r for r in rows) == 1  # the configuration shown in its row
    assert len({r.split("|")[1] for r in rows}) == 3  # three configurations, three different labels


# --- one credential rule -------------------------------------------------------------------------


def test_credential_rule_is_by_exact_names() -> None:
    assert is_credential_name("api_key") and is_credential_name("API-Key") and is_credential_name("token")
    assert is_credential_name("localizer_api_key") and is_credential_name("embed-password")
    assert (
        not is_credential_name("rag_max_tokens") and not is_credential_name("max_tokens") and not is_credential_name("sort_key")
    )
    assert not is_credential_name("max_token") and not is_credential_name("keyword") and not is_credential_name("token_budget")
    public = public_solver_options({"rag_max_tokens": 10, "api_key": "sk-x", "localizer_url": "http://u:pw@h:1/v1?k=s"})
    assert public == {"rag_max_tokens": 10, "localizer_url": "http://h:1/v1?[redacted]"}


def test_rag_max_tokens_reaches_run_json_and_the_key_never_does(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.rag import write_rag_release

    from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME, SimulatedServer

    folder = write_rag_release(tmp_path / "mm_niah_val", image_row=False)
    key = "sk-never-on-disk-4242"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    chat = serve(default="sings", api_key=key)
    out = tmp_path / "run"
    with SimulatedServer(api_key=key) as emb:
        assert (
            main(
                [
                    "eval",
                    "mm_niah",
                    "--data",
                    str(folder),
                    "--model",
                    "sim-model",
                    "--api-url",
                    chat.url,
                    "--solver",
                    "rag",
                    "--embed-model",
                    SIMULATED_EMBEDDER_NAME,
                    "--embed-url",
                    emb.url,
                    "--rag-max-tokens",
                    "10",
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
            == 0
        )
    header = json.loads((out / "run.json").read_text())
    assert header["config"]["solver_options"]["rag_max_tokens"] == 10
    assert "rag_max_tokens" in (out / "report" / "index.html").read_text(encoding="utf-8")
    for path in out.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


# --- model names as folder names, the --localizer conflict ---------------------------------------


@pytest.mark.parametrize("name", ["..", "../../evil", "..hidden", ".", "a\\b", "x\x00y\x1bz", "/abs/model", "é" * 300])
def test_model_slugs_stay_inside_their_folder(name: str, tmp_path: Path) -> None:
    slug = model_slug(name)
    assert slug and not slug.startswith(".") and "/" not in slug and "\\" not in slug and len(slug) <= 100
    assert all(c.isalnum() or c in "._-" for c in slug) and slug.isascii()
    assert (tmp_path / slug).resolve().parent == tmp_path.resolve()


def test_a_model_named_dot_dot_runs_inside_runs(serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=2)
    model = "../../escape"
    server = serve(script=script, default=None, models=[model])
    monkeypatch.chdir(tmp_path)
    assert main(_eval(data, server.url, None, model=model)) == 0
    (run,) = _runs(tmp_path)
    assert run.resolve().is_relative_to((tmp_path / "runs" / "ref_adv_s").resolve())
    assert not any(p.name.startswith(".") and p.name != ".lock" for p in tmp_path.rglob("*"))


def test_localizer_flag_and_solver_option_conflict_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "eval",
        "mc_bench",
        "--data",
        str(tmp_path),
        "--model",
        "m",
        "--api-url",
        "http://127.0.0.1:9/v1",
        "--solver",
        "agentic",
        "--localizer",
        "vlm:a",
        "--solver-option",
        "localizer=vlm:b",
    ]
    assert main(args) == 2
    line = one_sentence(capsys.readouterr().err)
    assert "--localizer and --solver-option localizer=... both set" in line


# --- progress of long phases, mypy with the test extra only ---------------------------------------


def test_the_demo_without_a_terminal_says_each_phase(tmp_path: Path) -> None:
    done = run_cli(["demo", "--out", str(tmp_path / "demo"), "--benchmarks", "ref_adv_s"], env={"PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0, done.stderr
    for phase in ("demo: building the ref_adv_s demo set", "demo: evaluating ref_adv_s", "demo: writing the combined report"):
        assert phase in done.stderr


def test_mypy_ignores_every_import_outside_the_core_and_test_extras() -> None:
    """A module imported by src/ but installed by neither the core dependencies nor the `test`
    extra (with the extras it names: torch, transformers, huggingface_hub, the `models` extra, are
    not among them) must be ignored by mypy."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    extras = project["project"]["optional-dependencies"]

    def names(requirements: list[str]) -> set[str]:
        """The modules `requirements` install; `needlepoint[a,b]` stands for those extras'."""
        out: set[str] = set()
        for d in requirements:
            if d.startswith("needlepoint["):
                out |= {m for extra in d[len("needlepoint[") : d.index("]")].split(",") for m in names(extras[extra])}
            else:
                out.add("PIL" if d.startswith("pillow") else d.split(">")[0].split("=")[0].replace("-", "_"))
        return out

    installed = names([*project["project"]["dependencies"], *extras["test"]])
    ignored = {m for o in project["tool"]["mypy"]["overrides"] if o.get("ignore_missing_imports") for m in o["module"]}
    imported: set[str] = set()
    for path in (REPO / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m != "needlepoint"}
    assert sorted(m for m in third_party - installed if m not in ignored) == []
