"""What a model was sent, as a record keeps it: the messages of a request with the text verbatim
and each image by its path (its key: relative to the benchmark's images folder, as the data file
names it), the sha256 of its stored bytes, and the size it was sent at (width, height, bytes of
the JPEG the client sends: `images.encode_jpeg`, the one encoder). Never the bytes.

Each image is described once per run (a bounded cache keyed by the image, its path, the size asked
for and the re-encoding rule; `forget_described` empties it as a run starts), not once per request:
within a run an image's file is taken to stay as it is, as the client's own cache of what it sends
takes it (`images.ImageCache`), and a file rewritten between two runs of one process is read again.
New images are described in threads of their own (`_describers`), not the event loop's default
executor: a description is for the record, written after the reply, while the reading in that
executor is what a request waits for. Sharing it, descriptions took its threads (64 long
documents of 40 new images each at a run's start: their requests were ready over 140 ms instead
of 30; docs/performance.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from needlepoint.core.conversation import Conversation, ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.images import ON_LOOP_IMAGES, encode_jpeg, jpeg_header, read_image

__all__ = ["describe_image", "forget_described", "sent_messages"]

_MAX_ITEMS = 100_000
_cache: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the process that made it, the threads)


def _describers() -> ThreadPoolExecutor:
    """The threads that describe new images, one pool a process (made again in a forked worker:
    threads do not survive a fork). Reading and hashing release the interpreter lock: up to a
    thread a core, eight at most."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(min(8, os.cpu_count() or 1), thread_name_prefix="needlepoint-describe"))
    return _pool[1]


def _cache_key(ref: ImageRef, reencode: bool) -> tuple[Any, ...]:
    return (ref.key, ref.path, ref.max_side, reencode)


def forget_described() -> None:
    """Empty the cache of image descriptions (a run starts: its files are read afresh)."""
    with _lock:
        _cache.clear()


def _cached(keys: list[tuple[Any, ...]]) -> list[dict[str, Any] | None]:
    """The cached descriptions of `keys` (None where there is none), under one lock: a document
    names dozens of images."""
    out: list[dict[str, Any] | None] = []
    with _lock:
        for key in keys:
            got = _cache.get(key)
            if got is not None:
                _cache.move_to_end(key)
            out.append(got)
    return out


def describe_image(ref: ImageRef, reencode: bool = False) -> dict[str, Any]:
    """An image as a turn's `sent` names it: {type, path, sha256, width, height, bytes} (the
    digest of the stored bytes; width, height and bytes of what is sent). Blocking; cached."""
    key = _cache_key(ref, reencode)
    got = _cached([key])[0]
    if got is not None:
        return got
    data = read_image(ref)
    sent = encode_jpeg(ref, reencode, data)
    head = jpeg_header(sent)
    if head is None:
        from needlepoint.core.images import decode_rgb

        width, height = decode_rgb(sent, ref.key).size
    else:
        width, height = head[0], head[1]
    got = {
        "type": "image",
        "path": ref.key,
        "sha256": hashlib.sha256(data).hexdigest(),
        "width": int(width),
        "height": int(height),
        "bytes": len(sent),
    }
    with _lock:
        _cache[key] = got
        while len(_cache) > _MAX_ITEMS:
            _cache.popitem(last=False)
    return got


async def sent_messages(conversation: Conversation, reencode: bool = False) -> list[dict[str, Any]]:
    """The messages of a request as sent, JSON-ready: [{role, content: [{type: text, text} |
    image description]}], text parts as the client sends them (an all-text message is one text).
    An image that cannot be read is described by its path and the reason."""
    loop = asyncio.get_running_loop()
    refs = [im for m in conversation.messages for im in m.images]
    cached = _cached([_cache_key(r, reencode) for r in refs])
    missing = [r for r, got in zip(refs, cached) if got is None]
    if len(missing) > ON_LOOP_IMAGES:  # a document of many new images: described in one thread
        fresh = await loop.run_in_executor(_describers(), lambda: [_described(r, reencode) for r in missing])
    else:
        fresh = [await loop.run_in_executor(_describers(), _described, r, reencode) for r in missing]
    new = iter(fresh)
    images = iter([got if got is not None else next(new) for got in cached])
    out: list[dict[str, Any]] = []
    for m in conversation.messages:
        if not m.images:
            out.append({"role": m.role, "content": [{"type": "text", "text": m.text}]})
            continue
        content: list[dict[str, Any]] = []
        for p in m.parts:
            if isinstance(p, str):
                if p:
                    content.append({"type": "text", "text": p})
                continue
            content.append(dict(next(images)))
        out.append({"role": m.role, "content": content})
    return out


def _described(ref: ImageRef, reencode: bool) -> dict[str, Any]:
    """`describe_image`, or the image's path and why it cannot be read (blocking)."""
    try:
        return describe_image(ref, reencode)
    except DataError as exc:
        return {"type": "image", "path": ref.key, "error": str(exc)}
