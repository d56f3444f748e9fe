"""A long document's record keeps its text parts by their length and ends (`records.kept_texts`),
while the request carries every character: records.jsonl is not a second copy of the data's text,
and the report shows what it showed before. A real run against the simulated server over HTTP,
its page opened in Chromium (a screenshot goes to artifacts/)."""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Any

from helpers.browser import ARTIFACTS, Page, chromium
from helpers.runs import report_blob
from PIL import Image

from needlepoint.cli import main
from needlepoint.core.records import LONG_TURN_CHARS, TEXT_END_CHARS
from needlepoint.models.simulated import SimulatedServer

MODEL = "org/niah-model"


def words(rng: random.Random, chars: int) -> str:
    """About `chars` characters of sentences, none alike (each part's ends differ)."""
    out: list[str] = []
    while sum(map(len, out)) < chars:
        out.append(f"Sentence {rng.randrange(10**9)} tells of {rng.choice(['rain', 'a mill', 'bread', 'barges'])}. ")
    return "".join(out)


def release(root: Path) -> tuple[Path, list[str]]:
    """One long document (three images between long text parts) and one short one; the long
    one's text parts as its context holds them."""
    rng = random.Random(7)
    folder = root / "mm_niah_val"
    (folder / "annotations").mkdir(parents=True)
    for n in range(4):
        path = folder / "images" / f"p{n}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (32 + n, 24), (40 * n, 90, 200)).save(path, format="JPEG")
    parts = [words(rng, 9_000) for _ in range(3)]
    long_row: dict[str, Any] = {
        "id": 1,
        "images_list": ["p0.jpg", "p1.jpg", "p2.jpg"],
        "context": f"{parts[0]}<image>{parts[1]}<image>{parts[2]}<image>",
        "question": "What is the secret word?",
        "answer": "violet",
        "meta": {"placed_depth": 0.5, "context_length": 9000, "num_images": 3, "needles": ["violet"]},
    }
    short_row = dict(long_row, id=2, images_list=["p3.jpg"], context="A short one. <image> The end.", meta=dict(long_row["meta"]))
    text = "".join(json.dumps(r) + "\n" for r in (long_row, short_row))
    (folder / "annotations" / "retrieval-text.jsonl").write_text(text, encoding="utf-8")
    return root, parts


def test_a_long_documents_record_keeps_its_text_by_its_ends(tmp_path: Path) -> None:
    data, parts = release(tmp_path / "data")
    out = tmp_path / "run"
    with SimulatedServer(default="violet", models=(MODEL,), keep_requests=True) as srv:
        argv = ["eval", "mm_niah", "--data", str(data), "--split", "val", "--model", MODEL, "--api-url", srv.url]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main([*argv, "--out", str(out), "--no-progress"]) == 0
        bodies = list(srv.bodies())
    sent_texts = {  # by the number of images a request carried
        sum(p["type"] == "image_url" for p in b["messages"][0]["content"]): [
            p["text"] for p in b["messages"][0]["content"] if p["type"] == "text"
        ]
        for b in bodies
    }
    long_sent = sent_texts[3]  # three text parts, each before an image, and the question
    assert long_sent[:2] == parts[:2] and long_sent[2].startswith(parts[2])  # the server got every character
    assert sum(map(len, long_sent)) > LONG_TURN_CHARS

    lines = (out / "records.jsonl").read_bytes().splitlines()
    records = {r["id"]: r for r in map(json.loads, lines)}
    (long_id,) = [i for i in records if i.endswith("/1")]
    (message,) = records[long_id]["turns"][0]["sent"]
    kept = [p for p in message["content"] if p["type"] == "text"]
    assert [p["type"] for p in message["content"]] == ["text", "image", "text", "image", "text", "image", "text"]
    for part, text in zip(kept, long_sent):
        if len(text) > 3 * TEXT_END_CHARS:
            assert part == {"type": "text", "chars": len(text), "head": text[:TEXT_END_CHARS], "tail": text[-TEXT_END_CHARS:]}
        else:
            assert part == {"type": "text", "text": text}
    assert [p["path"] for p in message["content"] if p["type"] == "image"] == ["p0.jpg", "p1.jpg", "p2.jpg"]
    long_line = next(line for line in lines if json.loads(line)["id"] == long_id)
    assert len(long_line) < sum(map(len, long_sent)) / 5  # not a copy of the document

    (short_id,) = [i for i in records if i.endswith("/2")]
    (short,) = records[short_id]["turns"][0]["sent"]
    assert [p["text"] for p in short["content"] if p["type"] == "text"] == sent_texts[1]  # a short one verbatim

    blob = report_blob(out / "report" / "index.html")
    (row,) = [r for r in blob["items"] if r["id"] == long_id]
    ((_, ((_, shown),)),) = row["w"]
    first = shown[0][1]
    cut = len(long_sent[0]) - 2 * TEXT_END_CHARS
    assert (
        first
        == f"{long_sent[0][:TEXT_END_CHARS]}\n[... {cut} more characters; the data file holds the whole document ...]\n{long_sent[0][-TEXT_END_CHARS:]}"
    )

    with chromium() as browser:  # the card unfolds what the model saw: each long part by its ends
        p = Page(browser, out / "report" / "index.html")
        try:
            card = p.page.locator("#np-cards .card", has_text="What the model saw (1 turn, 7 parts)")
            card.locator("details.seen summary").click()
            card.locator("pre.sent").first.wait_for()
            texts = card.locator("pre.sent").all_text_contents()
            assert texts[0] == first and texts[-1].startswith("\nWhat is the secret word?")
            assert sum("more characters; the data file holds the whole document" in t for t in texts) == 3
            assert p.dialogs == [] and p.errors == []
            ARTIFACTS.mkdir(exist_ok=True)
            card.screenshot(path=str(ARTIFACTS / "report_mm_niah_long_document_seen.png"))
        finally:
            p.close()
