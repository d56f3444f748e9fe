"""The call cache on disk: a torn last line (a kill mid-write) is skipped, a request sent twice in
a sample is answered from the cache twice only if it was answered twice, dropping entries rewrites
the sample's own file atomically; a run's log holds every sample's calls in one file, read back
by the next run for its pending samples, and compacted to what may still be asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from needlepoint.core.conversation import Conversation, Generation, ImageRef, Message
from needlepoint.solvers.calls import CALLS_DIR, CallCache, CallLog, calls_path, compact, conversation_key, key_of, read_logs


def next_turn(cache: CallCache, key: str) -> Any:
    """The turn of the next stored answer of `key` (there must be one)."""
    entry = cache.take(key)
    assert entry is not None, key
    return entry["turn"]


def test_entries_survive_a_torn_line_and_are_handed_out_once(tmp_path: Path) -> None:
    path = calls_path(tmp_path, "sample/1")
    cache = CallCache(path)
    cache.put("a", "chat", turn={"reply": "one"})
    cache.put("a", "chat", turn={"reply": "two"})
    cache.put("b", "tokenize", answer=[3])
    cache.close()
    with path.open("ab") as fh:
        fh.write(b'{"key": "c", "kind": "chat", "turn": {"rep')  # killed mid-write
    again = CallCache(path)
    assert len(again) == 3
    assert [next_turn(again, "a")["reply"], next_turn(again, "a")["reply"], again.take("a")] == ["one", "two", None]
    assert again.take("c") is None
    again.drop(lambda e: e["kind"] == "tokenize")
    assert CallCache(path).take("b") is None and len(CallCache(path)) == 2
    CallLog(tmp_path, ["sample/1"]).forget("sample/1")  # a file an earlier run left
    assert not path.exists()


def test_a_runs_log_holds_every_sample_and_the_next_run_reads_its_pending_ones(tmp_path: Path) -> None:
    log = CallLog(tmp_path, ["s1", "s2", "s3"])
    for sample, reply in (("s1", "one"), ("s2", "two"), ("s3", "three")):
        log.cache(sample).put("k", "chat", turn={"reply": reply})
    log.close()
    folder = tmp_path / CALLS_DIR
    logs = list(folder.glob("log-*.jsonl"))
    assert len(logs) == 1 and list(folder.iterdir()) == logs  # one file for the run, none a sample
    with logs[0].open("ab") as fh:
        fh.write(b'{"sample": "x", "key": "k", "kind": "ch')  # killed mid-write
    again = CallLog(tmp_path, ["s1", "s3"])  # s2's record was stored
    assert next_turn(again.cache("s1"), "k") == {"reply": "one"}
    assert next_turn(again.cache("s3"), "k") == {"reply": "three"}
    assert again.cache("s2").take("k") is None  # not pending: not loaded
    fresh = again.cache("s4")
    assert len(fresh) == 0 and fresh.take("k") is None


def test_dropped_kinds_live_in_the_samples_own_file(tmp_path: Path) -> None:
    log = CallLog(tmp_path, ["s1"], dropped=("embed_texts",))
    cache = log.cache("s1")
    cache.put("v", "embed_texts", answer={"f32": "AAAA"})
    cache.put("c", "chat", turn={"reply": "yes"})
    own = calls_path(tmp_path, "s1")
    assert [e["kind"] for e in CallCache(own)._read()] == ["embed_texts"]  # the chat turn is in the log
    cache.drop(lambda e: e["kind"] == "embed_texts")
    assert not own.exists()
    log.close()
    resumed = CallLog(tmp_path, ["s1"], dropped=("embed_texts",))
    again = resumed.cache("s1")
    assert again.take("v") is None and next_turn(again, "c") == {"reply": "yes"}
    again.put("v2", "embed_texts", answer={"f32": "BBBB"})
    assert own.exists()
    resumed.forget("s1")
    assert not own.exists()
    resumed.close()


def test_compact_keeps_what_may_be_asked_again_once(tmp_path: Path) -> None:
    log = CallLog(tmp_path, ["done", "failed"])
    log.cache("done").put("k", "chat", turn={"reply": "a"})
    failed = log.cache("failed")
    failed.put("k", "tokenize", answer=[7])
    failed.put("k", "tokenize", answer=[7])  # the same request answered twice: two lines alike
    log.close()
    folder = tmp_path / CALLS_DIR
    (first,) = folder.glob("log-*.jsonl")
    (folder / "log-0-0.jsonl").write_bytes(first.read_bytes())  # as a kill during an earlier compaction leaves it
    assert sum(len(v) for v in read_logs(folder).values()) == 3  # each log's lines once, both answers kept
    compact(tmp_path, ["done"])
    (kept,) = folder.glob("log-*.jsonl")
    assert kept.read_bytes().count(b"\n") == 2 and b'"reply":"a"' not in kept.read_bytes()
    again = CallLog(tmp_path, ["failed"]).cache("failed")
    assert [again.take("k"), again.take("k"), again.take("k")] == [{"key": "k", "kind": "tokenize", "answer": [7]}] * 2 + [None]
    compact(tmp_path, ["done", "failed"])
    assert not any(folder.iterdir())


def test_an_answer_orjson_cannot_read_back_is_still_taken(tmp_path: Path) -> None:
    """A reply holding a lone surrogate (written by the standard encoder) and a count past 64 bits
    come back as they were stored: the call is not paid again on resume."""
    path = calls_path(tmp_path, "sample/2")
    cache = CallCache(path)
    cache.put("a", "chat", turn={"reply": "x\ud800", "usage": {"prompt_tokens": 10**25}})
    cache.close()
    answer = next_turn(CallCache(path), "a")
    assert answer == {"reply": "x\ud800", "usage": {"prompt_tokens": 10**25}}
    assert type(answer["usage"]["prompt_tokens"]) is int


def test_the_key_names_what_is_asked_not_how_long_to_wait() -> None:
    image = ImageRef("a.jpg", Path("/x/a.jpg"))
    conv = Conversation([Message("user", ["Find it", image])])
    key = conversation_key("model", "m", conv, Generation())
    assert key == conversation_key("model", "m", conv, Generation(timeout_s=5))
    assert key != conversation_key("localizer", "m", conv, Generation())
    assert key != conversation_key("model", "m", conv, Generation(temperature=0.5))
    assert key != conversation_key(
        "model", "m", Conversation([Message("user", ["Find it", ImageRef("a.jpg", max_side=64)])]), Generation()
    )


def test_the_key_is_pinned() -> None:
    """The key of a fixed request, pinned: a change of its digest or of the request's encoding
    shows here. Such a change must bump `_KEY_VERSION` (a resumed run then asks its pending calls
    again, never takes an answer under another key's meaning) and update this value (version 3:
    SHA-256 from the standard library, issue 40)."""
    key = key_of("chat", "model", "m", [["user", ["find the cup"]]], {"temperature": 0.0})
    assert key == "ce3286a0b9bb86572e0eb57bae5f92ded054da77"


def test_a_generation_as_json_has_every_field_and_its_own_extra() -> None:
    """Generation.to_dict is written field by field (for speed): it must stay equal to the
    dataclass's own deep conversion, so a new field cannot be left out of keys and headers."""
    import dataclasses

    from needlepoint.core.conversation import Generation

    generation = Generation(temperature=0.3, seed=None, extra={"response_format": {"schema": {"required": ["a"]}}})
    as_json = generation.to_dict()
    assert as_json == dataclasses.asdict(generation)
    as_json["extra"]["response_format"]["schema"]["required"].append("b")
    assert generation.extra == {"response_format": {"schema": {"required": ["a"]}}}
