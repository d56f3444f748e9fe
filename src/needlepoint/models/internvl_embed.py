"""The MM-NIAH authors' retriever, OpenGVLab/InternVL-14B-224px in InternVL-G mode, loaded in this
process through `transformers` with the model's own remote code.

Written from the model card and the authors' `prepare_rag.py` as far as they could be read here;
NOT run here: the weights (14B parameters, about 28 GB in bfloat16) cannot be downloaded in this
project's sandbox and need a GPU. What it does, as the authors do:

- tokenizer: `AutoTokenizer.from_pretrained(path, use_fast=False, add_eos_token=True)` (LLaMA's,
  adding BOS and EOS), `pad_token_id = 0`;
- texts (already prefixed with `summarize:` by the caller): tokenised to 80 tokens, truncated and
  padded to that length, `model.encode_text(text=input_ids)` in batches of 8;
- images: `CLIPImageProcessor.from_pretrained(path)`, RGB, `model.encode_image(image=pixel_values,
  mode="InternVL-G")` in batches of 8; weights and inputs in bfloat16;
- vectors L2-normalised (in float32 here, after the bfloat16 forward pass);
- token counts: `len(tokenizer(piece).input_ids) - 1` is the authors' cost of a piece; the
  `Embedder` protocol counts without special tokens and the selection adds one, so this class
  returns `len(tokenizer(piece).input_ids) - 2` (BOS and EOS off), which gives the same cost.

torch and transformers come with the optional extra (`pip install -e '.[rag]'`, the same as
'.[models]') and are imported only when the model is loaded; `trust_remote_code=True` runs the
model folder's own Python code, as the model card requires.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.models.embeddings import normalise
from needlepoint.models.extra import ThreadedEmbedder, require_models, rgb_image

__all__ = ["BATCH", "TEXT_TOKENS", "InternVLEmbedder", "is_internvl"]

TEXT_TOKENS = 80
BATCH = 8
FEATURE = "--embed-backend transformers"


def is_internvl(config: dict[str, Any]) -> bool:
    """Whether a model folder's config.json describes InternVL's CLIP-style model (InternVL-14B-224px,
    `InternVLModel`), whose remote code has `encode_text` and `encode_image(mode=...)`."""
    names = [str(config.get("model_type", "")), *map(str, config.get("architectures") or [])]
    return any(n.lower() in ("internvl", "internvlmodel") for n in names)


class InternVLEmbedder(ThreadedEmbedder):
    """InternVL-14B-224px's text encoder and InternVL-G image encoder (see the module docstring)."""

    def __init__(self, name: str, model: Any, tokenizer: Any, image_processor: Any, device: str = "cuda") -> None:
        torch, _ = require_models(FEATURE)
        if not (hasattr(model, "encode_text") and hasattr(model, "encode_image")):
            raise DataError(f"{name} has no encode_text / encode_image; pass InternVL-14B-224px or a CLIP or SigLIP model")
        self._torch = torch
        self.name = name
        self.device = device
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path_or_id: str, device: str = "cuda") -> InternVLEmbedder:
        """Load the model (bfloat16, remote code), its slow LLaMA tokenizer with EOS added and pad
        id 0, and its CLIP image processor, from a local folder or the local Hugging Face cache."""
        torch, transformers = require_models(FEATURE)
        try:
            model = transformers.AutoModel.from_pretrained(
                path_or_id, torch_dtype=torch.bfloat16, low_cpu_mem_usage=True, trust_remote_code=True, local_files_only=True
            )
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                path_or_id, use_fast=False, add_eos_token=True, trust_remote_code=True, local_files_only=True
            )
            processor = transformers.CLIPImageProcessor.from_pretrained(path_or_id, local_files_only=True)
        except (OSError, ValueError, ImportError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
            raise DataError(
                f"cannot load the InternVL retriever {path_or_id!r} ({first}); pass a local folder of "
                "OpenGVLab/InternVL-14B-224px (config, weights, remote code, tokenizer, preprocessor) to --embed-model"
            ) from None
        tokenizer.pad_token_id = 0
        try:
            model = model.to(device).eval()
        except (RuntimeError, AssertionError) as exc:
            raise DataError(f"cannot put {path_or_id!r} on --embed-device {device} ({exc})") from None
        return cls(path_or_id, model, tokenizer, processor, device)

    def _texts_sync(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        rows = []
        with torch.inference_mode():
            ids = self.tokenizer(
                texts, return_tensors="pt", max_length=TEXT_TOKENS, truncation=True, padding="max_length"
            ).input_ids
            for chunk in torch.split(ids, BATCH):
                rows.append(self.model.encode_text(text=chunk.to(self.device)).float().cpu().numpy())
        return normalise(np.concatenate(rows))

    def _images_sync(self, images: list[ImageRef]) -> np.ndarray:
        torch = self._torch
        rows = []
        with torch.inference_mode():
            for i in range(0, len(images), BATCH):
                pil = [rgb_image(ref) for ref in images[i : i + BATCH]]
                pixels = self.image_processor(images=pil, return_tensors="pt").pixel_values.to(torch.bfloat16).to(self.device)
                rows.append(self.model.encode_image(image=pixels, mode="InternVL-G").float().cpu().numpy())
        return normalise(np.concatenate(rows))

    def _counts_sync(self, texts: list[str]) -> list[int]:
        """The authors' count minus one: BOS and EOS off (see the module docstring)."""
        return [len(self.tokenizer(t).input_ids) - 2 for t in texts]
