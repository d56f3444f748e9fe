"""The progress display of a run on stderr: a rich bar in a terminal, a plain line every few
seconds without one (a log file, CI, nohup). Both count failed requests apart from answers
("96/120 answered, 24 failed"), so that a run whose requests all fail never reads as done, and
both say what the run waits for (the model's `wait_note()`), if anything.

The runner calls `advance(failed=...)` once per finished sample, `tick()` about once a second and
`close()` at the end; nothing here knows a benchmark beyond its `name` and `running(records)`.
The running figure is over the answered samples only, as the run's table is (evaluate.finish: a
failed request, e.g. one a spent budget did not send, is counted apart, never as a wrong answer),
so that the last progress line and the table show one number.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from needlepoint.core import status
from needlepoint.core.conversation import WaitNotes
from needlepoint.core.records import Record

__all__ = ["BarProgress", "PlainProgress", "RunProgress", "counts_text", "make_progress", "running_figure"]


class _Bench(Protocol):
    name: str

    def running(self, records: Sequence[Record]) -> str: ...


class RunProgress(Protocol):
    """What the runner drives: one `advance` per finished sample, `tick` about once a second."""

    def advance(self, failed: bool = False) -> None: ...

    def tick(self) -> None: ...

    def close(self) -> None: ...


def counts_text(answered: int, failed: int, total: int) -> str:
    """`120/1142 answered`, or with failed requests `96/120 answered, 24 failed` (never `120/120 done`)."""
    return f"{answered}/{total} answered" + (f", {failed} failed" if failed else "")


def make_progress(
    benchmark: _Bench, total: int, finished: list[Record], show: bool, every_s: float = 5.0, models: Sequence[Any] = ()
) -> RunProgress:
    """The display for a run of `total` samples to request: plain lines when stderr is no terminal,
    else a rich bar (nothing at all when `show` is off or nothing is to be requested). `finished`
    is the list of records' outcomes (`records.outcome`: no turns) that the runner appends to and
    the benchmark's running figure reads; the line names what the run waits for from any of
    `models` (the main model and the solver's)."""
    if show and total and not sys.stderr.isatty():
        return PlainProgress(benchmark, total, finished, every_s, models)
    return BarProgress(benchmark, total, finished, show, models)


def running_figure(benchmark: _Bench, records: Sequence[Record]) -> str:
    """The benchmark's running figure over the answered records (not the failed requests, which
    the counts show): the samples and the rule of the run's headline metrics."""
    return benchmark.running([r for r in records if r.get("status") not in status.FAILED])


def wait_notes(models: Sequence[Any]) -> Callable[[], str | None] | None:
    """One `wait_note()` over every model that has one (each says what a request waits for)."""
    notes = [m.wait_note for m in models if isinstance(m, WaitNotes)]
    if not notes:
        return None
    return lambda: "; ".join(n for n in (note() for note in notes) if n) or None


class PlainProgress:
    """One plain line on stderr every `every_s` seconds while samples remain, e.g.
    `ref_adv_s: 120/1142 answered, 3.2/s, about 5 min left`, followed by what the run waits for."""

    def __init__(self, benchmark: _Bench, total: int, records: list[Record], every_s: float, models: Sequence[Any] = ()) -> None:
        self.benchmark = benchmark
        self.total = total
        self.records = records
        self.every_s = every_s
        self.wait_note = wait_notes(models)
        self.n = 0
        self.failed = 0
        self._t0 = time.perf_counter()
        self._last = self._t0

    def line(self) -> str:
        """The progress line as it is printed."""
        elapsed = time.perf_counter() - self._t0
        rate = self.n / elapsed if elapsed > 0 else 0.0
        left = f", about {duration((self.total - self.n) / rate)} left" if rate > 0 and self.n < self.total else ""
        figure = running_figure(self.benchmark, self.records)
        note = self.wait_note() if self.wait_note is not None else None
        counts = counts_text(self.n - self.failed, self.failed, self.total)
        return (
            f"{self.benchmark.name}: {counts}, {rate:.1f}/s{left}"
            + (f"  {figure}" if figure else "")
            + (f"  ({note})" if note else "")
        )

    def advance(self, failed: bool = False) -> None:
        self.n += 1
        self.failed += failed

    def tick(self) -> None:
        """Print a line when `every_s` seconds have passed since the last one (called about once a second)."""
        now = time.perf_counter()
        if now - self._last >= self.every_s:
            self._last = now
            print(self.line(), file=sys.stderr, flush=True)

    def close(self) -> None:
        print(self.line(), file=sys.stderr, flush=True)


def duration(seconds: float) -> str:
    """A time left as people read it: `40 s`, `12 min`, `2.5 h`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class BarProgress:
    """A rich progress bar with the answered and failed counts, rate, ETA and the benchmark's
    running figure; while requests wait (a Retry-After, a backoff) it says so."""

    def __init__(self, benchmark: _Bench, total: int, records: list[Record], enabled: bool, models: Sequence[Any] = ()) -> None:
        self.benchmark = benchmark
        self.records = records
        self.total = total
        self.wait_note = wait_notes(models)
        self.bar: Any = None
        self._last = 0.0
        self._n = 0
        self._failed = 0
        if not enabled or total == 0:
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[figure]}"),
            TextColumn("[yellow]{task.fields[note]}"),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.bar.add_task(
            benchmark.name,
            total=total,
            counts=counts_text(0, 0, total),
            rate="",
            figure=running_figure(benchmark, records),
            note="",
        )
        self.bar.start()
        self._t0 = time.perf_counter()

    def advance(self, failed: bool = False) -> None:
        if self.bar is None:
            return
        self._n += 1
        self._failed += failed
        fields: dict[str, Any] = {"counts": counts_text(self._n - self._failed, self._failed, self.total)}
        now = time.perf_counter()
        if now - self._last > 0.25:
            self._last = now
            fields.update(
                rate=f"{self._n / max(now - self._t0, 1e-9):6.1f}/s", figure=running_figure(self.benchmark, self.records)
            )
        self.bar.update(self.task, advance=1, **fields)

    def note(self) -> str:
        """What the run is waiting for, or "" (shown at the end of the progress line)."""
        note = self.wait_note() if self.wait_note is not None else None
        return note or ""

    def tick(self) -> None:
        """Refresh the wait note (called about once a second, also while nothing finishes)."""
        if self.bar is not None:
            self.bar.update(self.task, note=self.note())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.task, figure=running_figure(self.benchmark, self.records))
            self.bar.stop()
