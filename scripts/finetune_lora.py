"""LoRA on a Qwen2-VL with PEFT directly, on the data `needlepoint build mc_bench_sft` wrote
(sharegpt layout), then the adapter merged into one model folder that vLLM serves. The CPU
stand-in for LLaMA-Factory in the fine-tuning loop's test (tests/finetune): LLaMA-Factory 0.9.5
cannot run beside PyPI's torch CPU build (docs/training-data.md says why). It reads the LoRA
settings from the LLaMA-Factory config given, so both train the same adapter.

    python scripts/finetune_lora.py CONFIG.yaml DATA_DIR MODEL_DIR OUT_DIR

Writes OUT_DIR/adapter/ (PEFT), OUT_DIR/merged/ (the merged model with the base's tokenizer and
processor files) and OUT_DIR/trainer_log.json (`losses`: the loss of every step).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


def read_config(path: Path) -> dict:
    """The `key: value` lines of a LLaMA-Factory YAML config (flat, as its examples are)."""
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def encode(sample: dict, tokenizer, image_processor, merge: int) -> dict:  # type: ignore[no-untyped-def]
    """One sharegpt sample as Qwen2-VL's inputs: the chat template's text with each image's tokens
    expanded, and labels on the assistant's turn only (as LLaMA-Factory's `qwen2_vl` template)."""
    from PIL import Image

    images = [Image.open(p).convert("RGB") for p in sample["images"]]
    vision = image_processor(images=images, return_tensors="pt")
    counts = [int(t.prod()) // (merge * merge) for t in vision["image_grid_thw"]]
    user, answer = sample["messages"][0]["content"], sample["messages"][1]["content"]
    pieces = user.split("<image>")
    prompt = pieces[0]
    for n, piece in zip(counts, pieces[1:]):
        prompt += IMAGE.replace("<|image_pad|>", "<|image_pad|>" * n) + piece
    prompt_ids = tokenizer.encode(SYSTEM + "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n").ids
    answer_ids = tokenizer.encode(answer + "<|im_end|>").ids
    pad = tokenizer.token_to_id("<|image_pad|>")
    return {
        "input_ids": prompt_ids + answer_ids,
        "mm_token_type_ids": [1 if t == pad else 0 for t in prompt_ids + answer_ids],  # M-RoPE: which tokens are image
        "labels": [-100] * len(prompt_ids) + answer_ids,
        "pixel_values": vision["pixel_values"],
        "image_grid_thw": vision["image_grid_thw"],
    }


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: finetune_lora.py CONFIG.yaml DATA_DIR MODEL_DIR OUT_DIR", file=sys.stderr)
        return 2
    import torch
    from peft import LoraConfig, get_peft_model
    from tokenizers import Tokenizer
    from transformers import Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil  # PIL: no torchvision beside the CPU torch

    config_path, data_dir, model_dir, out = (Path(a) for a in argv)
    cfg = read_config(config_path)
    torch.manual_seed(int(cfg.get("seed", 42)))
    samples = json.loads((data_dir / f"{cfg['dataset']}.json").read_text(encoding="utf-8"))
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(model_dir)
    model = Qwen2VLForConditionalGeneration.from_pretrained(model_dir, torch_dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # lora_target: all (the LLM)
    lora = LoraConfig(r=int(cfg["lora_rank"]), lora_alpha=int(cfg["lora_alpha"]), target_modules=targets, lora_dropout=0.0)
    extra = [m.strip() for m in str(cfg.get("additional_target") or "").split(",") if m.strip()]  # e.g. lm_head
    # the language model's linear layers (the vision tower frozen, as freeze_vision_tower), and any additional_target
    lora.target_modules = rf"(.*language_model.*\.({'|'.join(targets)}))" + "".join(f"|({m})" for m in extra)
    model = get_peft_model(model, lora)
    merge = int(image_processor.merge_size)
    encoded = [encode(s, tokenizer, image_processor, merge) for s in samples]
    steps = int(cfg["max_steps"])
    batch = int(cfg["per_device_train_batch_size"]) * int(cfg.get("gradient_accumulation_steps", 1))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=float(cfg["learning_rate"]))
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    rng = random.Random(0)
    order: list[int] = []
    losses = []
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        total = 0.0
        for _ in range(batch):
            if not order:
                order = list(range(len(encoded)))
                rng.shuffle(order)
            e = encoded[order.pop()]
            result = model(
                input_ids=torch.tensor([e["input_ids"]]),
                labels=torch.tensor([e["labels"]]),
                mm_token_type_ids=torch.tensor([e["mm_token_type_ids"]]),
                pixel_values=e["pixel_values"],
                image_grid_thw=e["image_grid_thw"],
            )
            (result.loss / batch).backward()
            total += float(result.loss) / batch
        optimizer.step()
        scheduler.step()
        losses.append(total)
        print(f"step {len(losses)}/{steps} loss {total:.4f}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "adapter")
    merged = model.merge_and_unload()
    merged.save_pretrained(out / "merged", safe_serialization=True)
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "preprocessor_config.json",
        "generation_config.json",
    ):
        shutil.copy(model_dir / name, out / "merged" / name)
    (out / "trainer_log.json").write_text(json.dumps({"losses": losses, "samples": len(encoded), "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
