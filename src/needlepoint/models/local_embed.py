"""Embeddings from a CLIP-family model loaded in this process through `transformers` (CLIP,
SigLIP: text and image towers), for users who have a model but no embedding server.

torch and transformers come with the optional extra `models` (`pip install -e '.[models]'`)
and are imported only when a LocalEmbedder is made. The model runs in one worker thread, one
batch at a time, so the event loop keeps serving the chat requests meanwhile. Vectors are
L2-normalised, so a dot product is the cosine, as in the authors' retriever.

The authors' retriever, InternVL-14B-224px in InternVL-G mode, is `internvl_embed.InternVLEmbedder`;
`load_embedder` picks it or LocalEmbedder from the model folder's config.json.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np

from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.models.embeddings import normalise
from needlepoint.models.extra import EXTRA, ThreadedEmbedder, require_models, rgb_image

__all__ = ["EXTRA", "LocalEmbedder", "load_embedder", "model_config", "require_models"]

FEATURE = "--embed-backend transformers"


def _features(out: Any) -> Any:
    """A features tensor from `get_*_features` (a tensor in transformers 4, an output object in 5)."""
    return out if hasattr(out, "ndim") else out.pooler_output


class LocalEmbedder(ThreadedEmbedder):
    """A CLIP or SigLIP model with its tokenizer and image processor, run on `device`; token counts
    without special tokens and untruncated."""

    def __init__(
        self, name: str, model: Any, tokenizer: Any, image_processor: Any, device: str = "cpu", batch_size: int = 32
    ) -> None:
        torch, _ = require_models(FEATURE)
        if not (hasattr(model, "get_text_features") and hasattr(model, "get_image_features")):
            raise DataError(
                f"{name} has no text and image towers (get_text_features, get_image_features); use a CLIP or SigLIP model"
            )
        self._torch = torch
        self.name = name
        self.device = device
        self.batch_size = batch_size
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        config = getattr(model.config, "text_config", model.config)
        self.max_text_tokens = int(getattr(config, "max_position_embeddings", 77))
        # SigLIP was trained on texts padded to full length, without an attention mask.
        self._padding: str | bool = "max_length" if "siglip" in str(getattr(model.config, "model_type", "")) else True
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path_or_id: str, device: str = "cpu", batch_size: int = 32) -> LocalEmbedder:
        """Load a model folder (or a Hugging Face id already in the local cache; nothing is
        downloaded at run time): model, tokenizer and image processor."""
        torch, transformers = require_models(FEATURE)
        try:
            model = transformers.AutoModel.from_pretrained(path_or_id, local_files_only=True)
            tokenizer = transformers.AutoTokenizer.from_pretrained(path_or_id, local_files_only=True)
            processor = transformers.AutoImageProcessor.from_pretrained(path_or_id, local_files_only=True)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
            raise DataError(
                f"cannot load the embedding model {path_or_id!r} ({first}); pass a local folder with its "
                "config, weights, tokenizer and preprocessor files to --embed-model"
            ) from None
        try:
            return cls(path_or_id, model, tokenizer, processor, device, batch_size)
        except (RuntimeError, AssertionError) as exc:  # an unusable device
            raise DataError(f"cannot put {path_or_id!r} on --embed-device {device} ({exc})") from None

    def _texts_sync(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        rows = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(
                    texts[i : i + self.batch_size],
                    padding=self._padding,
                    truncation=True,
                    max_length=self.max_text_tokens,
                    return_tensors="pt",
                ).to(self.device)
                rows.append(_features(self.model.get_text_features(**enc)).float().cpu().numpy())
        return normalise(np.concatenate(rows))

    def _images_sync(self, images: list[ImageRef]) -> np.ndarray:
        torch = self._torch
        rows = []
        with torch.inference_mode():
            for i in range(0, len(images), self.batch_size):
                pil = [rgb_image(ref) for ref in images[i : i + self.batch_size]]
                pixels = self.image_processor(images=pil, return_tensors="pt")["pixel_values"].to(self.device)
                rows.append(_features(self.model.get_image_features(pixel_values=pixels)).float().cpu().numpy())
        return normalise(np.concatenate(rows))

    def _counts_sync(self, texts: list[str]) -> list[int]:
        return [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) if t else 0 for t in texts]


def model_config(path_or_id: str) -> dict[str, Any]:
    """The config.json of a model folder, or of a Hugging Face id in the local cache ({} when there
    is none to read: the loader then says what is missing)."""
    folder = Path(path_or_id).expanduser()
    path: Path | None = folder / "config.json" if folder.is_dir() else None
    if path is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(path_or_id, "config.json")
            path = Path(found) if isinstance(found, str) else None
        except ImportError:
            path = None
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path is not None and path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_embedder(path_or_id: str, device: str = "cpu") -> Any:
    """The local embedder for a model: InternVL-14B-224px (InternVL-G mode, remote code) when its
    config says InternVL, else a CLIP or SigLIP model through LocalEmbedder."""
    from needlepoint.models.internvl_embed import InternVLEmbedder, is_internvl

    require_models(FEATURE)
    if is_internvl(model_config(path_or_id)):
        return InternVLEmbedder.load(path_or_id, device)
    return LocalEmbedder.load(path_or_id, device)
