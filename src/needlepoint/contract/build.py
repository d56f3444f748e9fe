"""The rule every builder of `needlepoint build NAME ...` (contract/cli.py) follows for its output
folder: a build is complete or it is not there.

A builder writes into `FOLDER.partial` beside its output folder (`staged`), whose manifest says
`"status": "incomplete"` from the start, and renames it into place only when everything is
written. A failed build removes it; a killed one leaves it, marked incomplete, and the next build
into the same place replaces it (and an interrupted build of an older version, recognised by its
files). A complete build, or a folder holding anything else, is never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from needlepoint.core.errors import DataError
from needlepoint.core.files import lock_exclusively, write_json

COMPLETE = "complete"
INCOMPLETE = "incomplete"


def partial_folder(final: Path) -> Path:
    """Where a build of `final` is written until it is complete."""
    return final.with_name(final.name + ".partial")


def folder_state(folder: Path, manifest: str, leftover: Callable[[Path], bool]) -> str:
    """What `folder` holds: "empty" (or absent), "complete" (a build whose manifest does not say
    otherwise), "incomplete" (a manifest marked incomplete, or one that cannot be read, or no
    manifest where `leftover(folder)` recognises an interrupted build's files) or "other"."""
    if not folder.exists():
        return "empty"
    if not folder.is_dir():
        return "other"
    if not any(folder.iterdir()):
        return "empty"
    path = folder / manifest
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return INCOMPLETE
        if not isinstance(data, dict) or data.get("status", COMPLETE) != COMPLETE:
            return INCOMPLETE
        return COMPLETE
    return INCOMPLETE if leftover(folder) else "other"


@contextmanager
def staged(
    final: Path, manifest: str, builder: str, leftover: Callable[[Path], bool], note: Callable[[str], None] = lambda text: None
) -> Iterator[Path]:
    """Build into `partial_folder(final)` and, when the block ends normally, put it in `final`'s
    place; when the block raises, remove it. `final` may be absent, empty or an incomplete build
    (replaced; `note` says so); a complete build or other files are refused, naming the folder.
    The block must write its manifest (`manifest`, with `"status": "complete"`) last."""
    final = Path(os.path.abspath(final))
    if not final.name:
        raise DataError(f"--out {final} is the root folder; give a folder below it")
    parent = final.parent
    if parent.exists() and not parent.is_dir():
        raise DataError(f"--out {parent} is a file; give a folder")
    created = not parent.exists()
    parent.mkdir(parents=True, exist_ok=True)
    lock = lock_exclusively(  # two builds never replace each other's folders
        parent, f"another needlepoint build is writing into {parent}; wait for it or choose another --out"
    )
    done = False
    try:
        state = folder_state(final, manifest, leftover)
        if state == COMPLETE:
            raise DataError(
                f"{final} already holds a complete build ({final / manifest}); give --out another folder, or delete it to rebuild"
            )
        if state == "other":
            raise DataError(f"{final} holds files that are not a needlepoint {builder} build; give --out an empty or new folder")
        if state == INCOMPLETE:
            note(f"replacing the incomplete build left in {final}")
        work = partial_folder(final)
        if folder_state(work, manifest, leftover) == "other":
            raise DataError(f"{work} holds files that are not a needlepoint {builder} build; move it away and rebuild")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        write_json(work / manifest, _incomplete(builder))
        try:
            yield work
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        _put_in_place(work, final)
        done = True
    finally:
        os.close(lock)
        if created and not done:
            with contextlib.suppress(OSError):
                parent.rmdir()  # the --out folder this build made, left empty


def _incomplete(builder: str) -> dict[str, Any]:
    from needlepoint import __version__

    return {
        "builder": builder,
        "status": INCOMPLETE,
        "needlepoint_version": __version__,
        "note": "this build did not finish (it was stopped); nothing here may be used. "
        "Run the same `needlepoint build` again to replace it",
    }


def _put_in_place(work: Path, final: Path) -> None:
    """Rename the finished build to `final`, replacing an empty folder or an incomplete build (moved
    first onto a new empty folder of a name of its own, never onto a folder that was there)."""
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=final.name + ".replaced-", dir=final.parent))
        os.replace(final, old)  # a folder renamed over an empty one (POSIX)
    os.replace(work, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
