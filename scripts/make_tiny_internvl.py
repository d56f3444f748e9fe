"""Write a tiny, randomly initialised InternVL3 (transformers' native format) into a folder, for the
vLLM integration tests of a second model family (tests/vllm/test_second_family.py).

Run it with the Python of the vLLM environment (it needs torch, transformers and tokenizers):

    .venv-vllm/bin/python scripts/make_tiny_internvl.py OUT_DIR

The folder is laid out as the `OpenGVLab/InternVL3-*-hf` checkpoints are, which vLLM serves as
`InternVLForConditionalGeneration` (model_type `internvl`): `config.json` (InternViT + pixel
shuffle + MLP projector + a Qwen2 language model, at toy size: text hidden 128, 2 layers; vision
2 layers, hidden 64, patch 14, tiles of 56 x 56 pixels, so 4 image tokens a tile after the 2 x 2
pixel shuffle, at most 4 tiles and a thumbnail an image), `model.safetensors`, a byte-level BPE
tokenizer trained here (make_tiny_qwen.py's corpus) carrying Qwen2.5's special tokens and
InternVL's (`<img>`, `</img>`, `<IMG_CONTEXT>`, `<quad>`, `</quad>`, `<ref>`, `</ref>`, `<box>`,
`</box>`, `<video>`), the chat template those checkpoints ship (ChatML turns, each image part as
`<IMG_CONTEXT>` and a newline, no default system turn), and the image, video and processor
configurations of `InternVLProcessor`. Seeded: two builds are the same model. As with the tiny
Qwen, every reply is visible ASCII noise that runs to max_tokens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_tiny_qwen import SPECIAL_TOKENS as QWEN_SPECIAL_TOKENS  # noqa: E402
from make_tiny_qwen import VOCAB_SIZE, corpus, run, save_model, unprintable_ids  # noqa: E402

# InternVL's own tokens, after Qwen2.5's, in the order InternVL3's tokenizers add them. `<video>` is
# the video placeholder of the native format (vLLM needs it to be one token).
INTERNVL_TOKENS = ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>", "<video>"]
SPECIAL_TOKENS = [*QWEN_SPECIAL_TOKENS, *INTERNVL_TOKENS]

# The roles InternVLProcessor reads off the tokenizer (`tokenizer.start_image_token` and so on).
EXTRA_SPECIAL_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}

TILE = 56  # pixels a side of one tile (448 in the real model)
PATCH = 14
DOWNSAMPLE = 0.5  # the pixel shuffle: 2 x 2 patches become one token
IMAGE_SEQ_LENGTH = int((TILE // PATCH) ** 2 * DOWNSAMPLE**2)  # image tokens a tile: 4
MAX_TILES = 4  # the real model allows 12; the thumbnail comes on top when an image is cut in tiles

# The chat template of the InternVL3-*-hf checkpoints (transformers' conversion writes it): a
# `<|im_start|>role\n ... <|im_end|>\n` turn per message, an image part as `<IMG_CONTEXT>\n` (the
# processor expands it to `<img>`, the tile tokens and `</img>`), a video part as `<video>\n`, text
# parts as they are. Written without layout whitespace, so the newlines are the template's own.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}"
    "{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}"
    "{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

IMAGE_MEAN = [0.485, 0.456, 0.406]  # ImageNet's, as InternVL normalises
IMAGE_STD = [0.229, 0.224, 0.225]


def build_tokenizer(out: Path, seed: int) -> dict[str, int]:
    """Train a byte-level BPE, write tokenizer.json and tokenizer_config.json; return special ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        special_tokens=[],
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.save(str(out / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    added = {
        str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
        for t in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "additional_special_tokens": SPECIAL_TOKENS[1:],
        "extra_special_tokens": EXTRA_SPECIAL_TOKENS,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 8192,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return ids


def model_config(ids: dict[str, int], vocab: int) -> dict:
    """InternVL3's architecture (InternViT, pixel shuffle, MLP projector, Qwen2) at toy size."""
    return {
        "architectures": ["InternVLForConditionalGeneration"],
        "model_type": "internvl",
        "torch_dtype": "float32",
        "image_token_id": ids["<IMG_CONTEXT>"],
        "image_seq_length": IMAGE_SEQ_LENGTH,
        "downsample_ratio": DOWNSAMPLE,
        "projector_hidden_act": "gelu",
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "default",
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen2",
            "architectures": ["Qwen2ForCausalLM"],
            "vocab_size": vocab,
            "hidden_size": 128,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
        },
        "vision_config": {
            "model_type": "internvl_vision",
            "hidden_size": 64,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": [TILE, TILE],
            "patch_size": [PATCH, PATCH],
            "num_channels": 3,
            "hidden_act": "gelu",
            "norm_type": "layer_norm",
            "layer_norm_eps": 1e-6,
            "attention_bias": True,
            "use_qk_norm": False,
            "use_absolute_position_embeddings": True,
            "use_mask_token": False,
            "use_mean_pooling": True,
            "layer_scale_init_value": 0.1,
            "torch_dtype": "float32",
        },
    }


def write_processor_files(out: Path) -> None:
    """The image, video and processor configurations, as the InternVL3-*-hf checkpoints ship them."""
    resizing = {  # what the two share, in the checkpoints' order
        "processor_class": "InternVLProcessor",
        "do_resize": True,
        "size": {"height": TILE, "width": TILE},
        "resample": 3,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": IMAGE_MEAN,
        "image_std": IMAGE_STD,
        "do_convert_rgb": True,
    }
    image = {
        "image_processor_type": "GotOcr2ImageProcessorFast",
        **resizing,
        "crop_to_patches": True,
        "min_patches": 1,
        "max_patches": MAX_TILES,
    }
    video = {"video_processor_type": "InternVLVideoProcessor", **resizing}
    processor = {"processor_class": "InternVLProcessor", "image_seq_length": IMAGE_SEQ_LENGTH}
    (out / "preprocessor_config.json").write_text(json.dumps(image, indent=2))
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2))


def build(out: Path, seed: int = 0) -> int:
    """Write the whole model folder; return its parameter count. As in make_tiny_qwen.py, the
    special and unprintable tokens' output rows are zero, so every reply is visible text that runs
    to max_tokens (never an early stop, never empty)."""
    from transformers import InternVLConfig, InternVLForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(out, seed)
    classes = (InternVLConfig, InternVLForConditionalGeneration)
    zeroed = unprintable_ids(out, SPECIAL_TOKENS)
    params = save_model(out, ids, model_config(ids, max(ids.values()) + 1), classes, seed, zeroed)
    write_processor_files(out)
    return params


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:], "make_tiny_internvl.py", "InternVL3", build))
