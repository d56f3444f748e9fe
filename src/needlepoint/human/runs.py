"""A human run folder: the same run.json and append-only records.jsonl as a model's run (model
label `human:NAME`, solver "human"), so that score, report, merge and the leaderboard read it as
any run. Each answer is on disk (one `write` on an append-only file) before `add` returns, so a
closed browser or a killed server loses nothing submitted, and reopening resumes.

A record holds the answer in the benchmark's own schema (answers.py), the benchmark's `judge`
fields under `scores`, and the person's facts under `solver`: seconds, unsure, note, skipped,
gold, source. Gold samples (answer shown after submission, for training) go to `gold.jsonl`
beside the records, so that no scorer ever counts them. A skipped sample is recorded with no
answer (parse error "skipped") and scores as a wrong answer, as a model's unparsable reply does.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint import __version__
from needlepoint.contract.base import Benchmark, Dataset, Parsed
from needlepoint.core import status
from needlepoint.core.config import dataset_fingerprint, hash_identity, model_slug
from needlepoint.core.errors import DataError
from needlepoint.core.files import AppendLog
from needlepoint.core.numeric import is_finite
from needlepoint.core.records import Record, RunHeader
from needlepoint.core.store import RunStore, read_records
from needlepoint.human.answers import MAX_TEXT, check_answer
from needlepoint.human.kinds import human_options
from needlepoint.human.plan import Plan, load_plan_data
from needlepoint.run.runfolder import RUNS_ROOT

__all__ = ["GOLD", "HUMAN", "SKIPPED", "HumanRun", "check_annotator", "human_label"]

GOLD = "gold.jsonl"  # gold samples' records: kept, never scored
HUMAN = "human"  # the solver name of a human run
SKIPPED = "skipped"  # the parse error of a skipped sample
SOURCES = ("page", "labelstudio", "import")
IDENTITY_VERSION = 1


def check_annotator(name: str) -> str:
    """An annotator's name: 1-60 letters, digits, `.`, `_` or `-` (it names folders and rows)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,59}", name or ""):
        raise DataError(
            f"--annotator {name[:80]!r} is not a name of 1-60 letters, digits, '.', '_' or '-' (starting with a letter or digit); "
            "choose e.g. --annotator ann1"
        )
    return name


def human_label(annotator: str) -> str:
    """The model label of an annotator's runs: `human:NAME`."""
    return f"{HUMAN}:{annotator}"


@dataclass
class HumanRun:
    """One annotator's run folder over one plan. Open with `HumanRun.open`; `add` records answers."""

    bench_name: str
    bench: Benchmark
    dataset: Dataset[Any]
    annotator: str
    plan: Plan
    store: RunStore
    confidence: bool = False
    data: Path = Path(".")
    _gold_log: AppendLog | None = None
    _done: dict[str, Record] = field(default_factory=dict)
    _by_id: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    announce: bool = False  # say on stderr once when the plan is done and scored (the `human` command's terminal)
    _announced: bool = False

    @property
    def dir(self) -> Path:
        return self.store.dir

    @property
    def label(self) -> str:
        return human_label(self.annotator)

    @classmethod
    def open(
        cls, bench_name: str, data: Path, annotator: str, plan: Plan, out: Path | None = None, confidence: bool = False
    ) -> HumanRun:
        """Create or resume the run folder of `annotator` on `plan` (default
        `runs/<bench>/human-NAME/<hash>`); DataError when `out` holds another plan's or annotator's run."""
        check_annotator(annotator)
        bench, dataset = load_plan_data(bench_name, data)
        known = {s.id for s in dataset}
        unknown = [i for i in [*plan.ids, *plan.gold_ids] if i not in known]
        if unknown:
            raise DataError(f"the plan names sample {unknown[0]!r}, which {data} does not hold; make the plan from this data")
        label = human_label(annotator)
        ident: dict[str, Any] = {
            "version": IDENTITY_VERSION,
            "benchmark": bench_name,
            "model": label,
            "dataset": dataset_fingerprint(dataset),
            "solver": HUMAN,
            "solver.plan": plan.identity(),
            "solver.confidence": confidence,
            **{f"option.{k}": v for k, v in sorted(bench.identity().items())},
        }
        run_hash = hash_identity(ident)
        run_dir = out if out is not None else RUNS_ROOT / bench_name / f"{HUMAN}-{model_slug(annotator)}" / run_hash
        header: RunHeader = {
            "needlepoint": __version__,
            "hash": run_hash,
            "identity": ident,
            "config": {
                "benchmark": bench_name,
                "data": str(data),
                "model": label,
                "options": human_options(bench_name),
                "solver": HUMAN,
                "solver_options": {
                    "annotator": annotator,
                    "plan": plan.size,
                    "seed": plan.seed,
                    "gold": len(plan.gold_ids),
                    "confidence": confidence,
                },
            },
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "status": "running",
            "model_label": label,
        }
        store = RunStore.open(run_dir, header, "choose another --out folder, or another --annotator")
        run = cls(bench_name, bench, dataset, annotator, plan, store, confidence, data, AppendLog(run_dir / GOLD))
        run._done = {**read_records(run_dir / GOLD), **store.records()}
        return run

    def done(self) -> dict[str, Record]:
        """The records given so far (scored and gold), by sample id."""
        with self._lock:
            return dict(self._done)

    def sample(self, sample_id: str) -> Any:
        """The plan's sample of that id; DataError for an id outside the plan."""
        if sample_id not in self.plan.strata and sample_id not in self.plan.ids and sample_id not in self.plan.gold_ids:
            raise DataError(f"sample {str(sample_id)[:80]!r} is not in this plan; reload the page")
        if not self._by_id:
            self._by_id = {s.id: s for s in self.dataset}
        return self._by_id[sample_id]

    def add(
        self,
        sample_id: str,
        answer: Any,
        *,
        seconds: float,
        unsure: bool = False,
        note: str = "",
        skipped: bool = False,
        source: str = "page",
    ) -> Record:
        """Check an answer, store it (on disk before this returns) and return its record."""
        if not isinstance(sample_id, str):
            raise DataError("the answer names no sample id; reload the page")
        sample = self.sample(sample_id)
        if not is_finite(seconds) or not 0 <= float(seconds) <= 7 * 86400:
            raise DataError(f"the time spent {seconds!r} is not a number of seconds from 0 to a week; reload the page")
        if not isinstance(unsure, bool) or not isinstance(skipped, bool):
            raise DataError("'unsure' and 'skipped' are true or false; reload the page")
        if not isinstance(note, str) or len(note) > MAX_TEXT:
            raise DataError(f"the note is not text of at most {MAX_TEXT} characters; shorten it")
        if source not in SOURCES:
            raise DataError(f"source {source!r} is not one of {', '.join(SOURCES)}")
        parsed = (
            Parsed(error=SKIPPED) if skipped else Parsed(answer=check_answer(self.bench_name, sample, answer, self.confidence))
        )
        gold = self.plan.is_gold(sample_id)
        record: Record = {
            "id": sample_id,
            "status": status.DONE,
            "turns": [],
            "repair_used": False,
            "answer": parsed.answer,
            "parse_error": parsed.error,
            "scores": self.bench.judge(sample, parsed),
            "solver": {
                "annotator": self.annotator,
                "seconds": round(float(seconds), 3),
                "unsure": unsure,
                "note": note,
                "skipped": skipped,
                "gold": gold,
                "source": source,
            },
            "elapsed_s": round(float(seconds), 3),
        }
        with self._lock:
            if gold:
                assert self._gold_log is not None
                self._gold_log.append(record)
            else:
                self.store.append(record)
            self._done[sample_id] = record
        return record

    def pending(self) -> list[str]:
        """The plan's samples (in presentation order) with no record yet."""
        done = self.done()
        return [i for i in self.plan.order() if i not in done]

    def finish(self) -> dict[str, Any]:
        """Score the scored samples answered so far with the benchmark's own scorer: metrics.json
        and the authors' formats, as a model run's end writes them; the header says complete or
        incomplete; the run's HTML page (report/index.html). Returns the metrics."""
        from needlepoint.run.evaluate import finish, write_report

        done = self.done()
        samples = self.dataset.subset(self.plan.ids)
        records = {i: r for i, r in done.items() if i in set(self.plan.ids)}
        result = finish(self.bench, samples, records, self.dir, self.label)
        complete = all(i in records for i in self.plan.ids)
        self.store.update_header(status="complete" if complete else "incomplete", finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        answered = samples.subset(records)  # the run page: the boxes drawn over the images, as a model's
        write_report(self.dir, self.bench, answered, [records[s.id] for s in answered], result.metrics, self.store.header)
        if complete and self.announce and not self._announced:
            self._announced = True
            print(
                f"needlepoint human: the plan is done: all {len(self.plan.order())} samples answered, scored into "
                f"{self.dir / 'metrics.json'} (page: {self.dir / 'report' / 'index.html'}); Ctrl-C stops the page",
                file=sys.stderr,
                flush=True,
            )
        return result.metrics

    def close(self) -> None:
        """Release the folder (its lock, the open files)."""
        if self._gold_log is not None:
            self._gold_log.close()
        self.store.close()
