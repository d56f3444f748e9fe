"""One server process: started under the guard (serve/guard.py) with its log in a file, waited
for until `/v1/models` answers, stopped as a whole process group."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from needlepoint.core.errors import DataError
from needlepoint.core.redact import arg_secrets, environment_secrets, scrub, scrub_args

STOP_GRACE_S = 10.0  # SIGTERM, then this long, then SIGKILL
TAIL_LINES = 20  # the log lines a failure sentence quotes, at most ...
TAIL_CHARS = 2000  # ... and at most this many characters of them
# Terminal escape sequences (colours, cursor moves) and every other control character but the tab.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass
class ServerProcess:
    """A server's command, port, GPUs and log file; `start`, `ready`, `stop`."""

    role: str
    command: list[str]
    port: int
    log: Path
    gpus: list[str] | None = None
    title: str = "vLLM"
    grace_s: float = STOP_GRACE_S
    guard: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The OpenAI base URL, as --api-url takes it."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Start the server under its guard, output to the log file (appended, after a header line)."""
        env = dict(os.environ)
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        env.pop("VLLM_API_KEY", None)  # the server listens on 127.0.0.1 only; needlepoint sends no key of its own to it
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as fh:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            gpus = "" if self.gpus is None else f" CUDA_VISIBLE_DEVICES={','.join(self.gpus)}"
            fh.write(f"=== needlepoint {stamp}:{gpus} {' '.join(scrub_args(self.command))}\n".encode())
            fh.flush()
            guard = [sys.executable, "-m", "needlepoint.serve.guard", str(os.getpid()), str(self.grace_s)]
            self.guard = subprocess.Popen(
                [*guard, *self.command],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C in the terminal reaches needlepoint, which stops the servers in order
            )

    def exited(self) -> int | None:
        """The exit code when the server (its guard) has ended, else None."""
        return None if self.guard is None else self.guard.poll()

    def answers(self) -> bool:
        """Whether GET /v1/models answers with 200 now."""
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def died(self, code: int) -> DataError:
        """The one sentence for a server that ended while starting: its code and its log's last
        lines (bounded, without control characters, credentials scrubbed: `log_tail`)."""
        tail = " | ".join(log_tail(self.log, TAIL_LINES, TAIL_CHARS, self.command)) or "(empty)"
        return DataError(
            f"the {self.title} server for {self.role} on port {self.port} exited with code {code} while starting; "
            f"the last lines of {self.log}: {tail}"
        )

    def stop(self) -> None:
        """Stop the server and wait until it is gone (`ask_to_stop`, then `wait_stopped`)."""
        self.ask_to_stop()
        self.wait_stopped()

    def ask_to_stop(self) -> None:
        """SIGTERM to the server's guard, which stops the server's process tree (SIGKILL after the
        grace period) and exits as soon as it is gone; returns at once, so that a plan's servers
        stop together."""
        guard = self.guard
        if guard is None or guard.poll() is not None:
            return
        try:
            guard.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    def wait_stopped(self) -> None:
        """Wait for the guard asked to stop to end; it is killed if it outlasts the grace period."""
        guard = self.guard
        if guard is None:
            return
        try:
            guard.wait(timeout=self.grace_s + 10)
        except subprocess.TimeoutExpired:
            guard.kill()
            guard.wait()


def log_tail(path: Path, lines: int, chars: int = TAIL_CHARS, command: list[str] | None = None) -> list[str]:
    """The last non-empty lines of a log file as needlepoint may print them: at most `lines` lines
    and `chars` characters (the last ones kept), terminal escapes and control characters removed,
    credentials scrubbed (the credential flags of `command`, the environment's credential
    variables, and whatever `scrub` recognises); at most the file's last 64 KB are read."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    secrets = [*environment_secrets(), *arg_secrets(command or [])]
    kept: list[str] = []
    left = chars
    for raw in reversed(text.replace("\r", "\n").splitlines()):
        line = " ".join(scrub(_ESCAPES.sub("", raw), secrets).split())
        if not line:
            continue
        if len(line) > left:
            if left > 20:
                kept.append("..." + line[len(line) - left + 3 :])
            break
        kept.append(line)
        left -= len(line)
        if len(kept) == lines:
            break
    return kept[::-1]
