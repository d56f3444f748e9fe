"""`needlepoint eval ... --dry-run`: every first-turn request of a run, built exactly as it would be
sent, counted and never sent.

It loads the data as `evaluate` does (the same --sample, --limit and --shard), asks the benchmark for each
sample's prompt and sampling settings, encodes every image as the client would (the JPEG bytes
that would travel), and counts requests, images, bytes and prompt tokens. Text tokens come from
the model's own tokenizer (`--tokenizer`, a tokenizer.json read offline by the `tokenizers`
package) or else from a stated approximation; image tokens from the model family's rule where
needlepoint knows it (Qwen2-VL and Qwen2.5-VL), else they are marked unknown. No endpoint is needed.
The estimate is kept in the folder the run will write (`dry-run.json`, nothing else is written
there), and the run's usage shows it beside what its first turns used.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint.contract.base import LimitsImages
from needlepoint.contract.usage import ESTIMATE
from needlepoint.core.conversation import Conversation, Generation, ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.files import json_text, write_json, write_lines

CHARS_PER_TOKEN = 4  # the approximation without a tokenizer: English text, about 4 characters a token
OVER_SHOWN = 10  # samples over the image limit named in the summary
IMAGE_REF_SCHEME = "needlepoint-image://"  # how the written request bodies name an image instead of its bytes


@dataclass(frozen=True)
class QwenVLRule:
    """Qwen2-VL / Qwen2.5-VL image tokens: the image resized to multiples of 28 pixels within
    [min_pixels, max_pixels] (the processor's smart_resize), one token per 28x28 block (14-pixel
    patches merged 2x2), plus the vision start and end tokens."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 16384
    factor: int = 28
    name: str = "Qwen2-VL (28x28-pixel blocks, 14-pixel patches merged 2x2)"

    def tokens(self, width: int, height: int) -> int:
        """The tokens one image of `width` x `height` pixels (as sent) takes in the prompt."""
        f = self.factor
        h = max(f, round(height / f) * f)
        w = max(f, round(width / f) * f)
        if h * w > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h = max(f, math.floor(height / beta / f) * f)
            w = max(f, math.floor(width / beta / f) * f)
        elif h * w < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h = math.ceil(height * beta / f) * f
            w = math.ceil(width * beta / f) * f
        return (h // f) * (w // f) + 2


_QWEN_TYPES = {"qwen2_vl", "qwen2_5_vl"}
_QWEN_NAME = re.compile(r"qwen2(\.5)?[-_]?vl", re.IGNORECASE)


def image_rule(model: str, tokenizer: Path | None) -> QwenVLRule | None:
    """The image-token rule of the model family, from the model folder's config.json and
    preprocessor_config.json (beside --tokenizer) or from the model's name; None when unknown."""
    folder = tokenizer if tokenizer is not None and tokenizer.is_dir() else tokenizer.parent if tokenizer else None
    if folder is not None:
        config = _read_json(folder / "config.json")
        if config.get("model_type") in _QWEN_TYPES:
            pre = _read_json(folder / "preprocessor_config.json")
            size: dict[str, Any] = pre["size"] if isinstance(pre.get("size"), dict) else {}
            lo = pre.get("min_pixels") or size.get("shortest_edge") or QwenVLRule.min_pixels
            hi = pre.get("max_pixels") or size.get("longest_edge") or QwenVLRule.max_pixels
            return QwenVLRule(min_pixels=int(lo), max_pixels=int(hi))
        if config.get("model_type"):
            return None
    return QwenVLRule() if _QWEN_NAME.search(model) else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def text_counter(tokenizer: Path | None) -> tuple[Callable[[str], int], str]:
    """A function counting a text's tokens, and how it counts (for the printout)."""
    if tokenizer is None:
        return (lambda text: math.ceil(len(text) / CHARS_PER_TOKEN)), f"approximated as {CHARS_PER_TOKEN} characters a token"
    from needlepoint.models.tokencount import LocalTokenizer

    tok = LocalTokenizer(str(tokenizer))  # the one reader of tokenizer.json (the RAG solver's too)
    return (lambda text: tok.count([text])[0]), f"counted with {tok.source}"


@dataclass
class ImageFacts:
    """What a request carries of one image: its base64 length (or its file URL, --local-images)
    and the sent JPEG's size in pixels."""

    b64_bytes: int
    width: int
    height: int
    url: bytes | None = None


def _image_facts(ref: ImageRef, reencode: bool, local: bool = False) -> ImageFacts:
    from needlepoint.core.images import encode_jpeg, file_url, jpeg_header

    data = encode_jpeg(ref, reencode)
    head = jpeg_header(data)
    width, height = (head[0], head[1]) if head else (0, 0)
    return ImageFacts(4 * math.ceil(len(data) / 3), width, height, file_url(ref, reencode) if local else None)


@dataclass
class RequestFacts:
    """One first-turn request: its sample, size as sent, images and prompt tokens (None: unknown)."""

    sample: str
    bytes: int
    images: int
    text_tokens: int
    image_tokens: int | None
    repair_tokens: int
    max_tokens: int | None = None  # the most completion tokens the request allows, all choices (None: the server's default)

    @property
    def prompt_tokens(self) -> int | None:
        return None if self.image_tokens is None else self.text_tokens + self.image_tokens


@dataclass
class DryRunSummary:
    """The counts a dry run prints (and returns as JSON with --json)."""

    benchmark: str
    model: str
    samples: int
    requests: list[RequestFacts] = field(default_factory=list)
    distinct_images: int = 0
    text_rule: str = ""
    image_rule: str | None = None
    max_context: int | None = None
    written: Path | None = None
    written_count: int = 0
    run_dir: Path | None = None  # the run's folder, where the estimate is kept (ESTIMATE)
    image_limit: tuple[int, str] | None = None  # the most images a request may carry, and whose limit it is
    price: tuple[float, float] | None = None  # --price / --prices: per million prompt and completion tokens
    repeats: int = 1  # --repeats: the run asks every request this many times

    def cost(self) -> dict[str, Any] | None:
        """What the requests cost at the price (None without one): the first turns' prompts, the
        most their replies can cost (max_tokens each), and the most a repair turn on every sample
        adds (its prompt holds the first turn, its longest reply and the repair text; its reply up to
        max_tokens). Prompts whose image tokens are unknown count their text only ("at least")."""
        if self.price is None:
            return None
        pin, pout = self.price
        reqs = self.requests
        prompt = sum(r.prompt_tokens if r.prompt_tokens is not None else r.text_tokens for r in reqs)
        capped = all(r.max_tokens is not None for r in reqs)
        replies = sum(r.max_tokens or 0 for r in reqs)
        repair_in = sum(
            (r.prompt_tokens if r.prompt_tokens is not None else r.text_tokens) + r.repair_tokens for r in reqs if r.repair_tokens
        )
        repair_out = sum(r.max_tokens or 0 for r in reqs if r.repair_tokens)
        k = self.repeats
        first = k * (prompt * pin + replies * pout) / 1e6
        repair = k * (repair_in * pin + repair_out * pout) / 1e6
        return {
            "price": [pin, pout],
            "repeats": k,
            "prompts_known": all(r.prompt_tokens is not None for r in reqs),
            "replies_capped": capped,
            "prompts": k * prompt * pin / 1e6,
            "replies_at_most": k * replies * pout / 1e6 if capped else None,
            "first_turns_at_most": first if capped else None,
            "repair_turns_add_at_most": repair if capped else None,
            "at_most": first + repair if capped else None,
        }

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready counts."""
        reqs = self.requests
        known = [r.prompt_tokens for r in reqs if r.prompt_tokens is not None]
        longest = max(reqs, key=lambda r: (r.prompt_tokens or 0, r.text_tokens), default=None)
        largest = max(reqs, key=lambda r: r.bytes, default=None)
        return {
            "benchmark": self.benchmark,
            "model": self.model,
            "samples": self.samples,
            "requests": len(reqs),
            "images": sum(r.images for r in reqs),
            "distinct_images": self.distinct_images,
            "max_images_per_request": max((r.images for r in reqs), default=0),
            "bytes": sum(r.bytes for r in reqs),
            "largest_request": {"sample": largest.sample, "bytes": largest.bytes} if largest else None,
            "text_tokens": sum(r.text_tokens for r in reqs),
            "text_rule": self.text_rule,
            "image_tokens": sum(r.image_tokens or 0 for r in reqs) if len(known) == len(reqs) else None,
            "image_rule": self.image_rule or "unknown for this model family",
            "prompt_tokens": sum(known) if len(known) == len(reqs) else None,
            "longest_prompt": (
                {"sample": longest.sample, "tokens": longest.prompt_tokens, "text_tokens": longest.text_tokens}
                if longest
                else None
            ),
            "repair_turn_adds_at_most": max((r.repair_tokens for r in reqs), default=0),
            "max_context": self.max_context,
            "over_max_context": (
                sum(1 for r in reqs if (r.prompt_tokens or r.text_tokens) > self.max_context) if self.max_context else None
            ),
            **self._over_image_limit(),
            "request_file": str(self.written) if self.written else None,
            "request_file_bodies": self.written_count,
            **({"cost": self.cost()} if self.price is not None else {}),
        }

    def _over_image_limit(self) -> dict[str, Any]:
        """The image limit and the samples whose request carries more images (empty without one)."""
        if self.image_limit is None:
            return {}
        limit, whose = self.image_limit
        over = [r.sample for r in self.requests if r.images > limit]
        return {"image_limit": {"images": limit, "of": whose, "over": len(over), "samples_over": over[:OVER_SHOWN]}}

    def lines(self) -> list[str]:
        """The printout, a line a count."""
        d = self.to_dict()
        out = [
            f"dry run of {d['benchmark']} for {d['model']}: nothing was sent",
            f"samples: {d['samples']}",
            f"requests: {d['requests']} first turns; a repair turn would add at most {d['repair_turn_adds_at_most']} tokens "
            "(the longest reply allowed plus the repair text)",
            f"images: {d['images']} ({d['distinct_images']} distinct, at most {d['max_images_per_request']} in one request)",
            f"bytes: {_size(d['bytes'])} as sent"
            + (
                f"; largest request {_size(d['largest_request']['bytes'])} ({d['largest_request']['sample']})"
                if d["largest_request"]
                else ""
            ),
            f"text tokens: {d['text_tokens']} ({d['text_rule']}; the chat template's few tokens a message not counted)",
            "image tokens: "
            + (f"{d['image_tokens']} ({d['image_rule']})" if d["image_tokens"] is not None else f"unknown ({d['image_rule']})"),
        ]
        longest = d["longest_prompt"]
        if d["prompt_tokens"] is not None:
            out.append(f"prompt tokens: {d['prompt_tokens']}; longest prompt {longest['tokens']} ({longest['sample']})")
        elif longest:
            out.append(f"prompt tokens: unknown (images); longest text {longest['text_tokens']} tokens ({longest['sample']})")
        if self.max_context:
            kind = "prompts" if d["prompt_tokens"] is not None else "prompts' text alone"
            out.append(f"over --max-context {self.max_context}: {d['over_max_context']} ({kind})")
        limit = d.get("image_limit")
        if limit:
            over = limit["over"]
            named = ", ".join(limit["samples_over"]) + (", ..." if over > len(limit["samples_over"]) else "")
            out.append(
                f"image limit ({limit['of']}): {limit['images']} a request; "
                + (f"{over} requests carry more: {named}" if over else "every request is within it")
            )
        cost = d.get("cost")
        if cost:
            out.append(_cost_line(cost))
        if self.written:
            out.append(
                f"request bodies: the first {self.written_count} written to {self.written} (images as {IMAGE_REF_SCHEME}KEY)"
            )
        return out


def _money(v: float) -> str:
    return f"${v:,.2f}" if v >= 1 or v == 0 else f"${v:.4f}"


def _cost_line(cost: dict[str, Any]) -> str:
    """The cost line of the printout."""
    pin, pout = cost["price"]
    least = "" if cost["prompts_known"] else "at least "  # image tokens unknown: the prompts' text alone
    times = f" ({cost['repeats']} repeats)" if cost.get("repeats", 1) > 1 else ""
    head = f"cost at {pin:g}/{pout:g} per million prompt/completion tokens{times}: prompts {least}{_money(cost['prompts'])}"
    if cost["at_most"] is None:
        return head + "; replies unknown (no --max-tokens and the benchmark sets none: the server's default)"
    return (
        f"{head}, replies at most {_money(cost['replies_at_most'])}: first turns at most {_money(cost['first_turns_at_most'])}; "
        f"a repair turn on every sample adds at most {_money(cost['repair_turns_add_at_most'])} "
        f"(at most {_money(cost['at_most'])} in all" + ("" if cost["prompts_known"] else ", plus the images' prompt tokens") + ")"
    )


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"


def _refs(conversation: Conversation) -> list[ImageRef]:
    return [im for m in conversation.messages for im in m.images]


def referenced_body(model: str, conversation: Conversation, generation: Generation) -> dict[str, Any]:
    """A request body as sent, except that each image is named by a reference, not its bytes."""
    from needlepoint.models.openai_compat import message_payload, sampling_params

    body: dict[str, Any] = {
        "model": model,
        "messages": message_payload(conversation, lambda ref: IMAGE_REF_SCHEME + ref.key),
    }
    body.update(sampling_params(generation))
    return body


CHUNK = 64  # samples whose conversations are held at once


def _request_facts(
    bench: Any,
    model: str,
    sample: Any,
    conv: Conversation,
    gen: Generation,
    facts: dict[tuple[str, int | None], ImageFacts],
    count_text: Callable[[str], int],
    rule: QwenVLRule | None,
) -> RequestFacts:
    """The counts of one first-turn request, its images' facts already known."""
    from needlepoint.contract.base import Parsed
    from needlepoint.models.openai_compat import request_body

    refs = _refs(conv)
    image_facts = [facts[(r.key, r.max_side)] for r in refs]
    body = request_body(model, conv, gen, [f.url or b"" for f in image_facts])  # base64 lengths added below
    text_tokens = sum(count_text(m.text) for m in conv.messages)
    image_tokens = sum(rule.tokens(f.width, f.height) for f in image_facts) if rule else (0 if not refs else None)
    repair = bench.followup(sample, Parsed(error="dry run"), "length")
    longest, choices = reply_cap(gen)
    repair_tokens = (longest or 0) + count_text(repair) if repair else 0
    size = len(body) + sum(f.b64_bytes for f in image_facts if f.url is None)
    replies = None if longest is None else longest * choices
    return RequestFacts(sample.id, size, len(refs), text_tokens, image_tokens, repair_tokens, replies)


def reply_cap(gen: Generation) -> tuple[int | None, int]:
    """The most completion tokens one choice of an answer may hold, as the request sends it
    (`max_completion_tokens`, else `max_tokens`: an --extra-body value over the flag; None where
    neither is a whole number, the server's default), and the choices it asks for (`n`)."""
    from needlepoint.models.openai_compat import sampling_params

    sent = sampling_params(gen)
    cap = sent.get("max_completion_tokens", sent.get("max_tokens"))
    n = sent.get("n", 1)
    whole = isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0
    choices = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
    return (cap if whole else None), choices


def dry_run(
    bench: Any,
    samples: Iterable[Any],
    model: str,
    generation: Generation,
    *,
    tokenizer: Path | None = None,
    max_context: int | None = None,
    write: Path | None = None,
    write_count: int = 0,
    reencode_images: bool = False,
    local_images: bool = False,
    workers: int = 4,
) -> DryRunSummary:
    """Build every first-turn request of `samples` (the default solver's: `bench.prompt` with
    `bench.generation`) and count it; write the first `write_count` bodies to `write` (JSON lines)."""
    samples = list(samples)
    count_text, text_rule = text_counter(tokenizer)
    rule = image_rule(model, tokenizer)
    summary = DryRunSummary(
        str(getattr(bench, "name", type(bench).__name__)),
        model,
        len(samples),
        text_rule=text_rule,
        image_rule=rule.name if rule else None,
        max_context=max_context,
        image_limit=bench.image_limit() if isinstance(bench, LimitsImages) else None,
    )
    facts: dict[tuple[str, int | None], ImageFacts] = {}
    bodies: list[dict[str, Any]] | None = [] if write is not None and write_count > 0 else None
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for start in range(0, len(samples), CHUNK):  # a chunk's conversations at a time: memory stays flat
                built = [(s, bench.prompt(s), bench.generation(s, generation)) for s in samples[start : start + CHUNK]]
                new = {(r.key, r.max_side): r for _, conv, _ in built for r in _refs(conv) if (r.key, r.max_side) not in facts}
                facts.update(zip(new, pool.map(lambda r: _image_facts(r, reencode_images, local_images), new.values())))
                for sample, conv, gen in built:
                    summary.requests.append(_request_facts(bench, model, sample, conv, gen, facts, count_text, rule))
                    if bodies is not None and summary.written_count < write_count:
                        bodies.append({"sample": sample.id, "body": referenced_body(model, conv, gen)})
                        summary.written_count += 1
    finally:
        if bodies is not None and write is not None:  # the first K bodies (images as references), written whole
            write_lines(write, bodies)
    summary.distinct_images = len(facts)
    summary.written = write if bodies is not None else None
    return summary


def dry_run_config(
    config: Any,
    *,
    tokenizer: Path | None = None,
    max_context: int | None = None,
    write: Path | None = None,
    write_count: int = 0,
) -> DryRunSummary:
    """The dry run of a RunConfig: its benchmark, data, --limit and --shard, and generation
    settings, as `evaluate` would load them; only the default solver's requests are built."""
    from needlepoint.contract.registry import make
    from needlepoint.core.shard import parse_shard, sample_cost, select
    from needlepoint.run.evaluate import _generation, run_folder

    if config.solver != "default":
        raise DataError(
            f"--dry-run builds the benchmark's own first-turn requests; --solver {config.solver} sends others, so drop --solver"
        )
    if max_context is not None and max_context < 1:
        raise DataError("--max-context must be a positive number of tokens")
    if write_count < 0:
        raise DataError("--dry-run-requests must be 0 or more")
    bench = make(config.benchmark, **config.options)
    samples = bench.load(config.data)
    if not samples:
        raise DataError(f"{config.data} holds no samples for {config.benchmark}")
    run_dir = run_folder(config, bench, samples)  # before --shard: the identity is the whole dataset's
    if config.sample is not None:  # --sample N: the stratified subset, as evaluate takes it (before any shard of it)
        from needlepoint.run.strata import sample_subset

        samples = sample_subset(bench, samples, config.sample, config.sample_seed)
    if config.shard:
        samples = samples.with_samples(select(samples, parse_shard(config.shard), sample_cost(bench)))
    requested = samples[: config.limit] if config.limit else samples
    generation = _generation(bench, config.generation, config.neutral_sampling)
    summary = dry_run(
        bench,
        requested,
        config.model,
        generation,
        tokenizer=tokenizer,
        max_context=max_context,
        write=write,
        write_count=write_count,
        reencode_images=config.reencode_images,
        local_images=config.local_images,
    )
    summary.benchmark = config.benchmark
    summary.run_dir = run_dir
    if config.price or config.prices:  # the cost line: the --model's price
        from needlepoint.contract.usage import load_prices

        price = load_prices(config.prices, config.price).of(config.model)
        summary.price = (price.input, price.output) if price is not None else None
    return summary


def add_arguments(p: Any) -> None:
    """The dry run's flags of `needlepoint eval`."""
    g = p.add_argument_group("dry run (build the requests, send nothing)")
    g.add_argument("--dry-run", action="store_true", help="build every first-turn request, print their counts, send nothing")
    g.add_argument(
        "--tokenizer", type=Path, metavar="PATH", help="the model's tokenizer.json (or its folder) to count text tokens"
    )
    g.add_argument("--max-context", type=int, metavar="TOKENS", help="count the prompts longer than this")
    g.add_argument(
        "--dry-run-requests", type=int, default=3, metavar="K", help="write the first K request bodies (default 3; 0: none)"
    )
    g.add_argument(
        "--dry-run-file",
        type=Path,
        default=Path("dry-run-requests.jsonl"),
        metavar="PATH",
        help="where those bodies go, images as references (default ./dry-run-requests.jsonl)",
    )


def estimate(summary: DryRunSummary) -> dict[str, Any]:
    """What the run's usage shows beside its own counts (ESTIMATE): the first turns' requests and
    tokens, and the rules they were counted by."""
    d = summary.to_dict()
    keys = ("samples", "requests", "text_tokens", "image_tokens", "prompt_tokens", "text_rule", "image_rule")
    return {k: d[k] for k in keys}


def run_cli(ns: Any, config: Any) -> int:
    """`needlepoint eval ... --dry-run`: print the counts (JSON with --json) and keep the estimate
    in the run's folder, where the run shows it beside what it used; exit code 0."""
    summary = dry_run_config(
        config,
        tokenizer=ns.tokenizer.expanduser() if ns.tokenizer else None,
        max_context=ns.max_context,
        write=ns.dry_run_file.expanduser(),
        write_count=ns.dry_run_requests,
    )
    summary.repeats = ns.repeats or 1  # --repeats K asks each request K times
    if summary.run_dir is not None:
        write_json(summary.run_dir / ESTIMATE, estimate(summary))
    if ns.json:
        print(json_text(summary.to_dict(), indent=2))
    else:
        print("\n".join(summary.lines()))
    return 0
