"""What a benchmark is to the runner: a few verbs over its own samples.

The runner knows nothing else about a benchmark, and a benchmark knows nothing about HTTP,
concurrency or the files of a run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from needlepoint.core import status
from needlepoint.core.conversation import Conversation, Generation
from needlepoint.core.errors import DataError
from needlepoint.core.records import Record, Turn, scores
from needlepoint.core.redact import scrub
from needlepoint.core.shard import WeighsSamples
from needlepoint.core.structured import AnswersInJson

if TYPE_CHECKING:  # annotations only: predictions.py builds on Dataset, stats/ lies above the contract
    from needlepoint.contract.predictions import PredictionsRun
    from needlepoint.stats.resampler import Resampler

__all__ = [
    "AnswersInJson",
    "BaseBenchmark",
    "Benchmark",
    "DataError",
    "Dataset",
    "DrawsFigures",
    "Parsed",
    "ReadsPredictions",
    "ReportBox",
    "ReportImage",
    "ReportItem",
    "Resamples",
    "SampleLike",
    "Table",
    "WeighsSamples",
    "answer_faults",
    "count_parse_errors",
    "format_cell",
    "parse_errors",
    "percent",
    "replies_text",
    "report_parse_error",
    "request_failures",
]


class SampleLike(Protocol):
    """A benchmark's own sample type; the runner only needs its id and a content fingerprint."""

    id: str

    def fingerprint(self) -> str:
        """What identifies the sample's content (not its location), for the run identity."""
        ...


S = TypeVar("S", bound=SampleLike)


@dataclass
class Dataset(Sequence[S], Generic[S]):
    """What `load` learned: the samples (a Dataset is the sequence of them), and whatever else the
    later verbs need, so that none depends on an earlier call's state.

    `skipped`: (sample id, reason) of rows found unfit to send; `split`: the split read (None when
    the benchmark has none); `truth`: the benchmark's own ground truth beyond the samples (MC-Bench:
    the whole annotation file its scorer reads); `identity`: what was learned that names the run,
    merged over `Benchmark.identity()` (MM-NIAH: the split found when none was asked for).
    `subset` and slicing keep everything but the samples."""

    samples: list[S]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    split: str | None = None
    truth: Any = None
    identity: dict[str, Any] = field(default_factory=dict)

    @overload
    def __getitem__(self, index: int) -> S: ...

    @overload
    def __getitem__(self, index: slice) -> Dataset[S]: ...

    def __getitem__(self, index: int | slice) -> S | Dataset[S]:
        if isinstance(index, slice):
            return self.with_samples(self.samples[index])
        return self.samples[index]

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[S]:
        return iter(self.samples)

    def with_samples(self, samples: Iterable[S]) -> Dataset[S]:
        """The same dataset holding only `samples` (a shard, the answered ones, a --limit)."""
        return replace(self, samples=list(samples))

    def subset(self, ids: Iterable[str]) -> Dataset[S]:
        """The samples whose id is in `ids`, in the dataset's order."""
        wanted = set(ids)
        return self.with_samples(s for s in self.samples if s.id in wanted)


@dataclass
class Parsed:
    """A parsed answer (JSON-ready) or the parse error that stands in for it."""

    answer: Any = None
    error: str | None = None


@dataclass
class Table:
    """A metrics table for the terminal and reports: a title, column names, rows of cells."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)


def percent(rate: float | None) -> float | None:
    """A rate in [0, 1] as a percentage with one decimal, as the papers print them (None stays None)."""
    return None if rate is None else round(100 * rate, 1)


def count_parse_errors(errors: Iterable[str | None]) -> dict[str, int]:
    """How often each parse error occurs (None: no error), sorted by name."""
    counts: dict[str, int] = {}
    for e in errors:
        if e:
            counts[e] = counts.get(e, 0) + 1
    return dict(sorted(counts.items()))


def answer_faults(errors: Iterable[str | None]) -> dict[str, Any]:
    """A scorer's counts of the answers it could not score, from each row's parse error: parse
    errors (`parse_fail`, `parse_errors`: the model answered, unreadably) apart from failed requests
    (`failed`, `failures`: status.FAILED kinds, which score 0 but are no parse failure: the model
    never answered)."""
    kept = list(errors)
    parsed = count_parse_errors(e for e in kept if e not in status.FAILED)
    failed = count_parse_errors(e for e in kept if e in status.FAILED)
    return {"parse_fail": sum(parsed.values()), "parse_errors": parsed, "failed": sum(failed.values()), "failures": failed}


def format_cell(value: Any) -> str:
    """A Table cell as people read it, the same in the terminal and the HTML report: None as a
    dash, booleans as yes/no, floats short but never losing a trailing ".0" (54.0, not 54)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:.6g}"
        return text if any(c in text for c in ".en") else text + ".0"
    return str(value)


@dataclass
class ReportBox:
    """A box to draw on a report image: absolute xyxy pixels of that image."""

    box: list[float]
    kind: str  # "gt" or "pred"
    group: int = 1
    label: str = ""


@dataclass
class ReportImage:
    """One image of a sample, with the boxes to draw on it and its caption ("" for the page's
    default, "Image N")."""

    image: Any  # an ImageRef
    boxes: list[ReportBox] = field(default_factory=list)
    caption: str = ""


@dataclass
class ReportItem:
    """One sample as the HTML report shows it.

    `prompt` and `answer` are shown as text (always escaped); `fields` are shown as a small table;
    `filters` name the values the page can filter on (e.g. {"style": "Reasoning"}); `correct`
    drives the "wrong only" filter (None: not applicable); `sort_value` orders by IoU or score;
    `context` is text shown under `context_label` as (text, highlighted) runs (e.g. the context a
    retrieval solver kept, its needle highlighted).
    """

    id: str
    prompt: str
    answer: str
    images: list[ReportImage] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    filters: dict[str, str] = field(default_factory=dict)
    correct: bool | None = None
    parse_error: str | None = None
    sort_value: float | None = None
    context: list[tuple[str, bool]] = field(default_factory=list)
    context_label: str = "context"


def report_parse_error(record: Record) -> str | None:
    """The parse error a report shows for a record: none for a failed request (status.FAILED),
    which the report shows once, as the failure its reply text names, not again as a parse error."""
    return None if record.get("status") in status.FAILED else record.get("parse_error")


def request_failures(records: Iterable[Record]) -> dict[str, int]:
    """How many records failed, by kind (status.FAILED), sorted by name."""
    return count_parse_errors(str(r.get("status")) for r in records if r.get("status") in status.FAILED)


def parse_errors(records: Iterable[Record]) -> dict[str, int]:
    """How often each parse error occurs among the records whose request did not fail: a failed
    request is no parse failure (the model never answered)."""
    return count_parse_errors(r.get("parse_error") for r in records if r.get("status") not in status.FAILED)


def replies_text(record: Record) -> str:
    """The model's replies of a record, the repair turn marked, or the error that stood in (scrubbed
    again of URL credentials and bearer tokens, for records written before errors were scrubbed)."""
    turns = record.get("turns") or []
    texts = [
        t.get("reply")
        or (f"[{scrub(str(t['error']))}]" if t.get("error") else "[no content, only reasoning]" if t.get("reasoning") else "")
        for t in turns
    ]
    if any(t.get("role", "model") != "model" for t in turns):  # a solver of several models or tools: each call named
        texts = [_call_head(t) + (text or _tool_result(t)) for t, text in zip(turns, texts)]
        sep = "\n---\n"
    else:
        sep = "\n--- repair turn ---\n"
    if record.get("status") == status.INPUT_ERROR:
        texts.append(f"[not sent: {record.get('error')}]")
    elif record.get("status") == status.INTERNAL_ERROR:
        texts.append(f"[internal error: {record.get('error')}]")
    return sep.join(texts)


def _call_head(turn: Turn) -> str:
    """`[role: model]` or `[tool: name]`, the head of one call in a report."""
    role = str(turn.get("role", "model"))
    head = f"tool: {turn.get('tool')}" if role == "tool" else f"{role}: {turn.get('model')}"
    about = turn.get("about")
    if isinstance(about, dict) and about:  # what the call was for (a solver's `about`), e.g. the phrase boxed
        head += " | " + ", ".join(f"{k} {v}" for k, v in about.items())
    return f"[{head}] "


def _tool_result(turn: Turn) -> str:
    text = json.dumps(turn.get("result"), ensure_ascii=False, default=str) if "result" in turn else ""
    return text if len(text) <= 500 else text[:497] + "..."


class Benchmark(Protocol):
    """The verbs every benchmark offers (docs/writing-a-benchmark.md, "The verbs").

    The flow is load -> solve -> score -> report: `load` returns a Dataset carrying all it learned
    (ground truth, skipped rows, split), and every later verb takes what it needs as arguments, so
    that none relies on state an earlier call left behind. The verbs, by who calls them:

    - the run: `name` (the registry's), `identity()` (the options in the run identity),
      `generation_defaults` (the authors' sampling settings where they differ from Generation's),
      `load(data)`;
    - the solver, per sample (pure and synchronous): `generation`, `prompt`, `parse`, `followup`
      (the repair turn), `judge` (the record's `scores`);
    - scoring, over the dataset: `score` (metrics.json), `running` (the progress bar's figure);
    - presentation and the report: `tables` (the terminal and the run page), `report_items` (the
      run page's samples);
    - the authors' files: `export` (the run's answers in the authors' formats).

    Optional verbs, each a runtime-checkable protocol of its own that the caller tests with
    `isinstance` (a benchmark only defines the method; `needlepoint.contract` exports them all):

    - the run: `cost(sample)` (`WeighsSamples`), what a sample costs to answer, for balancing
      `--shard` (without it every sample costs 1); `stratum(dataset, sample)` (`Stratifies`), the
      stratum a sample is drawn in for `eval --sample` and the human plans (without it, one stratum);
    - the solver: `answer_schema()` (`AnswersInJson`), the answer's JSON schema for
      `--structured-output` (a solver may declare its own);
    - scoring: `resampler(dataset, records)` (`Resamples`), the records as bootstrap units for the
      intervals of metrics.json (docs/statistics.md; without it, no intervals);
    - presentation and the report: `figures(run_dir, metrics)` (`DrawsFigures`), drawings of the
      metrics for the run's report (MM-NIAH's heatmaps);
    - the authors' files: `predictions_run(predictions, data)` (`ReadsPredictions`), the authors'
      prediction files read as a run's samples and records: `needlepoint score` scores them with
      `score` (and `resampler`), `needlepoint score --out` writes them as a run folder.
    """

    name: str
    generation_defaults: dict[str, Any]

    def identity(self) -> dict[str, Any]:
        """The options that change answers or scores; part of the run's identity."""
        ...

    def load(self, data: Path) -> Dataset[Any]:
        """Read a folder or file in the release layout; raise DataError on bad input."""
        ...

    def generation(self, sample: Any, base: Generation) -> Generation:
        """Generation settings for this sample (benchmarks with per-task defaults adjust them)."""
        ...

    def prompt(self, sample: Any) -> Conversation:
        """The first request for a sample."""
        ...

    def parse(self, sample: Any, text: str) -> Parsed:
        """A reply's text into an answer, or a parse error."""
        ...

    def followup(self, sample: Any, parsed: Parsed, finish_reason: str | None) -> str | None:
        """The repair text to send after a failed parse, or None for no second turn."""
        ...

    def judge(self, sample: Any, parsed: Parsed) -> dict[str, Any]:
        """Per-sample score fields stored in the record (e.g. IoU)."""
        ...

    def score(self, dataset: Dataset[Any], records: Sequence[Record]) -> dict[str, Any]:
        """The answers (one record per sample of `dataset`, in its order) into metrics (JSON-ready)."""
        ...

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        """The metrics laid out for people."""
        ...

    def running(self, records: Sequence[Record]) -> str:
        """A short running figure for the progress bar, from the records' outcomes (status,
        answer, parse error, scores: `records.outcome`, without their turns)."""
        ...

    def report_items(self, dataset: Dataset[Any], records: Sequence[Record]) -> list[ReportItem]:
        """The samples as the HTML report shows them (only answered samples): one item a record,
        in the records' order, each from its sample and its record alone (the report's drafting
        processes make the items of a few records at a time while a run answers)."""
        ...

    def export(
        self, run_dir: Path, dataset: Dataset[Any], records: Sequence[Record], model: str, metrics: dict[str, Any]
    ) -> list[Path]:
        """Write the authors' formats into the run folder; return the paths written."""
        ...


@runtime_checkable
class Resamples(Protocol):
    """A benchmark whose records can be bootstrapped (optional verb `resampler`): the intervals of
    metrics.json's `intervals` block (stats.run.interval_block, docs/statistics.md)."""

    def resampler(self, dataset: Dataset[Any], records: Sequence[Record]) -> Resampler | None:
        """The answered records of `dataset` as bootstrap units (a stats.Resampler, built on
        needlepoint.stats), or None when nothing can be resampled (e.g. no record has a score)."""
        ...


@runtime_checkable
class Stratifies(Protocol):
    """A benchmark whose samples fall into strata (optional verb `stratum`): `eval --sample N` and
    `needlepoint human --plan N` draw each stratum's share of N (run/strata.py)."""

    def stratum(self, dataset: Dataset[Any], sample: Any) -> str:
        """The sample's stratum, one label (e.g. "Reasoning/positive", "4-6")."""
        ...


@runtime_checkable
class LimitsImages(Protocol):
    """A benchmark whose run states how many images one request may carry (optional verb
    `image_limit`, the model family's or its API's: `--model-family`): the dry run names the
    samples whose requests carry more."""

    def image_limit(self) -> tuple[int, str] | None:
        """(the most images a request may carry, whose limit it is), or None when none is stated."""
        ...


@runtime_checkable
class ReadsPredictions(Protocol):
    """A benchmark that reads its authors' prediction files (optional verb `predictions_run`): the
    file read as a run, which `needlepoint score` scores with the ordinary `score` and `resampler`
    and `needlepoint score --out` writes as a run folder (run/predictions_run.py)."""

    def predictions_run(self, predictions: Path, data: Path | None) -> PredictionsRun:
        """The samples and records of a prediction file in the authors' format (or of a run folder,
        which holds the run's answers in that format); `data`, the release, where the format
        needs it (MC-Bench's annotation file). DataError names what is wrong with the file."""
        ...


@runtime_checkable
class DrawsFigures(Protocol):
    """A benchmark with drawings of its metrics for the run's report (MM-NIAH's heatmaps): drawn
    with the report, so `--no-report` skips them."""

    def figures(self, run_dir: Path, metrics: dict[str, Any]) -> list[Path]:
        """Draw the figures into the run folder; return the paths written."""
        ...


class BaseBenchmark:
    """The defaults most benchmarks share, so that a new benchmark writes only what is its own:
    `name`, `load`, `prompt`, `parse`, `judge` and `score` (a subclass overrides any other verb).

    The defaults: no options in the identity, the run's generation settings for every sample, no
    repair turn, one table of the metrics' top-level numbers, the parse failures as the running
    figure, no export, and a report that shows each sample's prompt, images and reply. It has none
    of the optional verbs (Benchmark's docstring lists them): without `predictions_run`,
    `needlepoint score` refuses in one sentence.
    """

    name: str
    scores_first_box: bool = False  # the first box of an answer is the one scored (a detector family answers its best)
    generation_defaults: dict[str, Any] = {}

    def identity(self) -> dict[str, Any]:
        return {}

    def generation(self, sample: Any, base: Generation) -> Generation:
        return base

    def prompt(self, sample: Any) -> Conversation:
        raise NotImplementedError

    def followup(self, sample: Any, parsed: Parsed, finish_reason: str | None) -> str | None:
        return None

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        numbers = [[k, v] for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return [Table(self.name, ["metric", "value"], numbers)] if numbers else []

    def running(self, records: Sequence[Record]) -> str:
        fails = sum(parse_errors(records).values())
        failed = sum(request_failures(records).values())
        return f"parse fail {fails}" + (f"  failed {failed}" if failed else "") if records else ""

    def export(
        self, run_dir: Path, dataset: Dataset[Any], records: Sequence[Record], model: str, metrics: dict[str, Any]
    ) -> list[Path]:
        return []

    def report_items(self, dataset: Dataset[Any], records: Sequence[Record]) -> list[ReportItem]:
        by_id = {s.id: s for s in dataset}
        items = []
        for rec in records:
            conversation = self.prompt(by_id[rec["id"]])
            correct = scores(rec).get("correct")
            items.append(
                ReportItem(
                    id=str(rec["id"]),
                    prompt="\n".join(m.text for m in conversation.messages if m.role == "user"),
                    answer=replies_text(rec),
                    images=[ReportImage(im) for m in conversation.messages for im in m.images],
                    correct=correct if isinstance(correct, bool) else None,
                    parse_error=report_parse_error(rec),
                )
            )
        return items
