"""A second model family through a real vLLM: the tiny random InternVL3 that
scripts/make_tiny_internvl.py writes in transformers' native format (`InternVLForConditionalGeneration`,
as the InternVL3-*-hf checkpoints ship), served by vLLM's CPU build with the chat template of
those checkpoints.

The prompt the server builds is InternVL's: ChatML turns without a default system turn, each image
as `<img>`, four `<IMG_CONTEXT>` tokens a 56 x 56 tile (a thumbnail tile too once an image is cut
in several) and `</img>`, then a newline, before the text. A chat with images is answered through
it, and `needlepoint eval ref_adv_s --model-family internvl` runs end to end against it: InternVL's
own grounding prompt goes out, and the random model's noise is recorded as parse errors with its
replies kept."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from needlepoint.benchmarks.ref_adv import demo as ref_adv
from needlepoint.core.status import DONE, PARSE_ERRORS

from .conftest import INTERNVL_NAME, VllmServer, get_json, needlepoint, read_records, vllm_counter

pytestmark = pytest.mark.vllm

# InternVL's grounding prompt (OpenGVLab/InternVL internvl_chat/eval/refcoco/evaluate_grounding.py).
GROUNDING = "Please provide the bounding box coordinate of the region this sentence describes: <ref>{}</ref>"
QUESTION = GROUNDING.format("the red square")
MAX_TOKENS = 12


def _png_url(width: int, height: int) -> str:
    """A real PNG (a red square on grey) as a data URL."""
    im = Image.new("RGB", (width, height), (128, 128, 128))
    ImageDraw.Draw(im).rectangle((width // 4, height // 4, width // 2, height // 2), fill=(220, 20, 20))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _chat(sizes: list[tuple[int, int]], text: str) -> list[dict[str, Any]]:
    """One user turn: an image of each size, then the text (InternVL's examples' order)."""
    images = [{"type": "image_url", "image_url": {"url": _png_url(w, h)}} for w, h in sizes]
    return [{"role": "user", "content": [*images, {"type": "text", "text": text}]}]


def _image(tiles: int) -> str:
    """What the processor makes of one image part: its tiles' tokens between InternVL's markers."""
    return "<img>" + "<IMG_CONTEXT>" * (4 * tiles) + "</img>\n"


# Two images: a square one fits one tile (no thumbnail); a 2:1 one is cut in two tiles plus the
# thumbnail. What InternVL3-hf's template renders for them, each `<IMG_CONTEXT>` placeholder
# expanded by the processor: no system turn (Qwen's template would add "You are a helpful
# assistant."), `<img>...</img>` and a newline per image.
MESSAGES = _chat([(56, 56), (112, 56)], QUESTION)
EXPECTED_PROMPT = "<|im_start|>user\n" + _image(1) + _image(3) + QUESTION + "<|im_end|>\n<|im_start|>assistant\n"


def _post(server: VllmServer, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        f"{server.base}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as resp:  # a busy CPU server answers slowly
        return json.loads(resp.read())


def _tokenized(server: VllmServer, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """vLLM's /tokenize of a chat: the prompt its chat template and processor make, as tokens."""
    body = {"model": INTERNVL_NAME, "messages": messages, "add_generation_prompt": True, "return_token_strs": True}
    result: dict[str, Any] = _post(server, "/tokenize", body)
    return result


def _rendered(server: VllmServer, tokens: dict[str, Any]) -> str:
    """The prompt text of /tokenize's ids, special tokens included (vLLM's /detokenize)."""
    text: str = _post(server, "/detokenize", {"model": INTERNVL_NAME, "tokens": tokens["tokens"]})["prompt"]
    return text


def test_the_server_renders_internvl_s_chat_template(internvl_server: VllmServer) -> None:
    """The served model's prompt for a chat with two images, detokenized by the same server, is
    InternVL3-hf's template with each image expanded to its tiles' tokens."""
    assert [m["id"] for m in get_json(f"{internvl_server.url}/models")["data"]] == [INTERNVL_NAME]
    tokens = _tokenized(internvl_server, MESSAGES)
    assert _rendered(internvl_server, tokens) == EXPECTED_PROMPT
    # InternVL's phrase markers are single tokens of the served tokenizer, as in the real model's.
    assert [t for t in tokens["token_strs"] if t in ("<ref>", "</ref>")] == ["<ref>", "</ref>"], tokens["token_strs"]
    # <img>, </img> and each <IMG_CONTEXT> are single tokens too: the images cost exactly
    # 2 x (<img>, </img>, newline) + 4 + 12 tokens over the text alone.
    text_only = _tokenized(internvl_server, _chat([], QUESTION))
    assert tokens["count"] == text_only["count"] + 2 * 3 + 4 + 12, (tokens["count"], text_only["count"])


def test_a_chat_with_images_is_answered_through_that_template(internvl_server: VllmServer) -> None:
    """/v1/chat/completions answers the same chat: the model generated MAX_TOKENS tokens of visible
    text, and the prompt it read is the one /tokenize rendered (the same template, both images)."""
    body = {"model": INTERNVL_NAME, "messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0}
    reply = _post(internvl_server, "/v1/chat/completions", body)
    (choice,) = reply["choices"]
    content = choice["message"]["content"]
    assert isinstance(content, str) and content.strip() and content.isascii(), choice
    # The tiny model never picks a special token, so it never stops early.
    assert choice["finish_reason"] == "length", choice
    assert reply["usage"]["completion_tokens"] == MAX_TOKENS, reply["usage"]
    assert reply["usage"]["prompt_tokens"] == _tokenized(internvl_server, MESSAGES)["count"], reply["usage"]


LIMIT = 3
FAMILY_MAX_TOKENS = 100  # InternVL's grounding evaluator's max_new_tokens, the family's default


def test_eval_ref_adv_s_with_the_internvl_family(internvl_server: VllmServer, tmp_path: Path) -> None:
    """`needlepoint eval ref_adv_s --model-family internvl` against the tiny InternVL: every sample
    is asked InternVL's grounding prompt (image first), through the server's InternVL template, with
    the family's decoding defaults; the noise that comes back is a parse error with the reply kept
    (and the repair turn asked), never a failed sample or a crash."""
    rows = ref_adv.make_rows(8)
    data = ref_adv.write_release(tmp_path / "ref_adv_s", rows)
    out = tmp_path / "run"
    before = vllm_counter(internvl_server, "vllm:request_success_total")
    args = ["eval", "ref_adv_s", "--model-family", "internvl", "--model", INTERNVL_NAME, "--api-url", internvl_server.url]
    proc = needlepoint([*args, "--data", str(data), "--limit", str(LIMIT), "--out", str(out), "--no-progress", "--no-report"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr

    header = json.loads((out / "run.json").read_text())
    assert header["status"] == "complete"
    identity = header["identity"]
    assert identity["option.model_family"] == "internvl" and identity["option.box_format"] == "norm_1000_xyxy", identity
    counts = json.loads((out / "metrics.json").read_text())["run"]
    assert (counts["answered"], counts["failed"]) == (LIMIT, 0), counts

    records = read_records(out)
    assert sorted(r["id"] for r in records) == [str(i) for i in range(LIMIT)]
    for rec in records:
        caption = rows[int(rec["id"])]["normal_caption"]
        assert rec["status"] == DONE, rec
        # Noise is no box in InternVL's syntax: a parse error, no answer, scored as a miss.
        assert rec["parse_error"] in PARSE_ERRORS and rec["answer"] is None, rec
        assert rec["scores"] == {"iou": 0.0, "hit": False}, rec
        first = rec["turns"][0]
        assert first["error"] is None and first["finish_reason"] == "length", first
        assert first["usage"]["completion_tokens"] == FAMILY_MAX_TOKENS, first["usage"]
        assert isinstance(first["reply"], str) and first["reply"].strip(), first
        # What went out: the sample's image (400 x 300), then InternVL's prompt around its caption.
        (message,) = first["sent"]
        image, text = message["content"]
        assert (image["type"], image["width"], image["height"]) == ("image", 400, 300), image
        assert text == {"type": "text", "text": GROUNDING.format(caption)}, text
        # The server read it through InternVL's template: 4:3 is cut in 2 x 2 tiles plus the
        # thumbnail, and an image of that size in the same chat costs the very same prompt tokens.
        tokens = _tokenized(internvl_server, _chat([(400, 300)], text["text"]))
        expected = "<|im_start|>user\n" + _image(5) + text["text"] + "<|im_end|>\n<|im_start|>assistant\n"
        assert _rendered(internvl_server, tokens) == expected
        assert first["usage"]["prompt_tokens"] == tokens["count"], (first["usage"], tokens["count"])
        # The raw reply is kept, and carried verbatim into the repair turn, which asks for
        # InternVL's syntax; its reply (noise again) is kept too.
        assert rec["repair_used"] and len(rec["turns"]) == 2, rec
        repair = rec["turns"][1]
        assert repair["sent"][1] == {"role": "assistant", "content": [{"type": "text", "text": first["reply"]}]}, repair
        assert "<box>[[" in repair["sent"][2]["content"][0]["text"], repair["sent"][2]
        assert repair["error"] is None and isinstance(repair["reply"], str) and repair["reply"].strip(), repair
    turns = sum(len(r["turns"]) for r in records)
    assert vllm_counter(internvl_server, "vllm:request_success_total") - before == turns
