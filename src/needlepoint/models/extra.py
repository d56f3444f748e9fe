"""What models run in this process share: the optional `models` extra (torch, transformers), imported
only when such a model is used, and images decoded for them."""

from __future__ import annotations

import io
from typing import Any

from needlepoint.conversation import ImageRef
from needlepoint.errors import DataError
from needlepoint.images import read_image

__all__ = ["EXTRA", "INSTALL", "require_models", "rgb_image"]

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
