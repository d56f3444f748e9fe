"""Throughput of the agentic baseline's detector localizer at full size: a Grounding DINO with the
paper's Swin-B backbone and a BERT-base text encoder (randomly initialised from configs: no
weights are downloaded, and the arithmetic is that of the real model), run through
`models.detector.Detector` on (image, phrase) rows of 640x480 images, one pass per `batch_size`
rows. Shows what batching the phrases of several samples into one forward pass buys.

    PYTHONPATH=src python perf/bench_detector.py --device cuda --rows 256 --batch-sizes 1,8,32
    PYTHONPATH=src python perf/bench_detector.py --device cpu --rows 8 --batch-sizes 1,8     # slow
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from PIL import Image

PHRASES = ["the red square", "a blue circle on the left", "the big green square", "the circle on the right"]


def build(folder: Path) -> None:
    """A Grounding DINO (Swin-B 384, window 12; BERT-base) model folder with a processor."""
    import torch
    import transformers

    words = sorted({w for p in PHRASES for w in p.split()} | {"."})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    vocab += [f"[unused{i}]" for i in range(30522 - len(vocab))]  # BERT-base's vocabulary size
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizer.from_pretrained(str(folder))
    swin = transformers.SwinConfig(
        embed_dim=128,
        depths=[2, 2, 18, 2],
        num_heads=[4, 8, 16, 32],
        window_size=12,
        image_size=384,
        out_features=["stage2", "stage3", "stage4"],
    )
    config = transformers.GroundingDinoConfig(backbone_config=swin, text_config=transformers.BertConfig())
    torch.manual_seed(0)
    transformers.GroundingDinoForObjectDetection(config).save_pretrained(folder)
    transformers.GroundingDinoProcessor(
        image_processor=transformers.GroundingDinoImageProcessor(), tokenizer=tokenizer
    ).save_pretrained(folder)


def images(n: int) -> list[Image.Image]:
    out = []
    for k in range(n):
        im = Image.new("RGB", (640, 480), (240, 240, 240))
        im.paste((200, 30, 30), (40 + k % 50, 60, 200, 220))
        im.paste((30, 30, 200), (400, 250, 600 - k % 40, 450))
        out.append(im)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", type=int, default=256, help="(image, phrase) rows per measurement")
    ap.add_argument("--batch-sizes", default="1,8,32")
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args()

    import torch

    from needlepoint.models.detector import Detector

    results = {
        "device": ns.device,
        "gpu": torch.cuda.get_device_name() if ns.device == "cuda" else None,
        "torch": torch.__version__,
        "rows": ns.rows,
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        build(folder)
        detector = Detector.load(str(folder), device=ns.device)
        results["load_s"] = round(time.perf_counter() - started, 1)
        params = sum(p.numel() for p in detector.model.parameters())
        results["parameters_m"] = round(params / 1e6, 1)
        results["image_processor"] = type(detector.processor.image_processor).__name__
        results["transformers"] = __import__("transformers").__version__
        pics = images(ns.rows)
        queries = [(pics[k], [PHRASES[k % len(PHRASES)]]) for k in range(ns.rows)]  # one phrase an image: the worst case
        for bs in (int(b) for b in ns.batch_sizes.split(",")):
            detector.batch_size = bs
            detector.detect(queries[: max(bs, 2)])  # warm-up (kernels, allocator)
            if ns.device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            got = detector.detect(queries)
            if ns.device == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            assert len(got) == ns.rows and all(len(g) == 1 for g in got)
            run = {"batch_size": bs, "wall_s": round(wall, 3), "rows_per_s": round(ns.rows / wall, 3)}
            if ns.device == "cuda":
                run["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20)
            t0 = time.perf_counter()  # the CPU side alone: the image processor on the same rows, in the same chunks
            for start in range(0, ns.rows, bs):
                detector.processor.image_processor(images=pics[start : start + bs], return_tensors="pt")
            run["preprocess_s"] = round(time.perf_counter() - t0, 3)
            results["runs"].append(run)
            print(json.dumps(run), flush=True)
    print(json.dumps(results, indent=1))
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
