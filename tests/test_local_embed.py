"""The local embedding backend: tiny randomly initialised CLIP and SigLIP models built from a config
on the CPU, saved in the Hugging Face folder layout and loaded back as a user's model would be.

Needs the `models` extra (torch, transformers). Without it these tests are skipped, unless
NEEDLEPOINT_TEST_MODELS=1 says they must run, in which case they fail with what to install.
The models run on NEEDLEPOINT_TEST_DEVICE (default "cpu"; e.g. "cuda" on a GPU machine).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import TEST_DEVICE, models_extra
from PIL import Image

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.retrieve import retrieve
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.models.local_embed import LocalEmbedder, require_models

DEVICE = TEST_DEVICE
WORDS = ["<pad>", "<unk>", "<s>", "</s>", "summarize", ":", "the", "penguin", "sings", "at", "dawn", "alpha", "beta", ".", "?"]
MAX_TEXT = 16


def _tokenizer() -> Any:
    """A word-level tokenizer that adds BOS and EOS, as CLIP's does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)])
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call, unused-ignore]  # unannotated in transformers 5
        tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


TOWER = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4}


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CLIP with tokenizer and image processor, saved as a model folder."""
    torch, transformers = models_extra()
    config = transformers.CLIPConfig(
        text_config={
            **TOWER,
            "vocab_size": len(WORDS),
            "max_position_embeddings": MAX_TEXT,
            "bos_token_id": 2,
            "eos_token_id": 3,
            "pad_token_id": 0,
        },
        vision_config={**TOWER, "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny_clip")
    transformers.CLIPModel(config).save_pretrained(folder)
    _tokenizer().save_pretrained(folder)
    transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def clip(clip_folder: Path) -> LocalEmbedder:
    return LocalEmbedder.load(str(clip_folder), device=DEVICE, batch_size=2)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ImageRef]:
    folder = tmp_path_factory.mktemp("images")
    out = {}
    for name, rgb in {"red": (220, 20, 20), "blue": (20, 20, 220)}.items():
        Image.new("RGB", (48, 40), rgb).save(folder / f"{name}.png")
        out[name] = ImageRef(key=f"{name}.png", path=folder / f"{name}.png")
    return out


def test_text_embeddings_are_unit_vectors_and_do_not_depend_on_the_batch(clip: LocalEmbedder) -> None:
    texts = ["summarize:the penguin sings at dawn.", "summarize:alpha", "summarize:", "summarize:the penguin sings at dawn."]
    together = asyncio.run(clip.embed_texts(texts))
    assert together.shape == (4, 16) and together.dtype == np.float32
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # Padding to the longest text of a batch changes nothing: each text alone gives the same row.
    alone = np.concatenate([asyncio.run(clip.embed_texts([t])) for t in texts])
    assert np.allclose(together, alone, atol=1e-5)
    assert np.allclose(together[0], together[3]) and not np.allclose(together[0], together[1], atol=1e-3)


def test_long_texts_are_truncated_to_the_text_tower(clip: LocalEmbedder) -> None:
    words = ["summarize", ":"] + "the penguin sings at dawn .".split() * 10  # 62 tokens for a 16-position tower
    got = asyncio.run(clip.embed_texts([" ".join(words), " ".join(words[:14]), " ".join(words[:13])]))
    # BOS, the first 14 tokens, EOS: the long text reads as its first 14 tokens, not 13.
    assert np.allclose(got[0], got[1], atol=1e-5) and not np.allclose(got[0], got[2], atol=1e-3)


def test_image_embeddings(clip: LocalEmbedder, images: dict[str, ImageRef]) -> None:
    got = asyncio.run(clip.embed_images([images["red"], images["blue"], images["red"]]))
    assert got.shape == (3, 16)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert np.allclose(got[0], got[2]) and not np.allclose(got[0], got[1], atol=1e-3)


def test_token_counts_come_from_the_model_tokenizer_without_special_tokens(clip: LocalEmbedder) -> None:
    assert asyncio.run(clip.count_tokens(["the penguin.", "", "alpha beta", " sings at dawn?"])) == [3, 0, 2, 4]


def test_retrieval_with_the_local_backend(clip: LocalEmbedder, tmp_path: Path) -> None:
    folder = tmp_path / "mm_niah_val"
    (folder / "annotations").mkdir(parents=True)
    (folder / "images").mkdir()
    Image.new("RGB", (40, 40), (220, 20, 20)).save(folder / "images" / "red.png")
    row = {
        "id": 1,
        "images_list": ["red.png"],
        "context": "alpha beta. the penguin sings at dawn.<image>beta alpha.",
        "question": "the penguin ?",
        "answer": "sings",
        "meta": {
            "placed_depth": 0.5,
            "context_length": 1200,
            "needles": ["the penguin sings at dawn."],
            "choices": None,
            "choices_image_path": None,
        },
    }
    (folder / "annotations" / "retrieval-text.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    (sample,) = MmNiah(tasks=["retrieval-text"]).load(folder)
    got = asyncio.run(retrieve(sample, clip))
    # Every score is the cosine of the piece's embedding with the question's.
    query, *pieces = asyncio.run(clip.embed_texts([got.doc.query, *got.doc.embed_texts]))
    (image,) = asyncio.run(clip.embed_images(list(got.doc.images)))
    vectors = iter(pieces)
    expected = [float(image @ query) if p == "<image>" else float(next(vectors) @ query) for p in got.doc.pieces]
    assert got.scores.scores == pytest.approx(expected, abs=1e-5)
    assert got.scores.token_counts == [3, 6, 0, 3, 0]
    # The whole document fits the default budget: the prompt is the plain one.
    assert got.selection.kept == tuple(range(len(got.doc.pieces)))
    assert MmNiah().prompt(got.sample).messages == MmNiah().prompt(sample).messages
    assert got.selection.needles[0].kept is True


def test_siglip_pads_to_full_length(images: dict[str, ImageRef]) -> None:
    torch, transformers = models_extra()
    config = transformers.SiglipConfig(
        text_config={**TOWER, "vocab_size": len(WORDS), "max_position_embeddings": MAX_TEXT, "pad_token_id": 0},
        vision_config={**TOWER, "image_size": 32, "patch_size": 8},
    )
    torch.manual_seed(0)
    processor = transformers.SiglipImageProcessor(size={"height": 32, "width": 32})
    siglip = LocalEmbedder("tiny-siglip", transformers.SiglipModel(config), _tokenizer(), processor, device=DEVICE)
    texts = asyncio.run(siglip.embed_texts(["summarize:alpha", "summarize:the penguin sings at dawn."]))
    pics = asyncio.run(siglip.embed_images([images["red"], images["blue"]]))
    assert texts.shape == (2, 32) and pics.shape == (2, 32)
    assert np.allclose(np.linalg.norm(np.concatenate([texts, pics]), axis=1), 1.0, atol=1e-5)
    enc = siglip.tokenizer(["summarize:alpha"], padding=siglip._padding, truncation=True, max_length=siglip.max_text_tokens)
    assert len(enc["input_ids"][0]) == MAX_TEXT


def test_a_folder_that_is_not_a_model_is_one_sentence(tmp_path: Path) -> None:
    models_extra()
    with pytest.raises(DataError, match=r"^cannot load the embedding model .*; pass a local folder with its config"):
        LocalEmbedder.load(str(tmp_path / "nothing-here"))


def test_missing_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # an import of torch now fails
    with pytest.raises(DataError) as err:
        require_models("--embed-backend transformers")
    assert str(err.value) == (
        "--embed-backend transformers needs torch and transformers (torch is missing); install them with pip install -e '.[models]'"
    )


def test_rag_solver_with_the_local_backend_through_the_cli(clip_folder: Path, tmp_path: Path, serve: Any) -> None:
    """`--solver rag --embed-backend transformers`: the tiny CLIP loaded from its folder scores the
    pieces; with a budget of 5 tokens the best-scoring piece alone (and nothing after it) is kept,
    as the scores of the same model say."""
    from needlepoint.benchmarks.mm_niah.rag import document
    from needlepoint.cli import main
    from needlepoint.core.store import read_records

    folder = tmp_path / "mm_niah_val"
    (folder / "annotations").mkdir(parents=True)
    (folder / "images").mkdir()
    Image.new("RGB", (40, 40), (220, 20, 20)).save(folder / "images" / "red.png")
    row = {
        "id": 1,
        "images_list": ["red.png"],
        "context": "alpha beta. the penguin sings at dawn.<image>beta alpha.",
        "question": "the penguin ?",
        "answer": "sings",
        "meta": {
            "placed_depth": 0.5,
            "context_length": 1200,
            "needles": ["the penguin sings at dawn."],
            "choices": None,
            "choices_image_path": None,
        },
    }
    (folder / "annotations" / "retrieval-text.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    chat = serve(default="sings")
    out = tmp_path / "run"
    args = [
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
        str(clip_folder),
        "--embed-backend",
        "transformers",
        "--embed-device",
        DEVICE,
        "--rag-max-tokens",
        "5",
        "--out",
        str(out),
        "--no-progress",
        "--no-report",
    ]
    assert main(args) == 0
    (sample,) = MmNiah(tasks=["retrieval-text"]).load(folder)
    doc = document(sample)
    clip = LocalEmbedder.load(str(clip_folder), device=DEVICE)
    query, *texts = asyncio.run(clip.embed_texts([doc.query, *doc.embed_texts]))
    (image,) = asyncio.run(clip.embed_images(list(doc.images)))
    scores = doc.piece_scores([float(t @ query) for t in texts], [float(image @ query)])
    best = int(np.argsort(np.asarray(scores, dtype=np.float64))[::-1][0])
    rec = read_records(out / "records.jsonl")[sample.id]
    assert rec["solver"]["rag"]["kept"] == [[best, best]]
    assert rec["solver"]["embedding"]["backend"] == "transformers" and rec["solver"]["embedding"]["model"] == str(clip_folder)
    ((_, body),) = chat.requests
    content = body["messages"][0]["content"]
    sent = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    assert sent.startswith(doc.pieces[best] + "\n" if doc.pieces[best] != "<image>" else "\n")


def test_internvl_g_plumbing_with_a_stand_in_model(images: dict[str, ImageRef]) -> None:
    """The InternVL-G embedder's own code with a stand-in for the 14B model (the real weights are not
    available here): texts padded and truncated to 80 tokens with pad id 0, batches of 8, images in
    bfloat16 through encode_image(mode="InternVL-G"), unit vectors, the authors' token count."""
    _, transformers = models_extra()
    import torch

    from needlepoint.models.internvl_embed import BATCH, TEXT_TOKENS, InternVLEmbedder, is_internvl

    class StandIn(torch.nn.Module):  # type: ignore[misc, unused-ignore]  # torch is Any without the models extra
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, Any, Any]] = []

        def encode_text(self, text: Any) -> Any:
            self.calls.append(("text", tuple(text.shape), None))
            return torch.stack([torch.tensor([float((row > 0).sum()), 1.0, 0.0]) for row in text]).to(torch.bfloat16)

        def encode_image(self, image: Any, mode: str) -> Any:
            self.calls.append(("image", tuple(image.shape), (mode, image.dtype)))
            return image.float().mean(dim=(2, 3)).to(torch.bfloat16)

    model = StandIn()
    tokenizer = _tokenizer()
    tokenizer.pad_token_id = 0
    processor = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    emb = InternVLEmbedder("stand-in", model, tokenizer, processor, device=DEVICE)
    texts = [f"summarize:the penguin {'alpha ' * i}" for i in range(10)] + ["summarize:" + "beta " * 100]
    vectors = asyncio.run(emb.embed_texts(texts))
    assert [c[1] for c in model.calls] == [(BATCH, TEXT_TOKENS), (3, TEXT_TOKENS)]
    assert vectors.shape == (11, 3) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    # Tokens that are not padding: BOS + summarize : the penguin + alpha * i + EOS; the long text cut at 80.
    lengths = [(1 / v[1]) * v[0] for v in vectors]
    assert [round(n) for n in lengths[:10]] == [6 + i for i in range(10)] and round(lengths[10]) == TEXT_TOKENS
    model.calls.clear()
    pics = asyncio.run(emb.embed_images([images["red"], images["blue"]] * 5))
    assert [c[1][0] for c in model.calls] == [BATCH, 2] and all(c[2] == ("InternVL-G", torch.bfloat16) for c in model.calls)
    assert pics.shape == (10, 3) and np.allclose(pics[0], pics[2], atol=1e-3)
    # The authors' cost len(ids) - 1 with BOS and EOS is our count (ids - 2) plus one.
    assert asyncio.run(emb.count_tokens(["the penguin sings.", ""])) == [4, 0]
    assert is_internvl({"architectures": ["InternVLModel"], "model_type": "internvl"}) and not is_internvl({"model_type": "clip"})
