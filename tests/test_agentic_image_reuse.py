"""The agentic solver at high concurrency: the localizer reads and encodes an image once for all the
phrases of a sample (the phrases go out together, one request each with its image), not once per
phrase; the image cache that allows it stays bounded. End to end through the CLI against local
simulated servers (tests/helpers/agentic.py)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers.agentic import FMT, LOCALIZER, REASONER, agentic_args, gt_targets, scripts

from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.cli import main
from needlepoint.core.conversation import ImageRef
from needlepoint.core.images import ENTRY_BYTES, ImageCache, read_small_image_status
from needlepoint.models import openai_compat


def test_an_image_is_read_once_for_all_the_phrases_of_a_sample(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, _ = write_release(tmp_path / "data", pairs=6)
    bench = McBench(box_format=FMT)
    samples = bench.load(folder)
    reasoner_script, localizer_script = scripts(bench, samples)
    reasoner = serve(script=reasoner_script, default=None, models=(REASONER,))
    localizer = serve(script=localizer_script, default=None, models=(LOCALIZER,))

    reads: Counter[str] = Counter()
    real = read_small_image_status  # what openai_compat reads a file with, patched below

    def counting(ref: ImageRef) -> tuple[bytes | None, os.stat_result | None]:
        reads[ref.key] += 1
        return real(ref)

    monkeypatch.setattr(openai_compat, "read_small_image_status", counting)
    assert main([*agentic_args(folder, reasoner.url, localizer.url, tmp_path / "run"), "--concurrency", "8"]) == 0

    phrases: Counter[str] = Counter()  # localizer requests per image
    for sample in samples:
        for target, _ in gt_targets(samples, sample):
            phrases[sample.images[target["image"]].key] += 1
    assert len(localizer.requests) == sum(phrases.values())
    assert max(phrases.values()) >= 3  # some image is asked about three times or more
    # each image read twice at most: once for the reasoner's request, once for all its phrases
    assert set(reads) == {im.key for s in samples for im in s.images}
    assert max(reads.values()) == 2


def test_an_image_cache_from_the_first_use_stays_bounded() -> None:
    cache = ImageCache(max_bytes=1000, from_first=True)
    refs = [ImageRef(key=f"im{k}.jpg") for k in range(5)]
    cache.put(refs[0], b"a" * 100)
    assert cache.get(refs[0]) == b"a" * 100  # kept from its first offer
    for ref in refs[1:]:
        cache.put(ref, b"b" * 130)  # over max_bytes // 8 each: not kept
    assert all(cache.get(ref) is None for ref in refs[1:])
    small = [ImageRef(key=f"s{k}.jpg") for k in range(12)]
    for ref in small:
        cache.put(ref, b"c" * 100)
    assert cache.get(refs[0]) is None and cache.get(small[-1]) == b"c" * 100  # the oldest went first
    # 1000 bytes at most, each entry counted with what keeping it costs (many small file URLs stay bounded)
    assert sum(cache.get(ref) is not None for ref in small) == 1000 // (100 + ENTRY_BYTES) == 3

    plain = ImageCache()
    plain.put(refs[0], b"a" * 100)
    assert plain.get(refs[0]) is None  # the default keeps an image from its second offer only


def test_an_image_cache_keeps_the_images_it_gave_last() -> None:
    """An image given to a request moves to the end of the cache's order: when the cache is full,
    the image given longest ago goes first, not the ones just given."""
    cache = ImageCache(max_bytes=4 * (10 + ENTRY_BYTES), from_first=True)
    refs = [ImageRef(key=f"im{k}.jpg") for k in range(5)]
    for k, ref in enumerate(refs[:4]):
        cache.put(ref, b"%d" % k * 10)
    assert [cache.get(refs[2]), cache.get(refs[0]), cache.get(refs[4])] == [b"2" * 10, b"0" * 10, None]
    cache.put(refs[4], b"4" * 10)  # the oldest in use goes: im1, not the two just given
    assert cache.get(refs[1]) is None and [cache.get(r) for r in (refs[2], refs[0], refs[4])] == [b"2" * 10, b"0" * 10, b"4" * 10]
