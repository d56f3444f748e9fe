"""The report's rows and thumbnails made while a run answers, by forked processes that follow its
records file.

Drafting must never slow the answering, so the run's client does nothing for it: before the run
answers, `start` forks one process per core (at most 8), each in the idle scheduling class (a
core only when no other program wants it). Each holds the run's samples (the fork's copy),
reads the records the run appends to its records file from then on (`core.tail.Tail`: whole
lines, in order; with `--processes` the command copies its workers' records there), and for
the answered samples that fall to it (`_share`) builds their report items (`items_of`), writes
their page rows (`report.rows`: the card, what the model saw, each image's link to its own file)
to a file of its own under `report/rows/`, then draws their images' thumbnails (at the size the
page shows them, `thumbs.side_of`), reading each image itself (a parquet
release through a handle of its own, see `parquet`). Rows come first: between two looks at the
records file a process draws for at most POLL_S, so a process behind the run (a fast server:
hundreds of answers a second; drawing costs about a millisecond an image) still makes every row
soon after its answer. Once the run has answered (`Drafts.wind_down`: the parent closes its end
of a pipe) each process makes the rows of the last answers, while the run scores on a core the
server no longer uses, draws nothing more and ends; the report waits for them (at most
WIND_DOWN_S) and makes what they have not (a row; `Thumbnails.finish`: an image file of its own is
then shown from that file, others are drawn). An interrupted run ends them at once
(`Drafts.stop`); a thumbnail being written then is left as a temporary file, which the report
removes, a row as a line without its end, which the report leaves out.
"""

from __future__ import annotations

import gc
import os
import select
import shutil
import signal
import time
import warnings
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from needlepoint.contract.base import ReportItem
from needlepoint.core.files import AppendLog, json_line
from needlepoint.core.forks import enter_child, fork, signals_held
from needlepoint.core.records import Record
from needlepoint.core.tail import Tail
from needlepoint.report.rows import ROWS_DIR, make_row, record_mark, row_line
from needlepoint.report.thumbs import all_cores, draw, existing, link_to, lower_priority, side_of, thumb_key

MIN_SAMPLES = 64  # fewer samples to answer: the report draws at the end (a handful of images)
POLL_S = 0.1  # how often a drafting process looks for new records
WIND_DOWN_S = 1.0  # how long the end of a run waits at most for the rows its drafts are still making...
STALL_S = 0.15  # ...and how long after their last row (a batch's items take a few tens of ms first)

ItemsOf = Callable[[list[Any], list[Record]], list[ReportItem]]


class Drafts:
    """The drafting processes of one run: `wind_down` once it has answered, `stop` to end them
    (safe to call twice)."""

    def __init__(self, rows: Path) -> None:
        self.pids: list[int] = []
        self.rows = rows  # the folder they write the rows to
        self.ending = -1  # the pipe's end whose closing tells them the run has answered (-1: closed)

    def wind_down(self) -> None:
        """The run has answered: each process makes the rows of the records written by now,
        draws nothing more, and ends (while the run scores, on a core the server no longer uses)."""
        if self.ending >= 0:
            os.close(self.ending)
            self.ending = -1

    def stop(self, wait: bool = False) -> None:
        """End the drafting processes and wait for them: nothing is written into the folder after.
        `wait` (after `wind_down`): first let them end by themselves while they still write rows
        (a busy host may leave the idle class no core: then the report makes the rest)."""
        running = self._rows_made(list(self.pids)) if wait else self.pids
        for pid in running:
            try:
                os.kill(pid, signal.SIGKILL)  # a draft half written is a temporary file the report removes
            except ProcessLookupError:
                pass
        for pid in running:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.pids = []
        self.wind_down()

    def _rows_made(self, running: list[int]) -> list[int]:
        """Wait for `running` to end while their rows files grow (for at most WIND_DOWN_S, and
        no longer than STALL_S after the last row); those still running."""
        start = time.monotonic()
        size, grown = -1, start
        while running and (now := time.monotonic()) < start + WIND_DOWN_S and now < grown + STALL_S:
            running = [pid for pid in running if not _ended(pid)]
            if (now_size := _size_of(self.rows)) != size:
                size, grown = now_size, now
            time.sleep(0.005 if running else 0)
        return running


def _size_of(folder: Path) -> int:
    """The bytes the files of `folder` hold (0 when it is not there)."""
    try:
        return sum(entry.stat().st_size for entry in os.scandir(folder))
    except OSError:
        return 0


def _ended(pid: int) -> bool:
    """Whether the child `pid` has ended (and is waited for)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True


def start(
    folder: Path, records: Path, samples: Sequence[Any], items_of: ItemsOf, expected: int, processes: int | None = None
) -> Drafts | None:
    """Fork `processes` (default: one a core, `thumbs.all_cores`) drafting processes for a run
    that will answer `expected` samples, appending their records to `records` from now on (None:
    too few to be worth it, or no fork on this system). A fork that fails leaves fewer; an
    interrupt while forking stops those forked."""
    if expected < MIN_SAMPLES or not hasattr(os, "fork"):
        return None
    by_id = {str(s.id): s for s in samples}
    count = processes or all_cores()
    parent = os.getpid()
    try:
        since = records.stat().st_size  # what a resumed run answered before is the report's to make
    except FileNotFoundError:
        since = 0
    drafts = Drafts(folder.parent / ROWS_DIR)
    shutil.rmtree(drafts.rows, ignore_errors=True)  # an earlier command's: its records are the report's
    ending, drafts.ending = os.pipe()
    gc.freeze()  # the collector in a child leaves the parent's objects alone: their pages stay shared
    try:
        with signals_held():
            for index in range(count):
                draft = partial(
                    _draft, parent, folder, Tail(records, since), by_id, items_of, index, count, ending, drafts.ending
                )
                try:
                    drafts.pids.append(fork(draft))
                except OSError:  # drafts are an optimisation: the report makes what is missing
                    break
    except BaseException:  # Ctrl-C, held until the forks were done
        drafts.stop()
        raise
    finally:
        gc.unfreeze()
        os.close(ending)
    return drafts


def _idle() -> None:
    """Run in Linux's idle scheduling class (a core only when no other program wants it, bar a
    sliver: weight 3 against a normal program's 1,024), elsewhere at a lower priority: a draft
    not drawn in time costs a link or a drawing at the run's end, while the run's client and a server on the
    same machine must not wait for one."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        lower_priority()


def _draft(
    parent: int,
    folder: Path,
    tail: Tail,
    by_id: dict[str, Any],
    items_of: ItemsOf,
    index: int,
    count: int,
    ending: int,
    parents_end: int,
) -> int:
    """A drafting process: make the rows of the samples (and draw the thumbnails of the images)
    that fall to `index` (of `count`) of those whose records `tail` finds, until stopped, the
    parent is gone, or the pipe `ending` is closed (`Drafts.wind_down`: then the rows of what
    the records file holds, and no more thumbnails)."""
    os.close(parents_end)  # the parent's to close: this copy would keep the pipe open
    if not enter_child(parent, signal.SIG_DFL):
        return 0
    _idle()
    warnings.simplefilter("ignore")  # e.g. Pillow's on a big image: the run's progress line is the terminal's
    done = set(existing(folder))
    page = os.fspath(folder.parent)
    rows: AppendLog | None = AppendLog(folder.parent / ROWS_DIR / f"{index}.jsonl")
    todo: deque[tuple[str, Any, int]] = deque()
    while os.getppid() == parent:
        last = _closed(ending)  # then the records file holds every answer: one more look
        lines = tail.read()
        tail.done()
        answered = {i: r for _, r in lines if r and (i := str(r["id"])) in by_id and _share(i, count) == index}
        try:
            items = items_of([by_id[i] for i in answered], list(answered.values())) if answered else []
        except Exception:  # a record the report itself will name: nothing drafted for it
            items = []
        for it in items:
            if rows is not None and (record := answered.get(str(it.id))):
                rows = rows if _write_row(rows, it, record, page) else None
            side = side_of(it)
            for im in it.images:
                if (key := thumb_key(im, side)) not in done:
                    done.add(key)
                    todo.append((key, im.image, side))
        if last:
            return 0
        until = time.monotonic() + POLL_S  # then a look for new records: their rows come first
        while todo and time.monotonic() < until and not _closed(ending):
            draw(folder, *todo.popleft())
        if not todo:
            _closed(ending, POLL_S)
    return 0


def _closed(ending: int, timeout: float = 0.0) -> bool:
    """Whether the pipe's write end is closed (the run has answered), waiting up to `timeout`."""
    poll = select.poll()  # not select(): no limit on the descriptor's number
    poll.register(ending, select.POLLIN)
    return bool(poll.poll(timeout * 1000))


def _share(sample_id: str, count: int) -> int:
    """Which of `count` drafting processes makes the row and the thumbnails of a sample (an image
    two samples share may be drawn by two: the same file, written whole by each)."""
    return zlib.crc32(sample_id.encode()) % count


def _write_row(log: AppendLog, item: ReportItem, record: Record, page: str) -> bool:
    """Append the row of `item` (`rows.make_row`, each image's link asked now) as one line;
    False once the file cannot be written (a full disk: the report then makes the rest)."""
    try:
        line = row_line(make_row(item, record, partial(link_to, page=page)), record_mark(json_line(record)))
    except Exception:  # a record the report itself will name: its row is made there
        return True
    try:
        log.append_lines(line)
    except OSError:
        return False
    return True
