"""`needlepoint build mc_bench_sft`: training data from a small COCO-format set rendered here
(noise-textured images with coloured boxes at known places), checked against the source
annotations, needlepoint's own MC-Bench parser and corrected scoring, and the decontamination."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import MC_BENCH_RELEASE
from helpers.coco import CATEGORIES, CROWD, DEGENERATE, make_coco, render_jpeg
from PIL import Image

from needlepoint.benchmarks.mc_bench.benchmark import BAND, McBench, McSample
from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.benchmarks.mc_bench.groundtruth import groundtruth_from_json
from needlepoint.benchmarks.mc_bench.parse import PairGeometry, parse_answer
from needlepoint.benchmarks.mc_bench.scoring import score_results
from needlepoint.benchmarks.mc_bench.sft.templates import KINDS, NEGATIVE_SHARE
from needlepoint.cli import main
from needlepoint.core.conversation import ImageRef
from needlepoint.core.geometry import BoxFormat, xyxy_to_xywh

FORMATS: tuple[BoxFormat, ...] = ("abs_xyxy", "norm_1000_xyxy", "norm_1_xyxy")


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("coco")
    return folder, make_coco(folder)


def build(coco: tuple[Path, dict[str, Any]], out: Path, *extra: str, fmt: str = "norm_1000_xyxy", samples: int = 300) -> int:
    folder, _ = coco
    args = [
        "build",
        "mc_bench_sft",
        "--coco",
        str(folder / "instances.json"),
        "--images",
        str(folder / "images"),
        "--refs",
        str(folder / "refs.json"),
        "--out",
        str(out),
        "--samples",
        str(samples),
        "--seed",
        "0",
    ]
    if "--grounding-tokens" not in extra:
        args += ["--box-format", fmt]
    return main(args + list(extra))


Output = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]  # samples, their meta lines, the manifest
Built = tuple[BoxFormat, Path, Output]  # the box format, the output folder, what it holds


def read_output(out: Path) -> Output:
    samples = json.loads((out / "mc_bench_sft.json").read_text(encoding="utf-8"))
    meta = [json.loads(line) for line in (out / "samples_meta.jsonl").read_text(encoding="utf-8").splitlines()]
    return samples, meta, json.loads((out / "manifest.json").read_text(encoding="utf-8"))


def expected_box(ann: dict[str, Any], size: tuple[int, int], fmt: str) -> list[float]:
    """The annotation clipped to its image, in `fmt`, rounded as the answers are written."""
    w, h = size
    x, y, bw, bh = ann["bbox"]
    box = [max(x, 0), max(y, 0), min(x + bw, w), min(y + bh, h)]
    if fmt == "abs_xyxy":
        return [round(v) for v in box]
    if fmt == "norm_1000_xyxy":
        return [round(box[0] / w * 1000), round(box[1] / h * 1000), round(box[2] / w * 1000), round(box[3] / h * 1000)]
    return [round(box[0] / w, 3), round(box[1] / h, 3), round(box[2] / w, 3), round(box[3] / h, 3)]


@pytest.fixture(scope="module", params=FORMATS)
def built(request: pytest.FixtureRequest, coco: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("out")
    assert build(coco, out, fmt=request.param) == 0
    return request.param, out, read_output(out)


def test_every_answer_box_is_its_annotation_converted(built: Built, coco: tuple[Path, dict[str, Any]]) -> None:
    fmt, _, (samples, meta, manifest) = built
    data = coco[1]
    anns = {a["id"]: a for a in data["annotations"]}
    images = {im["id"]: im for im in data["images"]}
    assert len(samples) == len(meta) == 300 and manifest["box_format"] == fmt
    seen_kinds = set()
    for s, m in zip(samples, meta, strict=True):
        answer = json.loads(s["messages"][1]["content"])
        assert list(answer) == ["image_1", "image_2"]
        seen_kinds.add(m["kind"])
        for k, key in enumerate(("image_1", "image_2")):
            image = images[m["image_ids"][k]]
            assert s["images"][k].endswith(image["file_name"])
            assert len(answer[key]) == len(m["boxes"][k])
            for item, src in zip(answer[key], m["boxes"][k], strict=True):
                ann = anns[src["ann_id"]]
                assert ann["image_id"] == image["id"]
                assert item["group"] == src["group"]
                assert item["bbox_2d"] == expected_box(ann, (image["width"], image["height"]), fmt)
    assert seen_kinds == set(KINDS)


def test_kinds_keep_their_promises(built: Built, coco: tuple[Path, dict[str, Any]]) -> None:
    """first/second: no box in the other image; negatives: none, and the category is in neither
    image; category kinds: every non-crowd box of the named category(ies) in the asked images,
    groups in the order named; never a category with a crowd or degenerate box in that image."""
    _, _, (samples, meta, _) = built
    data = coco[1]
    names = {c["id"]: c["name"] for c in CATEGORIES}
    by_image: dict[int, dict[str, set[int]]] = {}
    for a in data["annotations"]:
        by_image.setdefault(a["image_id"], {}).setdefault(names[a["category_id"]], set()).add(a["id"])
    skipped = {1, 2, 3}
    assert len(samples) == len(meta)
    for m in meta:
        ids = [{b["ann_id"] for b in image} for image in m["boxes"]]
        present = [by_image.get(i, {}) for i in m["image_ids"]]
        kind = m["kind"]
        assert not (ids[0] | ids[1]) & skipped
        if kind in ("cat_first", "cat_second", "cat_both", "negative"):
            assert m["groups"][0] in m["text"]
        if kind == "cat_first":
            assert ids[1] == set() and ids[0] == present[0][m["groups"][0]]
        elif kind == "cat_second":
            assert ids[0] == set() and ids[1] == present[1][m["groups"][0]]
        elif kind == "cat_both":
            assert [ids[k] for k in range(2)] == [present[k].get(m["groups"][0], set()) for k in range(2)]
        elif kind == "negative":
            assert ids == [set(), set()] and all(m["groups"][0] not in p for p in present)
        elif kind == "two_groups":
            for k in range(2):
                for g, name in enumerate(m["groups"], start=1):
                    assert {b["ann_id"] for b in m["boxes"][k] if b["group"] == g} == present[k].get(name, set())
        elif kind in ("ref_one", "ref_both"):
            assert sum(len(i) for i in ids) == (1 if kind == "ref_one" else 2)
            for aid in ids[0] | ids[1]:
                assert f"box number {aid}" in m["text"]
        for k in range(2):
            for name in m["groups"]:
                if (
                    kind != "ref_one"
                    and kind != "ref_both"
                    and (m["image_ids"][k], name) in ((CROWD[0], "apple"), (DEGENERATE[0], "bus"))
                ):
                    asked = kind in ("cat_both", "negative", "two_groups") or (kind == "cat_first") == (k == 0)
                    assert not asked, (
                        f"sample {m['index']} asks for {name} on image {m['image_ids'][k]}, which has an unusable box of it"
                    )
        assert "a val split sentence" not in m["text"] and "crowd of apples" not in m["text"]


def test_prompt_is_the_eval_prompt(built: Built) -> None:
    fmt, _, (samples, meta, _) = built
    bench = McBench(box_format=fmt)
    for s, m in list(zip(samples, meta, strict=True))[:20]:
        ref_1, ref_2 = (ImageRef(key=n, path=Path(p)) for n, p in zip(m["file_names"], s["images"], strict=True))
        id_1, id_2 = m["image_ids"]
        conv = bench.prompt(McSample("x", m["text"], None, (id_1, id_2), (ref_1, ref_2), PairGeometry(((1, 1), (1, 1)), BAND)))
        expected = "".join("<image>" if isinstance(p, ImageRef) else p for p in conv.messages[0].parts)
        assert s["messages"][0] == {"role": "user", "content": expected}
        assert expected.count("<image>") == 2 and s["messages"][1]["role"] == "assistant"


def test_answers_parse_and_score_one_with_the_corrected_protocol(built: Built, coco: tuple[Path, dict[str, Any]]) -> None:
    fmt, _, (samples, meta, _) = built
    data = coco[1]
    anns = {a["id"]: a for a in data["annotations"]}
    images = {im["id"]: im for im in data["images"]}
    release: dict[str, Any] = {
        "descriptions": [],
        "images": [],
        "annotations": [],
        "categories": [{"id": k, "name": f"group {k}"} for k in range(1, 8)],
    }
    results = []
    for k, (s, m) in enumerate(zip(samples, meta, strict=True)):
        ids = [2 * k, 2 * k + 1]
        release["descriptions"].append(
            {"id": k, "images_id": ids, "text": m["text"], "positive_sample": any(m["boxes"]), "text_style": "Referring"}
        )
        sizes = []
        for pos in range(2):
            im = images[m["image_ids"][pos]]
            sizes.append((float(im["width"]), float(im["height"])))
            release["images"].append(
                {
                    "id": ids[pos],
                    "text_id": k,
                    "inter_img_id": pos,
                    "file_name": im["file_name"],
                    "height": im["height"],
                    "width": im["width"],
                }
            )
            for b in m["boxes"][pos]:
                x, y, w, h = anns[b["ann_id"]]["bbox"]
                release["annotations"].append(
                    {
                        "id": len(release["annotations"]),
                        "image_id": ids[pos],
                        "text_id": k,
                        "category_id": b["group"],
                        "area": w * h,
                        "bbox": [x, y, w, h],
                        "iscrowd": 0,
                    }
                )
        parsed = parse_answer(s["messages"][1]["content"], PairGeometry((sizes[0], sizes[1]), BAND), fmt, merged=False)
        assert parsed.error is None
        results += [
            {"image_id": ids[b["image"]], "category_id": b["group"], "bbox": xyxy_to_xywh(b["bbox"]), "score": 1.0}
            for b in parsed.answer
        ]
    metrics = score_results(groundtruth_from_json(release, "sft"), results)
    assert metrics["corrected"]["ap50"] == pytest.approx(1.0) and metrics["corrected"]["acc"] == 1.0
    assert metrics["corrected"]["unassigned_groups"] == 0
    assert len(results) == len(release["annotations"]) > 0


def test_manifest_records_inputs_shares_and_skips(built: Built, coco: tuple[Path, dict[str, Any]]) -> None:
    import hashlib

    _, out, (_, meta, manifest) = built
    folder = coco[0]
    assert manifest["inputs"]["coco"]["sha256"] == hashlib.sha256((folder / "instances.json").read_bytes()).hexdigest()
    assert manifest["inputs"]["refs"]["sha256"] == hashlib.sha256((folder / "refs.json").read_bytes()).hexdigest()
    assert manifest["seed"] == 0 and manifest["needlepoint_version"]
    assert manifest["skipped_annotations"] == {
        "crowd": 1,
        "degenerate": 2,
        "refs naming no usable annotation": 1,
        "refs of another split": 1,
    }
    counts = {k: sum(m["kind"] == k for m in meta) for k in KINDS}
    assert counts == manifest["counts"]
    for k in KINDS:
        assert abs(counts[k] - manifest["shares"][k] * 300) <= 1
    assert manifest["shares"]["negative"] == pytest.approx(NEGATIVE_SHARE)
    assert manifest["outputs"]["mc_bench_sft.json"] == hashlib.sha256((out / "mc_bench_sft.json").read_bytes()).hexdigest()
    info = json.loads((out / "dataset_info.json").read_text(encoding="utf-8"))
    assert info["mc_bench_sft"]["file_name"] == "mc_bench_sft.json" and info["mc_bench_sft"]["formatting"] == "sharegpt"
    assert info["mc_bench_sft"]["columns"] == {"messages": "messages", "images": "images"}


def test_negative_share_is_mc_bench_s() -> None:
    release = json.loads(MC_BENCH_RELEASE.read_text(encoding="utf-8"))
    with_boxes = {a["image_id"] for a in release["annotations"]}
    negatives = sum(1 for d in release["descriptions"] if not set(d["images_id"]) & with_boxes)
    assert NEGATIVE_SHARE == pytest.approx(negatives / len(release["descriptions"]), abs=5e-4)


def test_same_seed_same_output_and_swift_holds_the_same_samples(coco: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    assert build(coco, tmp_path / "a", samples=120) == 0
    assert build(coco, tmp_path / "b", samples=120) == 0
    assert build(coco, tmp_path / "c", "--format", "swift", samples=120) == 0
    assert (tmp_path / "a" / "mc_bench_sft.json").read_bytes() == (tmp_path / "b" / "mc_bench_sft.json").read_bytes()
    assert (tmp_path / "a" / "samples_meta.jsonl").read_bytes() == (tmp_path / "b" / "samples_meta.jsonl").read_bytes()
    sharegpt = json.loads((tmp_path / "a" / "mc_bench_sft.json").read_text(encoding="utf-8"))
    swift = [json.loads(line) for line in (tmp_path / "c" / "mc_bench_sft.jsonl").read_text(encoding="utf-8").splitlines()]
    assert swift == sharegpt and not (tmp_path / "c" / "dataset_info.json").exists()
    folder, _ = coco
    main(
        [
            "build",
            "mc_bench_sft",
            "--coco",
            str(folder / "instances.json"),
            "--images",
            str(folder / "images"),
            "--out",
            str(tmp_path / "d"),
            "--samples",
            "120",
            "--seed",
            "1",
            "--box-format",
            "norm_1000_xyxy",
            "--refs",
            str(folder / "refs.json"),
        ]
    )
    assert (tmp_path / "d" / "mc_bench_sft.json").read_bytes() != (tmp_path / "a" / "mc_bench_sft.json").read_bytes()


def test_grounding_tokens(coco: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    assert build(coco, tmp_path, "--grounding-tokens", samples=80) == 0
    samples, meta, manifest = read_output(tmp_path)
    anns = {a["id"]: a for a in coco[1]["annotations"]}
    images = {im["id"]: im for im in coco[1]["images"]}
    assert manifest["box_format"] == "norm_1000_xyxy" and manifest["grounding_tokens"]
    for s, m in zip(samples, meta, strict=True):
        lines = s["messages"][1]["content"].split("\n")
        assert [line.split(":")[0] for line in lines] == ["Image 1", "Image 2"]
        for k, line in enumerate(lines):
            im = images[m["image_ids"][k]]
            got = []
            for group, boxes in re.findall(
                r"<\|object_ref_start\|>group (\d+)<\|object_ref_end\|>((?:<\|box_start\|>\(\d+,\d+\),\(\d+,\d+\)<\|box_end\|>)+)",
                line,
            ):
                for x1, y1, x2, y2 in re.findall(r"\((\d+),(\d+)\),\((\d+),(\d+)\)", boxes):
                    got.append((int(group), [int(x1), int(y1), int(x2), int(y2)]))
            want = sorted(
                (b["group"], expected_box(anns[b["ann_id"]], (im["width"], im["height"]), "norm_1000_xyxy"))
                for b in m["boxes"][k]
            )
            assert sorted(got) == want
            assert (line == f"Image {k + 1}: none") == (not want)


def test_excluded_images_never_appear(coco: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """An exact copy and a re-encoded, resized copy of two detection images inside an MC-Bench
    release are both excluded, and no other image is."""
    folder, data = coco
    release, _ = write_release(tmp_path / "mc")
    listing = json.loads((release / "mc-bench_v0.2_val.json").read_text(encoding="utf-8"))["images"]
    exact, reencoded = data["images"][0]["file_name"], data["images"][4]["file_name"]
    shutil.copyfile(folder / "images" / exact, release / "mc-bench_images" / listing[0]["file_name"])
    with Image.open(folder / "images" / reencoded) as im:
        small = im.resize((im.width * 4 // 5, im.height * 4 // 5), Image.Resampling.BICUBIC)
        small.save(release / "mc-bench_images" / listing[3]["file_name"], "JPEG", quality=60)
    out = tmp_path / "out"
    assert build(coco, out, "--exclude", str(release), samples=300) == 0
    samples, meta, manifest = read_output(out)
    d = manifest["decontamination"]
    assert (d["excluded_by_content_hash"], d["excluded_by_perceptual_hash"], d["excluded_images"]) == (1, 1, 2)
    assert sorted(d["excluded_files"]) == sorted([exact, reencoded])
    used = {p for s in samples for p in s["images"]} | {n for m in meta for n in m["file_names"]}
    assert not any(p.endswith(exact) or p.endswith(reencoded) for p in used)
    assert len({n for m in meta for n in m["file_names"]}) == len(data["images"]) - 2


def test_mix_is_checked_and_appended(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, data = coco
    (tmp_path / "mixdir").mkdir()
    shutil.copyfile(folder / "images" / data["images"][0]["file_name"], tmp_path / "mixdir" / "a.jpg")
    shutil.copyfile(folder / "images" / data["images"][1]["file_name"], tmp_path / "mixdir" / "b.jpg")
    good = [
        {
            "conversations": [{"from": "human", "value": "<image><image>What differs?"}, {"from": "gpt", "value": "The colour."}],
            "images": ["a.jpg", "b.jpg"],
        }
    ]
    (tmp_path / "mixdir" / "mix.json").write_text(json.dumps(good), encoding="utf-8")
    assert build(coco, tmp_path / "out", "--mix", str(tmp_path / "mixdir" / "mix.json"), samples=30) == 0
    samples, meta, manifest = read_output(tmp_path / "out")
    assert len(samples) == 31 and manifest["mix_samples"] == 1 and meta[-1]["kind"] == "mix"
    assert samples[-1] == {
        "messages": [{"role": "user", "content": "<image><image>What differs?"}, {"role": "assistant", "content": "The colour."}],
        "images": [str((tmp_path / "mixdir" / n).resolve()) for n in ("a.jpg", "b.jpg")],
    }
    bad = [
        {
            "messages": [{"role": "user", "content": "<image>What differs?"}, {"role": "assistant", "content": "x"}],
            "images": ["a.jpg", "b.jpg"],
        }
    ]
    (tmp_path / "mixdir" / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
    capsys.readouterr()
    assert build(coco, tmp_path / "out2", "--mix", str(tmp_path / "mixdir" / "bad.json"), samples=30) == 2
    err = capsys.readouterr().err
    assert "sample 0 of --mix" in err and "1 <image> placeholder(s) for 2 image(s)" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out2" / "mc_bench_sft.json").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--share-negative", "-1"], "--share-negative -1.0 must be a number of 0 or more"),
        (["--format", "alpaca"], "--format 'alpaca' is unknown"),
        (["--box-format", "xywh"], "--box-format 'xywh' is unknown"),
    ],
)
def test_bad_flags_end_in_one_sentence(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    folder, _ = coco
    args = [
        "build",
        "mc_bench_sft",
        "--coco",
        str(folder / "instances.json"),
        "--images",
        str(folder / "images"),
        "--out",
        str(tmp_path),
        "--samples",
        "5",
    ]
    if "--box-format" not in extra:
        args += ["--box-format", "abs_xyxy"]
    assert main(args + extra) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_without_refs_referring_kinds_go_and_negatives_keep_their_share(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = coco
    args = [
        "build",
        "mc_bench_sft",
        "--coco",
        str(folder / "instances.json"),
        "--images",
        str(folder / "images"),
        "--samples",
        "200",
        "--box-format",
        "abs_xyxy",
    ]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    _, meta, manifest = read_output(tmp_path / "a")
    assert manifest["counts"]["ref_one"] == manifest["counts"]["ref_both"] == 0
    assert manifest["shares"]["negative"] == pytest.approx(NEGATIVE_SHARE) and sum(manifest["counts"].values()) == 200
    assert main([*args, "--out", str(tmp_path / "b"), "--share-ref-one", "0.2"]) == 2
    assert "--share-ref-one needs referring expressions" in capsys.readouterr().err


def test_lvis_style_federated_file(tmp_path: Path) -> None:
    """LVIS: a category is absent only where verified absent (neg_category_ids), never asked where
    not exhaustively annotated; images named by coco_url; no supercategories."""
    rng = random.Random(2)
    (tmp_path / "images").mkdir()
    cats = [{"id": i, "name": f"thing_{i}", "synset": f"thing.n.0{i}"} for i in range(1, 7)]
    data: dict[str, Any] = {"images": [], "annotations": [], "categories": cats}
    for i in range(1, 13):
        w, h = 200, 160
        chosen = rng.sample(range(1, 7), 3)
        boxes = []
        for c in chosen[:2]:
            x, y = rng.randint(0, 100), rng.randint(0, 80)
            data["annotations"].append({"id": 100 * i + c, "image_id": i, "category_id": c, "bbox": [x, y, 60, 50], "area": 3000})
            boxes.append(([x, y, 60, 50], (200, 40, 40)))
        others = [c for c in range(1, 7) if c not in chosen]
        data["images"].append(
            {
                "id": i,
                "width": w,
                "height": h,
                "coco_url": f"http://images.cocodataset.org/train2017/{i:012d}.jpg",
                "neg_category_ids": others[:2],
                "not_exhaustive_category_ids": [chosen[1]] if i % 3 == 0 else [],
            }
        )
        (tmp_path / "images" / f"{i:012d}.jpg").write_bytes(render_jpeg(rng, w, h, boxes))
    (tmp_path / "lvis.json").write_text(json.dumps(data), encoding="utf-8")
    assert (
        main(
            [
                "build",
                "mc_bench_sft",
                "--coco",
                str(tmp_path / "lvis.json"),
                "--images",
                str(tmp_path / "images"),
                "--out",
                str(tmp_path / "out"),
                "--samples",
                "200",
                "--box-format",
                "abs_xyxy",
            ]
        )
        == 0
    )
    samples, meta, manifest = read_output(tmp_path / "out")
    assert manifest["detection_set"]["federated"] is True and manifest["counts"]["negative"] > 0
    images = {im["id"]: im for im in data["images"]}
    annotated = {(a["image_id"], f"thing {a['category_id']}") for a in data["annotations"]}
    for s, m in zip(samples, meta, strict=True):
        covered = {"cat_first": [0], "cat_second": [1]}.get(m["kind"], [0, 1])
        for k in covered:
            im = images[m["image_ids"][k]]
            assert s["images"][k].endswith(f"{im['id']:012d}.jpg")
            neg = {f"thing {c}" for c in im["neg_category_ids"]}
            unsure = {f"thing {c}" for c in im["not_exhaustive_category_ids"]}
            for name in m["groups"]:
                assert name not in unsure
                if m["kind"] == "negative":
                    assert name in neg
                else:
                    assert name in neg or (im["id"], name) in annotated


def test_refs_as_an_object_and_bad_inputs(
    tmp_path: Path, coco: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    from collections import Counter

    from needlepoint.benchmarks.mc_bench.sft.refs import read_refs
    from needlepoint.core.errors import DataError

    (tmp_path / "refs.json").write_text(
        json.dumps({"1005": ["the  left dog", {"sent": "the left dog"}, "a second one"], "7": []}), encoding="utf-8"
    )
    skipped: Counter[str] = Counter()
    assert read_refs(tmp_path / "refs.json", skipped) == {1005: ("the left dog", "a second one")}
    assert skipped == {"refs without a sentence": 1}
    (tmp_path / "bad.json").write_text(json.dumps([{"sentences": ["x"]}]), encoding="utf-8")
    with pytest.raises(DataError, match="entry 0 of .* has no ann_id"):
        read_refs(tmp_path / "bad.json", Counter())
    folder, _ = coco
    (tmp_path / "notcoco.json").write_text(json.dumps({"images": []}), encoding="utf-8")
    args = [
        "build",
        "mc_bench_sft",
        "--images",
        str(folder / "images"),
        "--out",
        str(tmp_path / "o"),
        "--samples",
        "5",
        "--box-format",
        "abs_xyxy",
        "--no-progress",
    ]
    assert main([*args, "--coco", str(tmp_path / "notcoco.json")]) == 2
    assert "has no lists 'images', 'annotations' and 'categories'" in capsys.readouterr().err
    assert main([*args, "--coco", str(folder / "instances.json"), "--exclude", str(tmp_path / "nowhere")]) == 2
    assert "--exclude" in capsys.readouterr().err
    empty = tmp_path / "empty_images"
    empty.mkdir()
    assert main([*args[:2], "--coco", str(folder / "instances.json"), "--images", str(empty), *args[4:]]) == 2
    err = capsys.readouterr().err
    assert "is not in" in err and "give --images the folder" in err and len(err.strip().splitlines()) == 1
