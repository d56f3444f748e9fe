"""What models run in this process share: the optional `models` extra (torch, transformers), imported
only when such a model is used, and images decoded for them."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.images import read_image

__all__ = ["EXTRA", "INSTALL", "ThreadedEmbedder", "require_models", "rgb_image"]

T = TypeVar("T")
R = TypeVar("R")

EXTRA = "models"
INSTALL = f"pip install -e '.[{EXTRA}]'"


def require_models(feature: str, extra: str = EXTRA) -> tuple[Any, Any]:
    """The torch and transformers modules, or DataError saying that `feature` (the flag that asked
    for a local model) needs them and how to install them (`extra`: the name of the install the
    feature's docs give, e.g. "agentic", the same packages as "models")."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise DataError(
            f"{feature} needs torch and transformers ({exc.name or exc} is missing); install them with pip install -e '.[{extra}]'"
        ) from None
    return torch, transformers


def rgb_image(ref: ImageRef) -> Any:
    """An image as an RGB PIL image at its stored size, DataError when it cannot be decoded."""
    from PIL import Image

    data = read_image(ref)
    try:
        return Image.open(io.BytesIO(data)).convert("RGB")
    except Exception as exc:  # Pillow raises many types for bad files
        raise DataError(f"image {ref.key} cannot be decoded ({exc}); replace or remove it") from None


class ThreadedEmbedder:
    """A model loaded in this process, as an embedder: its blocking `_texts_sync`, `_images_sync`
    and `_counts_sync` (a subclass's) run in a worker thread, so the event loop keeps serving the
    chat requests meanwhile, one at a time: they share the model and its tokenizer (a fast
    tokenizer raises "Already borrowed" when two threads use it at once)."""

    _lock: threading.Lock  # each subclass makes its own in __init__

    def _locked(self, fn: Callable[[T], R], arg: T) -> R:
        with self._lock:
            return fn(arg)

    async def check(self) -> None:
        """Nothing to reach: the model is loaded."""

    async def aclose(self) -> None:
        """Nothing to close (the model is released with the object)."""

    def wait_note(self) -> str | None:
        """Nothing to wait for but the model itself (the served clients name their waits)."""
        return None

    def _texts_sync(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _images_sync(self, images: list[ImageRef]) -> np.ndarray:
        raise NotImplementedError

    def _counts_sync(self, texts: list[str]) -> list[int]:
        raise NotImplementedError

    async def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised text embeddings, one row a text."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return await asyncio.get_running_loop().run_in_executor(None, self._locked, self._texts_sync, list(texts))

    async def embed_images(self, images: Sequence[ImageRef]) -> np.ndarray:
        """L2-normalised image embeddings (each image read and converted to RGB), one row an image."""
        if not images:
            return np.zeros((0, 0), dtype=np.float32)
        return await asyncio.get_running_loop().run_in_executor(None, self._locked, self._images_sync, list(images))

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts of the model's own tokenizer as the selection reads them (a long document
        has a thousand pieces)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._locked, self._counts_sync, list(texts))
