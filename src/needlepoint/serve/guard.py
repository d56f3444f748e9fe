"""The watchdog between needlepoint and a server it started:
`python -m needlepoint.serve.guard PARENT_PID GRACE_S COMMAND...`.

It starts COMMAND in a process group of its own and stops that whole group (SIGTERM, then
SIGKILL after GRACE_S seconds) when it is told to (SIGTERM, SIGINT, SIGHUP) or when needlepoint
is gone, even after a `kill -9` that gives needlepoint no chance to clean up: Linux's parent-death
signal (prctl PR_SET_PDEATHSIG) wakes it at once, and a poll of its parent's pid covers other
systems and the moment before the signal was armed. A server's own children (vLLM's engine
process) are in the group and go with it. The guard exits with the server's exit code when the
server ends by itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from needlepoint.core.forks import arm_parent_death_signal

POLL_S = 0.25
ORPHAN_GRACE_S = 3.0  # needlepoint is gone: nobody waits for a graceful shutdown


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM a process group, then SIGKILL it if anything is left after `grace_s` seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    """Run the guard (see the module docstring); returns its exit code."""
    parent, grace_s, command = int(argv[0]), float(argv[1]), argv[2:]
    arm_parent_death_signal()
    told = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: told.set())
    if os.getppid() != parent:  # needlepoint died before the signal was armed
        return 0
    child = subprocess.Popen(command, start_new_session=True)
    code: int | None = None
    while not told.wait(POLL_S):
        code = child.poll()
        if code is not None:
            break
        if os.getppid() != parent:
            break
    orphaned = os.getppid() != parent
    stop_group(child.pid, ORPHAN_GRACE_S if orphaned else grace_s)
    if code is None:
        try:
            code = child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = -9
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
