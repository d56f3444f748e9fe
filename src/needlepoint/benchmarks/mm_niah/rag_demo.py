"""The demo's MM-NIAH run with `--solver rag`: the simulated embedding model (served by the demo's
simulated server, models/simulated.py) picks the pieces, the simulated chat model answers.

The chat model answers from a script keyed by the request, so the script must hold the reduced
prompts: they are worked out here with the same embedder and rules before the run, and the
simulated model answers right (with the plain demo's odds for a short document) when the needles
survived retrieval and says it could not find them when they did not.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.retrieve import retrieve

__all__ = ["DEMO_MAX_TOKENS", "RUN_NAME", "rag_config"]

DEMO_MAX_TOKENS = 30
"""About three of a short demo document's sentences: the text needles survive retrieval (the question
shares their words), while counting-text's three statements and reasoning-image's sentence are
sometimes dropped, so the needle-kept table shows retrieval working and what it costs."""
RUN_NAME = "mm_niah_rag"


async def _script(bench: MmNiah, samples: Sequence[Any], url: str, embed_model: str) -> dict[str, list[Any]]:
    from needlepoint.benchmarks.mm_niah.demo import simulated_answer
    from needlepoint.models.embeddings import ServedEmbedder
    from needlepoint.models.simulated import script_key

    embedder = ServedEmbedder(embed_model, url)
    rng = random.Random(7)
    script: dict[str, list[Any]] = {}
    try:
        got = await asyncio.gather(*(retrieve(s, embedder, DEMO_MAX_TOKENS) for s in samples))
    finally:
        await embedder.aclose()
    for sample, r in zip(samples, got):
        kept = r.selection.needles_kept is not False
        answer = simulated_answer(sample.task, sample.answer, r.selection.tokens, rng) if kept else "I could not find it."
        script[script_key(bench.prompt(r.sample))] = [answer]
    return script


def rag_config(data: Path, options: dict[str, Any], server: Any, runs: Path, **settings: Any) -> Any:
    """The RunConfig of the demo's RAG run against the running simulated `server` (chat and
    embeddings), after adding the reduced prompts' answers to its script."""
    from needlepoint.core.config import RunConfig
    from needlepoint.models.simulated import SIMULATED_EMBEDDER_NAME, SIMULATED_MODEL_NAME

    bench = MmNiah(**options)
    script = asyncio.run(_script(bench, bench.load(data), server.url, SIMULATED_EMBEDDER_NAME))
    server.script = {**server.script, **script}
    return RunConfig(
        benchmark="mm_niah",
        data=data,
        model=SIMULATED_MODEL_NAME,
        api_urls=[server.url],
        options=options,
        out=runs / RUN_NAME,
        solver="rag",
        solver_options={"embed_model": SIMULATED_EMBEDDER_NAME, "embed_url": server.url, "rag_max_tokens": DEMO_MAX_TOKENS},
        **settings,
    )
