"""Write a tiny, randomly initialised Qwen2.5-VL into a folder, for the vLLM integration tests.

Run it with the Python of the vLLM environment (it needs torch, transformers and tokenizers):

    .venv-vllm/bin/python scripts/make_tiny_qwen.py OUT_DIR

The folder holds what vLLM loads for a real Qwen2.5-VL checkpoint: `config.json` (the real
architecture at toy size: text hidden 128, 2 layers; vision depth 2, hidden 64, patch 14, spatial
merge 2, temporal patch 2; about 1.6 M parameters), `model.safetensors`, a byte-level BPE
tokenizer trained here on generated English with Qwen's special tokens, a chat template in Qwen's
prompt format, and the image processor's configuration. Everything is seeded, so two builds are
the same model; its answers are visible ASCII noise (it never picks a special or unprintable
token), which is all the tests need from it.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

VOCAB_SIZE = 3072  # trained tokens; Qwen's special tokens come after them
MAX_PIXELS = 28 * 28 * 64  # at most 64 image tokens per image after the 2x2 merge: long documents stay small
MIN_PIXELS = 28 * 28 * 4

# Qwen2.5-VL's special tokens, in Qwen's order (ids follow the trained vocabulary here).
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen's chat format: a default system turn, `<|im_start|>role\n...<|im_end|>\n` per message, each
# image as <|vision_start|><|image_pad|><|vision_end|> where it stands in the content. No whitespace
# control: the template has no layout whitespace, and the newlines are Qwen's.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}"
    "{% if messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' or 'image' in part %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}"
    "{{ part['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "<|im_start|>assistant\n"
    "{% endif %}"
)

WORDS = (
    "the a an of to in on at for with from by and or not is are was were be this that which what where "
    "image picture photo object objects box boxes bounding coordinates left right top bottom middle "
    "red green blue yellow black white circle square shape shapes count number how many answer question "
    "option options letter choose given single word phrase json list find locate find instance instances "
    "apple river lantern violet harbor pepper meadow copper falcon orchid committee market train library "
    "bakery rain barges mill visitors budget needle document text reasoning retrieval counting referring "
    "comparison first second both pair person dog cat car tree cup table chair window door"
).split()


def corpus(seed: int, lines: int = 4000) -> list[str]:
    """Generated training text: words, digits, JSON-ish and punctuation, as benchmark prompts hold."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        numbers = [str(rng.randint(0, 1000)) for _ in range(4)]
        out.append(" ".join(words).capitalize() + ". ")
        out.append('{"bbox_2d": [' + ", ".join(numbers) + '], "label": "' + rng.choice(WORDS) + '"}\n')
        out.append(f"({chr(65 + rng.randint(0, 3))}) {rng.choice(WORDS)}? ")
    return out


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
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 32768,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return ids


def unprintable_ids(out: Path, special: Iterable[str] = SPECIAL_TOKENS) -> list[int]:
    """Ids of the tokens that are `special` or do not decode to printable ASCII on their own."""
    from tokenizers import Tokenizer

    special = set(special)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    bad = []
    for i in range(tok.get_vocab_size()):
        text = tok.decode([i], skip_special_tokens=False)
        if tok.id_to_token(i) in special or not text or not text.isascii() or not (text.isprintable() or text.isspace()):
            bad.append(i)
    return bad


def model_config(ids: dict[str, int], vocab: int) -> dict:
    """Qwen2.5-VL's architecture at toy size."""
    return {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "torch_dtype": "float32",
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen2_5_vl_text",
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
            "model_type": "qwen2_5_vl_vision",
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 256,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": [1],
            "out_hidden_size": 128,
            "tokens_per_second": 2,
            "torch_dtype": "float32",
        },
    }


def write_processor_files(out: Path) -> None:
    """The image processor's configuration, as Qwen2.5-VL's checkpoints ship it."""
    image = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
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


def save_model(out: Path, ids: dict[str, int], config_dict: dict, classes: tuple[Any, Any], seed: int, zeroed: list[int]) -> int:
    """The model of `config_dict` (`classes`: its transformers config and model classes), seeded,
    with the output rows of the `zeroed` token ids set to 0, saved with its generation config into
    `out`; its parameter count. Shared by the tiny-model scripts of the vLLM suite and CI.

    A zero output row gives a token logit 0 while the best of ~2,800 random logits is positive.
    Zeroing the special tokens and those that are not printable ASCII (a lone byte of a UTF-8
    sequence decodes to nothing) makes every reply visible text that runs to max_tokens: the model
    never ends early and never answers an empty string."""
    import torch

    config_cls, model_cls = classes
    config = config_cls(**{k: v for k, v in config_dict.items() if k not in ("architectures", "model_type")})
    config.architectures = config_dict["architectures"]
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32).eval()
    if zeroed:
        with torch.no_grad():
            model.lm_head.weight[zeroed] = 0.0
    model.save_pretrained(out, safe_serialization=True)
    generation = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
    }
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    return sum(p.numel() for p in model.parameters())


def run(argv: list[str], script: str, title: str, build: Callable[[Path], int]) -> int:
    """The command line of a tiny-model script: `script OUT_DIR`."""
    if len(argv) != 1:
        print(f"usage: {script} OUT_DIR", file=sys.stderr)
        return 2
    params = build(Path(argv[0]))
    print(f"tiny {title} written to {argv[0]} ({params / 1e6:.2f} M parameters)")
    return 0


def build(out: Path, seed: int = 0) -> int:
    """Write the whole model folder; return its parameter count."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(out, seed)
    classes = (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration)
    params = save_model(out, ids, model_config(ids, max(ids.values()) + 1), classes, seed, unprintable_ids(out))
    write_processor_files(out)
    return params


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:], "make_tiny_qwen.py", "Qwen2.5-VL", build))
