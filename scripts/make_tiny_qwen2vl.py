"""Write a tiny, randomly initialised Qwen2-VL (the family MC-Bench's finetuned baseline tuned) into
a folder, for the fine-tuning loop's tests (tests/finetune).

    .venv-llamafactory/bin/python scripts/make_tiny_qwen2vl.py OUT_DIR

The same toy sizes, tokenizer (byte-level BPE with Qwen's special tokens) and chat template as
scripts/make_tiny_qwen.py's Qwen2.5-VL, with Qwen2-VL's architecture: text hidden 128, 2 layers;
vision depth 2, embed 64, patch 14, spatial merge 2, temporal patch 2. Unlike that model, no output
row is zeroed: the grounding tokens and `<|im_end|>` must stay reachable, since training teaches
the model to write them. Seeded: two builds are the same model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_tiny_qwen import MAX_PIXELS, MIN_PIXELS, build_tokenizer, run, save_model  # noqa: E402


def model_config(ids: dict[str, int], vocab: int) -> dict:
    """Qwen2-VL's architecture at toy size."""
    return {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "torch_dtype": "float32",
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen2_vl_text",
            "vocab_size": vocab,
            "hidden_size": 128,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
        },
        "vision_config": {
            "model_type": "qwen2_vl",
            "depth": 2,
            "embed_dim": 64,
            "hidden_size": 128,
            "mlp_ratio": 2,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "torch_dtype": "float32",
        },
    }


def write_processor_files(out: Path) -> None:
    """The image processor's configuration, as Qwen2-VL's checkpoints ship it."""
    image = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2VLProcessor",
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
        "rescale_factor": 1 / 255,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "min_pixels": MIN_PIXELS,
        "max_pixels": MAX_PIXELS,
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 2,
    }
    (out / "preprocessor_config.json").write_text(json.dumps(image, indent=2))


def build(out: Path, seed: int = 0) -> int:
    """Write the whole model folder; return its parameter count (no output row zeroed: see above)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(out, seed)
    classes = (Qwen2VLConfig, Qwen2VLForConditionalGeneration)
    params = save_model(out, ids, model_config(ids, max(ids.values()) + 1), classes, seed, [])
    write_processor_files(out)
    return params


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:], "make_tiny_qwen2vl.py", "Qwen2-VL", build))
