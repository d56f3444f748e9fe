"""`--dry-run`: every first-turn request built as it would be sent, counted, written, never sent,
on each benchmark's demo data."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import one_sentence, run_quiet

from needlepoint.cli import main
from needlepoint.contract.declaration import load_target
from needlepoint.contract.registry import declarations, make
from needlepoint.core.config import RunConfig
from needlepoint.core.conversation import Generation
from needlepoint.core.images import base64_jpeg, file_url
from needlepoint.models.openai_compat import request_body
from needlepoint.run.dryrun import IMAGE_REF_SCHEME, QwenVLRule, dry_run_config, image_rule, text_counter

DEMOS = [d for d in declarations() if d.demo]


@pytest.fixture(scope="module", params=[d.name for d in DEMOS])
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict[str, Any]]:
    """A benchmark's demo data on disk: (benchmark, data, options)."""
    decl = next(d for d in DEMOS if d.name == request.param)
    assert decl.demo is not None
    data, options, _ = load_target(decl.demo)(tmp_path_factory.mktemp(decl.name))
    return decl.name, data, options


def test_counts_are_those_of_the_requests_the_client_sends(demo: tuple[str, Path, dict[str, Any]], tmp_path: Path) -> None:
    name, data, options = demo
    config = RunConfig(benchmark=name, data=data, model="Qwen/Qwen2.5-VL-7B-Instruct", api_urls=[], options=options)
    out = tmp_path / "bodies.jsonl"
    summary = dry_run_config(config, write=out, write_count=2).to_dict()
    bench = make(name, **options)
    samples = bench.load(data)
    generation = bench.generation_defaults
    sizes, local_sizes, images = [], [], 0
    for s in samples:  # the bodies as the client builds them, images base64 and all (or by URL)
        conv = bench.prompt(s)
        gen = bench.generation(s, Generation(**generation))
        refs = [im for m in conv.messages for im in m.images]
        images += len(refs)
        sizes.append(len(request_body(config.model, conv, gen, [base64_jpeg(r) for r in refs])))
        local_sizes.append(len(request_body(config.model, conv, gen, [file_url(r) or base64_jpeg(r) for r in refs])))
    assert summary["samples"] == summary["requests"] == len(samples)
    assert summary["images"] == images and summary["bytes"] == sum(sizes)
    assert dry_run_config(replace(config, local_images=True)).to_dict()["bytes"] == sum(local_sizes)
    assert (sum(local_sizes) < sum(sizes)) == (name != "ref_adv_s")  # Ref-Adv-s: images inside parquet files
    assert summary["largest_request"]["bytes"] == max(sizes)
    assert summary["image_tokens"] is not None  # Qwen2.5-VL's rule, from the model's name
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["sample"] for line in lines] == [s.id for s in samples[:2]]
    urls = [
        p["image_url"]["url"]
        for m in lines[0]["body"]["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image_url"
    ]
    assert all(u.startswith(IMAGE_REF_SCHEME) for u in urls)
    assert len(urls) == sum(len(m.images) for m in bench.prompt(samples[0]).messages)


def test_the_command_sends_nothing_and_exits_0(
    demo: tuple[str, Path, dict[str, Any]], serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, data, options = demo
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    server = serve()
    out = tmp_path / "bodies.jsonl"
    run = tmp_path / "run"
    argv = [
        "eval",
        name,
        "--data",
        str(data),
        "--model",
        "sim-model",
        *flags,
        "--out",
        str(run),
        "--dry-run",
        "--dry-run-file",
        str(out),
    ]
    assert main([*argv, "--api-url", server.url, "--max-context", "50", "--dry-run-requests", "1"]) == 0
    printed = capsys.readouterr().out
    assert "nothing was sent" in printed and "over --max-context 50:" in printed and "image tokens: unknown" in printed
    assert server.requests == [] and len(out.read_text().splitlines()) == 1
    assert [p.name for p in run.iterdir()] == ["dry-run.json"]  # the estimate, in the folder the run will write
    assert main([*argv, "--json"]) == 0  # no endpoint at all
    counts = json.loads(capsys.readouterr().out)
    assert counts["requests"] > 0 and counts["prompt_tokens"] is None and counts["image_rule"].startswith("unknown")


def test_qwen2_vl_image_tokens() -> None:
    rule = QwenVLRule()
    assert rule.tokens(224, 224) == 8 * 8 + 2
    assert rule.tokens(1000, 500) == 36 * 18 + 2  # 1008 x 504 pixels
    assert rule.tokens(20, 20) == 2 * 2 + 2  # raised to min_pixels 3136: 56 x 56
    assert QwenVLRule(max_pixels=28 * 28 * 100).tokens(1400, 700) == 14 * 7 + 2  # lowered to 392 x 196


def test_the_model_folder_gives_the_rule_and_the_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "find": 1, "the": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"min_pixels": 3136, "max_pixels": 78400}))
    count, how = text_counter(tmp_path)
    assert count("find the red cup .") == 5 and str(tmp_path / "tokenizer.json") in how
    assert image_rule("anything", tmp_path) == QwenVLRule(min_pixels=3136, max_pixels=78400)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava"}))
    assert image_rule("qwen2-vl-named-but-llava", tmp_path) is None
    assert image_rule("Qwen/Qwen2-VL-2B-Instruct", None) == QwenVLRule()
    assert text_counter(None)[0]("x" * 9) == 3


def test_a_bad_tokenizer_and_another_solver_are_one_sentence(ref_release: Any, tmp_path: Path) -> None:
    base = ["eval", "ref_adv_s", "--data", str(ref_release[0]), "--model", "m", "--box-format", "abs_xyxy", "--dry-run"]
    rc, err = run_quiet([*base, "--tokenizer", str(tmp_path)])
    assert rc == 2 and "has no tokenizer.json" in one_sentence(err)
    rc, err = run_quiet([*base, "--max-context", "0"])
    assert rc == 2 and "--max-context must be a positive" in one_sentence(err)


def test_the_run_shows_the_dry_runs_estimate_beside_its_first_turns(
    ref_release: Any, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run, then the same command without --dry-run (no --out: the run's own folder under
    the runs root): the run's usage holds the estimate and what its first turns used, and the end
    of the run prints both."""
    folder, rows = ref_release
    server = serve()
    argv = [
        "eval",
        "ref_adv_s",
        "--data",
        str(folder),
        "--model",
        "sim-model",
        "--api-url",
        server.url,
        "--limit",
        "5",
        "--box-format",
        "abs_xyxy",
    ]
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--dry-run", "--dry-run-requests", "0"]) == 0
    estimates = list(tmp_path.glob("runs/ref_adv_s/*/*/dry-run.json"))
    assert len(estimates) == 1 and server.requests == []
    estimate = json.loads(estimates[0].read_text())
    capsys.readouterr()
    assert main([*argv, "--no-progress", "--no-report"]) == 0
    err = capsys.readouterr().err
    metrics = json.loads((estimates[0].parent / "metrics.json").read_text())
    block = metrics["usage"]["dry_run"]
    assert block["estimate"] == estimate and estimate["requests"] == 5
    sent = [
        turn
        for line in (estimates[0].parent / "records.jsonl").read_text().splitlines()
        for turn in json.loads(line)["turns"][:1]
    ]
    assert block["first_turns"] == {"requests": 5, "prompt_tokens": sum(t["usage"]["prompt_tokens"] for t in sent)}
    assert f"the dry run estimated 5 and {estimate['text_tokens']:,} text tokens" in err
