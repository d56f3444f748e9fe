"""The watchdog between needlepoint and a server it started:
`python -m needlepoint.serve.guard PARENT_PID GRACE_S COMMAND...`.

It starts COMMAND in a process group of its own and stops the server's whole process tree
(SIGTERM, then SIGKILL after GRACE_S seconds, returning as soon as nothing is left) when it is
told to (SIGTERM, SIGINT, SIGHUP) or when needlepoint is gone, even after a `kill -9` that gives
needlepoint no chance to clean up: Linux's parent-death signal (prctl PR_SET_PDEATHSIG) tells it
(seen within POLL_S: the handler only notes the signal, taking no lock), and a poll of its
parent's pid covers other systems and the moment before the signal was armed. The tree is every process the server made, found through /proc: the guard is a child
subreaper (PR_SET_CHILD_SUBREAPER), so a process that leaves the server's process group and
loses its parent (a double fork, `setsid`) is re-parented to the guard and still found; the
process group covers systems without /proc. The guard exits with the server's exit code when the
server ends by itself.

The server's output passes through the guard on its way to the log (the guard's stdout), line by
line, through the one credential rule (core/redact.py): the values of the command's credential
flags, the environment's credential variables and whatever `scrub` recognises never reach the file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

from needlepoint.core.forks import arm_parent_death_signal
from needlepoint.core.redact import arg_secrets, environment_secrets, scrub

POLL_S = 0.25
ORPHAN_GRACE_S = 3.0  # needlepoint is gone: nobody waits for a graceful shutdown
PR_SET_CHILD_SUBREAPER = 36
MAX_LINE = 65536  # bytes of a line without newline (a progress bar) copied at once


def become_subreaper() -> bool:
    """Ask Linux to re-parent to this process the orphans among its descendants; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _processes() -> dict[int, tuple[int, str]]:
    """Every process of /proc: pid -> (parent pid, state letter); empty without /proc."""
    out: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(entry)] = (int(fields[1]), fields[0].decode("ascii", "replace"))
    return out


def descendants(root: int) -> tuple[set[int], set[int]]:
    """The processes below `root` in the process tree: (live ones, zombies)."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    live: set[int] = set()
    dead: set[int] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        (dead if table[pid][1] in ("Z", "X") else live).add(pid)
        todo += children.get(pid, [])
    return live, dead


def _reap(child: subprocess.Popen[bytes]) -> None:
    """Collect the exit of the server and of every orphan re-parented to the guard (no zombies left)."""
    child.poll()
    _, dead = descendants(os.getpid())
    for pid in dead - {child.pid}:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _signal_all(pgid: int, pids: set[int], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _group_left(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_tree(child: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the server's process group and every process below the guard, then SIGKILL
    whatever is left after `grace_s` seconds; returns as soon as nothing is left."""
    me = os.getpid()
    tracked = sys.platform.startswith("linux") and os.path.isdir("/proc")
    live, _ = descendants(me)
    _signal_all(child.pid, live, signal.SIGTERM)
    asked = set(live)
    deadline = time.monotonic() + grace_s
    while True:
        _reap(child)
        live, _ = descendants(me)
        # with /proc the tree says what is left (a zombie of the group is no process); else the group
        left = bool(live) if tracked else child.returncode is None or _group_left(child.pid)
        if not left:
            return
        if time.monotonic() >= deadline:
            break
        for pid in live - asked:  # started after the first round: asked once too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        asked |= live
        time.sleep(0.05)
    for _ in range(20):  # SIGKILL until the tree is empty (a process may fork while it is killed)
        live, _ = descendants(me)
        _signal_all(child.pid, live, signal.SIGKILL)
        _reap(child)
        if not descendants(me)[0]:
            return
        time.sleep(0.05)


def _copy(source: IO[bytes], sink: int, clean: Callable[[str], str]) -> None:
    """Copy the server's output to the log, line by line, each line through `clean`."""
    pending = b""
    while True:
        try:
            chunk = os.read(source.fileno(), 65536)
        except OSError:
            chunk = b""
        if chunk:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > MAX_LINE:
                lines.append(pending)
                pending = b""
            out = [clean(line.decode("utf-8", "surrogateescape")) for line in lines]
            if out:
                _write(sink, ("\n".join(out) + "\n").encode("utf-8", "surrogateescape"))
            continue
        if pending:
            _write(sink, clean(pending.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))
        return


def _write(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data) :]


def main(argv: list[str]) -> int:
    """Run the guard (see the module docstring); returns its exit code."""
    parent, grace_s, command = int(argv[0]), float(argv[1]), argv[2:]
    arm_parent_death_signal()
    become_subreaper()
    told: list[int] = []  # the signals received: a plain list, since a handler runs between two
    # bytecodes of the main thread and must take no lock (`Event.set` from a handler that interrupted
    # `Event.wait` blocked on the lock the wait held: the guard hung, its server left running)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _: told.append(number))
    if os.getppid() != parent:  # needlepoint died before the signal was armed
        return 0
    secrets = [*arg_secrets(command), *environment_secrets()]
    child = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert child.stdout is not None
    copier = threading.Thread(target=_copy, args=(child.stdout, sys.stdout.fileno(), lambda t: scrub(t, secrets)), daemon=True)
    copier.start()
    code: int | None = None
    while not told:  # a signal is seen within POLL_S
        time.sleep(POLL_S)
        _reap(child)
        code = child.returncode
        if code is not None:
            break
        if os.getppid() != parent:
            break
    orphaned = os.getppid() != parent
    stop_tree(child, ORPHAN_GRACE_S if orphaned else grace_s)
    if code is None:
        try:
            code = child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = -9
    copier.join(5)  # the last lines reach the log
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
