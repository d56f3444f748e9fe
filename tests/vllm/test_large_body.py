"""A request body of megabytes goes out as its pieces (models/http.Pieces, never joined): vLLM reads
it as the same request as the joined body: the same prompt tokens, its images expanded, and the
same reply."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
from helpers.images import in_memory
from helpers.servers import count_piece_writes
from PIL import Image

from needlepoint.core.conversation import Conversation, Generation, Message, Reply
from needlepoint.models import openai_compat
from needlepoint.models.openai_compat import PIECES_FROM_BYTES, OpenAICompatModel

from .conftest import MODEL_NAME, Servers

pytestmark = pytest.mark.vllm


def _noisy_jpeg(seed: int) -> bytes:
    """A 700x700 JPEG of noise: about 600 KB, so two make a body over PIECES_FROM_BYTES."""
    pixels = np.random.default_rng(seed).integers(0, 255, (700, 700, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def test_a_body_sent_in_pieces_is_the_request_vllm_reads_joined(servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    images = [_noisy_jpeg(1), _noisy_jpeg(2)]
    refs = [in_memory(f"noise-{i}.jpg", data) for i, data in enumerate(images)]
    conversation = Conversation([Message("user", ["What is in these two pictures?", *refs])])
    generation = Generation(max_tokens=8, timeout_s=300)

    async def ask() -> Reply:
        model = OpenAICompatModel(MODEL_NAME, [servers.open.url])
        try:
            return await model.complete(conversation, generation)
        finally:
            await model.aclose()

    written = count_piece_writes(monkeypatch)
    in_pieces = asyncio.run(ask())
    monkeypatch.setattr(openai_compat, "PIECES_FROM_BYTES", 1 << 40)  # the same request, joined
    joined = asyncio.run(ask())

    assert in_pieces.error is None, in_pieces.error
    assert joined.error is None, joined.error
    assert written == [5]  # text, image, text, image, text: only the first request went in pieces
    assert in_pieces.request_bytes == joined.request_bytes > PIECES_FROM_BYTES
    assert in_pieces.usage is not None and joined.usage is not None
    assert in_pieces.usage["prompt_tokens"] == joined.usage["prompt_tokens"] > 2 * 4  # both images reached the model
    assert in_pieces.text == joined.text
