"""What a model was sent, as a record keeps it: the messages of a request with the text verbatim
(a long document's parts by their length and ends: `records.kept_texts`) and each image by its
path (its key: relative to the benchmark's images folder, as the data file names it), the size
it was sent at (width, height, bytes of the JPEG the client sends:
`images.encode_jpeg`, the one encoder), and what identifies the stored image: an image file by
its size and modification time (`file_bytes`, `mtime_ns`: `images.file_facts`), bytes loaded
otherwise (a parquet row, a merged canvas) by their sha256. Never the bytes. Under --local-images
the server reads the file, and the client reads only its header.

A description is taken from what the request read of the image (`images.NOTED`: the client notes
it as it reads the bytes, and a record waits for an image being transcoded in a worker thread),
so a sample reads each image once; only an image the request did not read (a big file
its decoder read, a cached base64, a call answered from the call cache) is read here.

Each image is described once per run (a bounded cache keyed by the image, its path, the size asked
for and the re-encoding rule; `forget_described` empties it as a run starts), not once per request:
within a run an image's file is taken to stay as it is, as the client's own cache of what it sends
takes it (`images.ImageCache`), and a file rewritten between two runs of one process is read again.
New images are described in threads of their own (`_describers`), not the event loop's default
executor: a description is for the record, written after the reply, while the transcoding in that
executor is what a request waits for. Sharing it, descriptions took its threads (64 long
documents of 40 new images each at a run's start: their requests were ready over 140 ms instead
of 30; docs/performance.md).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from needlepoint.core.conversation import Conversation, ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.images import NOTED, ON_LOOP_IMAGES, encode_jpeg, facts_key, read_image_status, stored_facts
from needlepoint.core.records import kept_texts

__all__ = ["describe_image", "forget_described", "sent_messages", "stop_describing"]

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


def stop_describing() -> None:
    """End this process's describing threads (a run has answered: nothing more to describe; an
    idle thread left behind would keep the run's end from sharing its intervals with a forked
    helper, stats.scoring). The next description starts them again."""
    global _pool
    pool, _pool = _pool, None
    if pool is not None and pool[0] == os.getpid():
        pool[1].shutdown(wait=True)


def _cache_key(ref: ImageRef, reencode: bool) -> tuple[Any, ...]:
    return facts_key(ref, reencode)


def forget_described() -> None:
    """Empty the cache of image descriptions, and the requests' notes (a run starts: its files are
    read afresh)."""
    with _lock:
        _cache.clear()
    NOTED.clear()


def _keep(key: tuple[Any, ...], got: dict[str, Any]) -> None:
    """Cache a description (caller holds `_lock`)."""
    _cache[key] = got
    while len(_cache) > _MAX_ITEMS:
        _cache.popitem(last=False)


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
    """An image as a turn's `sent` names it (`images.stored_facts`: width, height and bytes of
    what is sent; the file's size and modification time, or the sha256 of bytes loaded otherwise).
    Blocking; cached."""
    key = _cache_key(ref, reencode)
    got = _cached([key])[0]
    if got is not None:
        return got
    data, st = read_image_status(ref)
    got = stored_facts(ref, data, encode_jpeg(ref, reencode, data), st=st)
    with _lock:
        _keep(key, got)
    return got


async def _noted(keys: list[tuple[Any, ...]], cached: list[dict[str, Any] | None]) -> None:
    """Fill the gaps of `cached` from what the requests read (images.NOTED), waiting for a read
    still under way in a worker thread; what was found is cached for the run."""
    gaps = [k for k, got in enumerate(cached) if got is None]
    if not gaps:
        return
    noted = NOTED.lookup([keys[k] for k in gaps])
    loop = asyncio.get_running_loop()
    reading = {id(f): f for f in noted if isinstance(f, asyncio.Future) and f.get_loop() is loop}
    if reading:  # the request's own read of these images: its descriptions, not a second read
        await asyncio.wait(list(reading.values()))  # never cancels the read; its errors are the request's
        noted = NOTED.lookup([keys[k] for k in gaps])
    with _lock:
        for k, got in zip(gaps, noted):
            if isinstance(got, dict):
                cached[k] = got
                _keep(keys[k], got)


async def sent_messages(conversation: Conversation, reencode: bool = False) -> list[dict[str, Any]]:
    """The messages of a request as sent, JSON-ready: [{role, content: [{type: text, text} |
    image description]}], text parts as the client sends them (an all-text message is one text;
    in a long document, by their ends: `records.kept_texts`).
    An image that cannot be read is described by its path and the reason."""
    loop = asyncio.get_running_loop()
    refs = [im for m in conversation.messages for im in m.images]
    keys = [_cache_key(r, reencode) for r in refs]
    cached = _cached(keys)
    await _noted(keys, cached)
    missing = [r for r, got in zip(refs, cached) if got is None]
    if len(missing) > ON_LOOP_IMAGES:  # a document of many new images: described in one thread
        fresh = await loop.run_in_executor(_describers(), lambda: [_described(r, reencode) for r in missing])
    else:
        fresh = [await loop.run_in_executor(_describers(), _described, r, reencode) for r in missing]
    new = iter(fresh)
    images = iter([got if got is not None else next(new) for got in cached])
    texts = [[m.text] if not m.images else [p for p in m.parts if isinstance(p, str) and p] for m in conversation.messages]
    kept = iter(kept_texts([t for ts in texts for t in ts]))
    out: list[dict[str, Any]] = []
    for m in conversation.messages:
        if not m.images:
            out.append({"role": m.role, "content": [next(kept)]})
            continue
        content: list[dict[str, Any]] = []
        for p in m.parts:
            if isinstance(p, str):
                if p:
                    content.append(next(kept))
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
