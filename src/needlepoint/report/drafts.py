"""The report's thumbnails drawn while a run answers, by forked processes that follow its records file.

Drafting must never slow the answering, so the run's client does nothing for it: before the run
answers, `start` forks one process per core (at most 8), each in the idle scheduling class (a
core only when no other program wants it). Each holds the run's samples (the fork's copy),
reads the records the run appends to its records file from then on (`core.tail.Tail`: whole
lines, in order; with `--processes` the command copies its workers' records there), builds the
report items of those samples (`items_of`) and draws the thumbnails of the images whose key falls
to it (at the size the page shows them, `thumbs.side_of`), reading each image itself (a parquet
release through a handle of its own, see `parquet`). A process behind the run (a fast server:
hundreds of answers a second) keeps drawing in record order: whatever it has not drawn by the
last answer is the report's (`Thumbnails.finish`: an image file of its own is then shown from
that file, others are drawn). After the last answer `Drafts.stop` ends them at once; a thumbnail
being written then is left as a temporary file, which the report removes.
"""

from __future__ import annotations

import gc
import os
import signal
import time
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from needlepoint.contract.base import ReportItem
from needlepoint.core.forks import enter_child, fork, signals_held
from needlepoint.core.records import Record
from needlepoint.core.tail import Tail
from needlepoint.report.thumbs import all_cores, draw, existing, lower_priority, side_of, thumb_key

MIN_SAMPLES = 64  # fewer samples to answer: the report draws at the end (a handful of images)
POLL_S = 0.1  # how often a drafting process looks for new records

ItemsOf = Callable[[list[Any], list[Record]], list[ReportItem]]


class Drafts:
    """The drafting processes of one run: `stop` ends them (and is safe to call twice)."""

    def __init__(self) -> None:
        self.pids: list[int] = []

    def stop(self) -> None:
        """End the drafting processes and wait for them: nothing is written into the folder after."""
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)  # a draft half written is a temporary file the report removes
            except ProcessLookupError:
                pass
        for pid in self.pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.pids = []


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
    drafts = Drafts()
    gc.freeze()  # the collector in a child leaves the parent's objects alone: their pages stay shared
    try:
        with signals_held():
            for index in range(count):
                draft = partial(_draft, parent, folder, Tail(records, since), by_id, items_of, index, count)
                try:
                    drafts.pids.append(fork(draft))
                except OSError:  # drafts are an optimisation: the report makes what is missing
                    break
    except BaseException:  # Ctrl-C, held until the forks were done
        drafts.stop()
        raise
    finally:
        gc.unfreeze()
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


def _draft(parent: int, folder: Path, tail: Tail, by_id: dict[str, Any], items_of: ItemsOf, index: int, count: int) -> int:
    """A drafting process: draw the thumbnails that fall to `index` (of `count`) of the samples
    whose records `tail` finds, until stopped or the parent is gone."""
    if not enter_child(parent, signal.SIG_DFL):
        return 0
    _idle()
    warnings.simplefilter("ignore")  # e.g. Pillow's on a big image: the run's progress line is the terminal's
    done = set(existing(folder))
    while os.getppid() == parent:
        lines = tail.read()
        tail.done()
        answered = [r for _, r in lines if r and str(r["id"]) in by_id]
        if not answered:
            time.sleep(POLL_S)
            continue
        try:
            items = items_of([by_id[str(r["id"])] for r in answered], answered)
        except Exception:  # a record the report itself will name: no draft for it
            continue
        mine = [
            (key, im.image, side)
            for it in items
            for side in (side_of(it),)
            for im in it.images
            if int(key := thumb_key(im, side), 16) % count == index and key not in done
        ]
        for key, ref, side in mine:
            if key not in done:
                done.add(key)
                draw(folder, key, ref, side)
    return 0
