"""Fixtures: release folders on disk, simulated model servers on 127.0.0.1. The helpers they use,
and that tests import, are in tests/helpers/."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_MODELS, small_niah
from helpers.detector import write_grounding_dino

from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release
from needlepoint.models.simulated import SimulatedServer
from needlepoint.models.simulated_batch import BatchServer


@pytest.fixture
def serve() -> Iterator[Callable[..., SimulatedServer]]:
    """Start SimulatedServers (its keywords; by default listing TEST_MODELS and keeping every
    request); every one is stopped after the test."""
    started: list[SimulatedServer] = []

    def start(**kwargs: Any) -> SimulatedServer:
        kwargs.setdefault("models", TEST_MODELS)
        kwargs.setdefault("keep_requests", True)
        server = SimulatedServer(**kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def batch_server() -> Iterator[Callable[..., BatchServer]]:
    """Start simulated servers with OpenAI's Batch API: `batch_server(script, **settings)` (the
    settings are the server's attributes: faults, polls to finish); all stopped after the test."""
    started: list[BatchServer] = []

    def start(script: dict[str, Any], **settings: Any) -> BatchServer:
        server = BatchServer(script=script, models=TEST_MODELS, keep_requests=True)
        for name, value in settings.items():
            setattr(server, name, value)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def demo_sets(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, tuple[Path, dict[str, Any]]], SimulatedServer]]:
    """Every demo set on disk (MM-NIAH's at 6 documents a task) with its run options, and one
    simulated server answering all of them (`helpers.demo_config` makes a run of one)."""
    from needlepoint.demo import builder, builders

    root = tmp_path_factory.mktemp("demo_sets")
    plans: dict[str, tuple[Path, dict[str, Any]]] = {}
    script: dict[str, list[Any]] = {}
    for name in builders():
        build = small_niah if name == "mm_niah" else builder(name)
        data, options, answers = build(root / name)
        plans[name] = (data, options)
        script.update(answers)
    with SimulatedServer(script=script, default=None) as server:
        yield plans, server


@pytest.fixture(scope="session")
def ref_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A 12-row Ref-Adv-s release in the Hugging Face parquet layout, and its rows."""
    rows = make_rows(12)
    folder = write_release(tmp_path_factory.mktemp("ref_release"), rows)
    return folder, rows


@pytest.fixture(scope="module")
def grounding_dino(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Grounding DINO with its processor, as a model folder (needs the models extra)."""
    return write_grounding_dino(tmp_path_factory.mktemp("tiny_grounding_dino"))
