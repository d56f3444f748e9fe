"""The sample's call cache on disk: a torn last line (a kill mid-write) is skipped, a request sent
twice in a sample is answered from the cache twice only if it was answered twice, and dropping
entries rewrites the file atomically."""

from __future__ import annotations

from pathlib import Path

from needlepoint.conversation import Conversation, Generation, ImageRef, Message
from needlepoint.solvers.calls import CallCache, calls_path, conversation_key, forget


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
    assert [again.take("a")["turn"]["reply"], again.take("a")["turn"]["reply"], again.take("a")] == ["one", "two", None]
    assert again.take("c") is None
    again.drop(lambda e: e["kind"] == "tokenize")
    assert CallCache(path).take("b") is None and len(CallCache(path)) == 2
    forget(tmp_path, "sample/1")
    assert not path.exists()


def test_an_answer_orjson_cannot_read_back_is_still_taken(tmp_path: Path) -> None:
    """A reply holding a lone surrogate (written by the standard encoder) and a count past 64 bits
    come back as they were stored: the call is not paid again on resume."""
    path = calls_path(tmp_path, "sample/2")
    cache = CallCache(path)
    cache.put("a", "chat", turn={"reply": "x\ud800", "usage": {"prompt_tokens": 10**25}})
    cache.close()
    turn = CallCache(path).take("a")["turn"]
    assert turn == {"reply": "x\ud800", "usage": {"prompt_tokens": 10**25}}
    assert type(turn["usage"]["prompt_tokens"]) is int


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


def test_a_generation_as_json_has_every_field_and_its_own_extra() -> None:
    """Generation.to_dict is written field by field (for speed): it must stay equal to the
    dataclass's own deep conversion, so a new field cannot be left out of keys and headers."""
    import dataclasses

    from needlepoint.conversation import Generation

    generation = Generation(temperature=0.3, seed=None, extra={"response_format": {"schema": {"required": ["a"]}}})
    as_json = generation.to_dict()
    assert as_json == dataclasses.asdict(generation)
    as_json["extra"]["response_format"]["schema"]["required"].append("b")
    assert generation.extra == {"response_format": {"schema": {"required": ["a"]}}}
