"""One writer per kind of file: every module of the package writes files through
`needlepoint.core.files` (`AtomicFile`, `write_atomic`, `write_json`, `write_lines`,
`write_parquet`), which writes through a temporary file and a rename and cannot fail on text a
reply carries. An AST walk over the package lists the modules that open files for writing, rename
or replace files, or write through another library, and fails on any module outside the allowlist
below."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from needlepoint.core.files import AtomicFile, json_line, write_atomic, write_json, write_lines
from needlepoint.core.store import read_records

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "needlepoint"

ALLOWED = {
    "core/files.py": "the writer itself",
    "core/store.py": "cuts a torn last line off records.jsonl in place (a truncation; appends go through core/files)",
    "run/runfolder.py": "moves a whole run folder aside for --fresh (a rename of a folder; writes no content)",
    "cli.py": "points a closed stdout at /dev/null (os.open of the null device; writes no file)",
    "contract/build.py": "the staged build folder: a build is written into FOLDER.partial and made whole by one rename",
    # the MM-NIAH builder writes its files inside the staged folder (build.staged), where no reader
    # sees them before the rename that completes the build
    "benchmarks/mm_niah/build/builder.py": "writes inside the staged build folder",
    "benchmarks/mm_niah/build/haystack.py": "a spool file inside the staged build folder",
    "serve/process.py": "the log a started server writes its output to (appended; one header line of ours)",
}

_WRITE_MODES = set("wax+")
_WRITING_METHODS = {"write_text", "write_bytes", "rename", "symlink_to", "hardlink_to"}
_SAVING_METHODS = {"save", "savefig", "write_table", "to_csv", "to_parquet"}  # a write unless into memory
_IN_MEMORY = {"BytesIO", "StringIO", "BufferOutputStream"}
_WRITING_FUNCTIONS = {
    ("os", "replace"),
    ("os", "rename"),
    ("os", "open"),
    ("os", "link"),
    ("os", "symlink"),
    ("shutil", "copy"),
    ("shutil", "copy2"),
    ("shutil", "copyfile"),
    ("shutil", "move"),
    ("shutil", "copytree"),
    ("np", "save"),
    ("numpy", "save"),
}


def _mode(call: ast.Call, position: int) -> ast.expr | None:
    """The `mode` argument of an open call (positional at `position`, or the keyword)."""
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _writes_by_mode(mode: ast.expr | None) -> bool:
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return bool(_WRITE_MODES & set(mode.value))
    return True  # a computed mode: assume it writes


def _writes_by_method_mode(call: ast.Call) -> bool:
    """`x.open(mode)`: Path.open's first argument is its mode, but Image.open's is a file, so a
    positional mode counts only when it is a literal."""
    mode = _mode(call, 0)
    if mode is not None and not any(kw.arg == "mode" for kw in call.keywords) and not isinstance(mode, ast.Constant):
        return False
    return _writes_by_mode(mode)


_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _opens_for_writing(call: ast.Call) -> bool:
    """Whether `os.open(path, flags)` names a flag that writes (computed flags count as writing)."""
    flags = call.args[1] if len(call.args) > 1 else None
    if flags is None:
        return True
    names = {n.attr for n in ast.walk(flags) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(flags) if isinstance(n, ast.Name)
    }
    return bool(names & _WRITE_FLAGS) or not names


def writes(source: str) -> list[str]:
    """What in `source` writes a file, as `line: what` (empty when nothing does)."""
    tree = ast.parse(source)
    buffers: set[str] = set()  # names bound to in-memory files: what is saved into them is no file
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = node.value.func
            name = called.attr if isinstance(called, ast.Attribute) else called.id if isinstance(called, ast.Name) else ""
            if name in _IN_MEMORY:
                buffers.update(t.id for t in node.targets if isinstance(t, ast.Name))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n.split(".")[0] == "tempfile" for n in names):
                found.append(f"{node.lineno}: imports tempfile")
            continue
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        what = None
        if isinstance(func, ast.Name) and func.id == "open" and _writes_by_mode(_mode(node, 1)):
            what = "open(..., write mode)"
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if (owner, func.attr) == ("os", "open") and not _opens_for_writing(node):
                what = None  # os.open for reading (a regular-file check, a lock on a folder)
            elif (owner, func.attr) in _WRITING_FUNCTIONS:
                what = f"{owner}.{func.attr}"
            elif func.attr == "open" and owner != "os" and _writes_by_method_mode(node):
                what = ".open(write mode)"
            elif func.attr in _WRITING_METHODS:
                what = f".{func.attr}"
            elif func.attr in _SAVING_METHODS and not (owner or "x").lstrip("_")[:1].isupper():  # not a class's own save()
                at = 1 if func.attr == "write_table" else 0  # write_table(table, where); x.save(where)
                target = node.args[at] if len(node.args) > at else None
                if not (isinstance(target, ast.Name) and target.id in buffers):
                    what = f".{func.attr}(a file)"
            elif func.attr == "replace" and len(node.args) == 1 and not node.keywords:
                what = ".replace(target)"  # Path.replace; str.replace takes two arguments
        if what:
            found.append(f"{node.lineno}: {what}")
    return found


def test_the_detector_sees_every_kind_of_write() -> None:
    source = """
import tempfile
open(p, "w"); open(p, mode="ab"); open(p, m); p.open("x"); p.open(mode="r+")
p.write_text("t"); p.write_bytes(b""); os.replace(a, b); os.rename(a, b); p.rename(q); p.replace(q)
shutil.copyfile(a, b); fig.savefig(p); pq.write_table(t, p); os.open(p, os.O_WRONLY); im.save(path)
"""
    assert len(writes(source)) == 17
    harmless = """
open(p); open(p, "rb"); p.open(); p.open("r", encoding="utf-8"); s.replace("a", "b"); json.loads(s)
Image.open(p); os.path.join(a, b); os.open(p, os.O_RDONLY | os.O_NONBLOCK)
buf = io.BytesIO(); im.save(buf, format="PNG"); fig.savefig(buf); out = pa.BufferOutputStream(); pq.write_table(t, out)
"""
    assert writes(harmless) == []


def test_only_the_writer_module_writes_files() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        found = writes(path.read_text(encoding="utf-8"))
        if found and rel not in ALLOWED:
            offenders[rel] = found
    assert not offenders, (
        "these modules write files themselves; write through needlepoint.core.files (AtomicFile, write_atomic, "
        f"write_json, write_lines, write_parquet) instead: {offenders}"
    )


# --- the writer ----------------------------------------------------------------------------------------


def test_text_a_reply_can_carry_is_always_writable(tmp_path: Path) -> None:
    """A lone surrogate (a JSON `"\\ud800"` in a reply, once parsed) in text, in a key, in a JSON
    line: written as U+FFFD in text, escaped in JSON lines (read back as written)."""
    page = write_atomic(tmp_path / "page.html", "<p>\ud800 phrase</p>")
    assert page.read_text(encoding="utf-8") == "<p>\ufffd phrase</p>"
    record = {"id": "1", "phrase": "a \udfff b", "\ud801": [1, 2**70, float("nan")]}
    write_lines(tmp_path / "records.jsonl", [record])
    assert read_records(tmp_path / "records.jsonl") == {"1": {"id": "1", "phrase": "a \udfff b", "\ud801": [1, 2**70, None]}}
    write_json(tmp_path / "x.json", {"phrase": "\ud800"})
    assert (tmp_path / "x.json").read_text(encoding="utf-8") == '{\n  "phrase": "\ufffd"\n}\n'
    with AtomicFile(tmp_path / "mixed") as fh:
        fh.write(b"bytes ")
        fh.write("text \ud800 ")
        fh.write_line({"k": "\ud800"})
    assert (tmp_path / "mixed").read_bytes() == 'bytes text \ufffd {"k":"\\ud800"}\n'.encode()
    assert json_line({"k": "\ud800"}) == b'{"k":"\\ud800"}'


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    write_lines(path, [{"a": 1}])
    with pytest.raises(RuntimeError), AtomicFile(path) as fh:
        fh.write_line({"a": 2})
        raise RuntimeError("killed mid-export")
    assert path.read_text(encoding="utf-8") == '{"a":1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["export.jsonl"]


def test_large_streams_are_written_whole(tmp_path: Path) -> None:
    rows = [{"i": i, "text": "x" * 100} for i in range(30_000)]  # several buffer flushes
    write_lines(tmp_path / "big.jsonl", rows)
    lines = (tmp_path / "big.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(rows) and lines[-1] == '{"i":29999,"text":"' + "x" * 100 + '"}'
    write_atomic(tmp_path / "nested" / "folder" / "f.bin", b"\x00\xff")  # parents are made
    assert (tmp_path / "nested" / "folder" / "f.bin").read_bytes() == b"\x00\xff"
