"""Tiny random detector models saved as model folders (Grounding DINO, OWLv2, OWL-ViT), for the
tests of the detector localizer, and a log of a model's forward passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers.paths import TEST_DEVICE, models_extra

WORDS = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    ".",
    "a",
    "the",
    "red",
    "blue",
    "green",
    "square",
    "circle",
    "on",
    "left",
    "right",
    "big",
]

# The same numbers computed in another batch: exact to float noise on the CPU; a GPU picks kernels
# (TF32 convolutions) by batch shape, so there a box may move by a fraction of a pixel.
BOX_TOL, SCORE_TOL = (1e-3, 1e-5) if TEST_DEVICE == "cpu" else (0.25, 1e-3)


def write_grounding_dino(folder: Path) -> Path:
    """A tiny random Grounding DINO (Swin backbone, BERT text encoder) with its processor, saved in `folder`."""
    torch, transformers = models_extra()
    (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizer.from_pretrained(str(folder))
    swin = transformers.SwinConfig(
        embed_dim=8,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 1, 1],
        window_size=2,
        image_size=64,
        out_features=["stage2", "stage3", "stage4"],
    )
    bert = transformers.BertConfig(
        vocab_size=len(WORDS),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=32,
    )
    config = transformers.GroundingDinoConfig(
        backbone_config=swin,
        text_config=bert,
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,  # fewer decoder layers do not build
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        num_queries=7,
        num_feature_levels=3,
        encoder_n_points=1,
        decoder_n_points=1,
        max_text_len=32,
    )
    torch.manual_seed(0)
    transformers.GroundingDinoForObjectDetection(config).save_pretrained(folder)
    image_processor = transformers.GroundingDinoImageProcessor(size={"shortest_edge": 48, "longest_edge": 64})
    transformers.GroundingDinoProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def _clip_tokenizer_files(folder: Path) -> int:
    """A CLIP BPE vocabulary (every byte's character, alone and word-final, a few merges) and its
    merges file; returns the vocabulary size. "!" has id 0 as in CLIP's own vocabulary, so a
    query's first token (the start token) is never 0, which OWL reads as a padded query."""
    chars = [chr(c) for c in range(33, 127)]  # the printable ASCII bytes map to themselves in CLIP's byte alphabet
    merges = [("r", "e"), ("re", "d</w>"), ("b", "l"), ("bl", "u"), ("blu", "e</w>")]
    vocab = chars + [c + "</w>" for c in chars] + [a + b for a, b in merges] + ["<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    return len(vocab)


OWL_TEXT_LEN = 24


def write_owl(folder: Path, kind: str) -> Path:
    """A tiny random OWLv2 (`kind` "owlv2") or OWL-ViT ("owlvit") with its processor, saved in `folder`."""
    torch, transformers = models_extra()
    vocab_size = _clip_tokenizer_files(folder)
    tokenizer = transformers.CLIPTokenizer.from_pretrained(str(folder), model_max_length=OWL_TEXT_LEN)
    tower = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1, "num_attention_heads": 2}
    text = {
        **tower,
        "vocab_size": vocab_size,
        "max_position_embeddings": OWL_TEXT_LEN,
        "bos_token_id": vocab_size - 2,
        "eos_token_id": vocab_size - 1,
        "pad_token_id": 0,
    }
    vision = {**tower, "image_size": 32, "patch_size": 8}
    torch.manual_seed(1)
    if kind == "owlv2":
        model = transformers.Owlv2ForObjectDetection(
            transformers.Owlv2Config(text_config=text, vision_config=vision, projection_dim=32)
        )
        image_processor = transformers.Owlv2ImageProcessor(size={"height": 32, "width": 32})
        processor = transformers.Owlv2Processor(image_processor=image_processor, tokenizer=tokenizer)
    else:
        model = transformers.OwlViTForObjectDetection(
            transformers.OwlViTConfig(text_config=text, vision_config=vision, projection_dim=32)
        )
        image_processor = transformers.OwlViTImageProcessor(
            size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32}
        )
        processor = transformers.OwlViTProcessor(image_processor=image_processor, tokenizer=tokenizer)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


class ForwardLog:
    """The inputs of every forward pass of a model (a torch forward pre-hook)."""

    def __init__(self, model: Any) -> None:
        self.calls: list[dict[str, tuple[int, ...]]] = []
        model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        self.calls.append({k: tuple(v.shape) for k, v in kwargs.items() if hasattr(v, "shape")})
