"""MM-NIAH's RAG baseline without a `/tokenize` request per piece: the embedding model's own
tokenizer loaded from its tokenizer.json (`--embed-tokenizer`), checked against the server first.

The simulated server counts whitespace-separated words; a word-level tokenizer.json made here with
the `tokenizers` package counts the same, and a character-level one does not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.rag import EMBED_MODEL, embedding_server, write_rag_release

from needlepoint.cli import main
from needlepoint.core.errors import DataError
from needlepoint.core.store import read_records
from needlepoint.models.embeddings import TOKENIZER_PROBES
from needlepoint.models.simulated import simulated_token_count
from needlepoint.models.tokencount import LocalTokenizer, load_tokenizer

tokenizers = pytest.importorskip("tokenizers")

MODEL = "sim-model"


def _word_tokenizer(folder: Path) -> Path:
    """A tokenizer.json whose every whitespace-separated word is one (unknown) token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def _char_tokenizer(folder: Path) -> Path:
    """A tokenizer.json that counts characters: not the server's counts."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def _args(release: Path, chat: Any, embed_url: str, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "mm_niah",
        "--data",
        str(release),
        "--model",
        MODEL,
        "--api-url",
        chat.url,
        "--solver",
        "rag",
        "--embed-model",
        EMBED_MODEL,
        "--embed-url",
        embed_url,
        "--out",
        str(out),
        "--no-progress",
        "--no-report",
        *extra,
    ]


def test_the_local_tokenizer_counts_as_the_server_does(tmp_path: Path) -> None:
    tok = LocalTokenizer(str(_word_tokenizer(tmp_path / "tok")))
    texts = ["", "one", " The penguin sings loudly at dawn.", "a  b\n\nc", *TOKENIZER_PROBES]
    assert tok.count(texts) == [simulated_token_count(t) for t in texts]
    assert LocalTokenizer(str(tmp_path / "tok" / "tokenizer.json")).count(["x y"]) == [2]  # the file itself
    assert load_tokenizer(None) is None


def test_a_tokenizer_that_is_not_there_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="has no tokenizer.json"):
        LocalTokenizer(str(tmp_path / "empty"))
    with pytest.raises(DataError, match="no tokenizer at 'nowhere/none'"):
        LocalTokenizer("nowhere/none")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="is not a tokenizer.json"):
        LocalTokenizer(str(bad))


def test_with_the_tokenizer_a_run_asks_only_the_probes_and_selects_the_same(serve: Any, tmp_path: Path) -> None:
    release = write_rag_release(tmp_path / "mm_niah_val")
    tok = _word_tokenizer(tmp_path / "tok")
    with embedding_server() as emb:
        chat = serve(default="sings")
        assert main(_args(release, chat, emb.url, tmp_path / "served")) == 0
        served_counts = len(emb.bodies("tokenize"))
        chat2 = serve(default="sings")
        assert main(_args(release, chat2, emb.url, tmp_path / "local", "--embed-tokenizer", str(tok))) == 0
        local_counts = len(emb.bodies("tokenize")) - served_counts
    # check()'s probe, then each probe of the tokenizer check: no piece is sent to /tokenize.
    assert local_counts == 1 + len(TOKENIZER_PROBES)
    assert served_counts > local_counts
    a, b = read_records(tmp_path / "served" / "records.jsonl"), read_records(tmp_path / "local" / "records.jsonl")
    assert a.keys() == b.keys()
    for sid in a:
        assert a[sid]["solver"]["rag"] == b[sid]["solver"]["rag"]  # what was kept, and every needle's rank
        assert a[sid]["answer"] == b[sid]["answer"]
    # The tokenizer changes no count, so it is no part of the run's identity: the same metrics (but
    # for the usage block, which counts the requests it saved)
    served, local = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("served", "local"))
    assert served.pop("usage") != local.pop("usage") and served == local


def test_a_tokenizer_that_counts_otherwise_is_one_sentence_before_the_run(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release = write_rag_release(tmp_path / "mm_niah_val")
    tok = _char_tokenizer(tmp_path / "chars")
    with embedding_server() as emb:
        code = main(_args(release, serve(default="sings"), emb.url, tmp_path / "run", "--embed-tokenizer", str(tok)))
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"needlepoint: error: the tokenizer {tok / 'tokenizer.json'} counts 10 tokens in 'summarize:'")
    assert err.endswith(f"pass {EMBED_MODEL!r}'s own tokenizer to --embed-tokenizer, or drop the flag")
    assert "\n" not in err and not (tmp_path / "run" / "records.jsonl").exists()


def test_the_flag_loads_the_tokenizer_as_vllm_does_where_transformers_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--embed-tokenizer` (load_tokenizer) loads a model folder (one with a tokenizer_config.json
    or config.json) with transformers' AutoTokenizer when transformers is importable (vLLM's
    /tokenize counts with it), offline; without transformers, or given the file itself, the
    `tokenizers` package reads tokenizer.json."""
    folder = _word_tokenizer(tmp_path / "tok")
    texts = ["", "one", " The penguin sings loudly at dawn.", *TOKENIZER_PROBES]
    pytest.importorskip("transformers")
    alone = load_tokenizer(str(folder))  # tokenizer.json alone: transformers would read it as it is
    assert alone is not None and alone.via == "tokenizers"
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    tok = load_tokenizer(str(folder))
    assert tok is not None and tok.via == "transformers" and tok.source == str(folder / "tokenizer.json")
    assert tok.count(texts) == [simulated_token_count(t) for t in texts]
    file_only = load_tokenizer(str(folder / "tokenizer.json"))
    assert file_only is not None and file_only.via == "tokenizers"
    monkeypatch.setitem(sys.modules, "transformers", None)  # not installed
    without = load_tokenizer(str(folder))
    assert without is not None and without.via == "tokenizers" and without.count(texts) == tok.count(texts)
