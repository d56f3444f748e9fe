"""The run's store of paid `/tokenize` counts (tokencount.CountStore): a piece that several
MM-NIAH documents share is counted once a run, the counts are on disk the moment each is
answered, and a rerun of the same folder asks for none of them again."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.demo import write_release
from needlepoint.benchmarks.mm_niah.rag import document
from needlepoint.cli import main
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME, SIMULATED_MODEL_NAME, SimulatedServer, simulated_token_count
from needlepoint.models.tokencount import COUNTS_FILE, CountStore


def _args(data: Path, url: str, out: Path) -> list[str]:
    return [
        "eval", "mm_niah", "--data", str(data), "--model", SIMULATED_MODEL_NAME, "--api-url", url,
        "--solver", "rag", "--embed-model", SIMULATED_EMBEDDER_NAME, "--embed-url", url,
        "--rag-max-tokens", "40", "--out", str(out), "--no-progress", "--no-report", "--concurrency", "4",
    ]  # fmt: skip


def _pieces(data: Path) -> Counter[str]:
    """How many samples hold each non-empty text piece."""
    return Counter(p for s in MmNiah(split="val").load(data) for p in set(document(s).text_pieces) if p)


def test_pieces_shared_by_samples_are_counted_once_a_run(tmp_path: Path) -> None:
    data = write_release(tmp_path / "niah", per_task=2)
    shared = _pieces(data)
    assert max(shared.values()) > 1  # the demo's documents share pieces, as OBELICS haystacks do
    with SimulatedServer(default="sings", keep_requests=True) as server:
        assert main(_args(data, server.url, tmp_path / "run")) == 0
        asked = Counter(b["prompt"] for b in server.bodies("tokenize") if b["prompt"] != "summarize:")
        assert asked == Counter(dict.fromkeys(shared, 1))  # each distinct piece once, with 4 samples in flight
        stored = [json.loads(line) for line in (tmp_path / "run" / COUNTS_FILE).read_text().splitlines()]
        assert len(stored) == len(shared)
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert len(records) == 12 and {r["status"] for r in records.values()} == {"done"}


def test_the_store_reads_what_it_wrote_and_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "counts.jsonl"
    asked: list[str] = []

    async def ask(text: str) -> int:
        asked.append(text)
        await asyncio.sleep(0.01)
        return simulated_token_count(text)

    async def two_samples(store: CountStore) -> list[dict[str, int]]:
        return list(await asyncio.gather(store.counts(["a b", "c d e", "f"], ask), store.counts(["c d e", "f", "g h"], ask)))

    store = CountStore(path, "model-a")
    first, second = asyncio.run(two_samples(store))
    assert first == {"a b": 2, "c d e": 3, "f": 1} and second == {"c d e": 3, "f": 1, "g h": 2}
    assert sorted(asked) == ["a b", "c d e", "f", "g h"]  # asked at the same time: once
    store.close()
    with path.open("ab") as f:
        f.write(b'{"k": "torn')  # a kill in the middle of a write
    again = CountStore(path, "model-a")
    assert len(again) == 4
    assert asyncio.run(again.counts(["g h", "a b"], ask)) == {"g h": 2, "a b": 2} and len(asked) == 4
    other = CountStore(path, "model-b")  # another model's counts are not this one's
    assert asyncio.run(other.counts(["a b"], ask)) == {"a b": 2} and len(asked) == 5


def test_a_failed_count_is_not_stored_and_a_waiting_sample_asks_again(tmp_path: Path) -> None:
    path = tmp_path / "counts.jsonl"
    calls: Counter[str] = Counter()

    async def flaky(text: str) -> int:
        calls[text] += 1
        await asyncio.sleep(0.01)
        if calls[text] == 1:
            raise RuntimeError("server down")
        return 7

    async def go(store: CountStore) -> tuple[object, object]:
        got = await asyncio.gather(store.counts(["x"], flaky), store.counts(["x"], flaky), return_exceptions=True)
        return got[0], got[1]

    store = CountStore(path, "m")
    failed, waited = asyncio.run(go(store))
    assert isinstance(failed, RuntimeError) and waited == {"x": 7} and calls["x"] == 2
    store.close()
    assert len(CountStore(path, "m")) == 1
