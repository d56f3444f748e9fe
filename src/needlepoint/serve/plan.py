"""The servers of one run: every role's replicas, started together, waited for, stopped together."""

from __future__ import annotations

import atexit
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from needlepoint.core.errors import DataError
from needlepoint.core.redact import scrub_args
from needlepoint.serve.command import (
    ENGINES,
    ServeSpec,
    free_port,
    given_flag,
    gpu_groups,
    launcher,
    server_command,
    visible_gpus,
)
from needlepoint.serve.process import ServerProcess

START_TIMEOUT_S = 3600.0  # a large model read from a network file system can take most of an hour
NOTE_EVERY_S = 30.0  # the progress line's interval when stderr is no terminal


class ServePlan:
    """The servers of `specs` (ports chosen now, so the URLs are known before anything starts):
    `start(folder, max_images)` starts them and waits for all, `stop()` (or leaving a `with`
    block) stops them; a server that dies while starting is a DataError naming its log."""

    def __init__(
        self,
        specs: Sequence[ServeSpec],
        start_timeout_s: float = START_TIMEOUT_S,
        show_progress: bool = True,
        gpus: list[str] | None = None,
    ) -> None:
        for s in specs:
            if s.engine not in ENGINES:
                raise DataError(f"--serve {s.engine} is no server needlepoint starts; use one of {', '.join(ENGINES)}")
            if s.tp < 1 or s.replicas < 1:
                raise DataError("--serve-tp and --serve-replicas must be at least 1")
        self.specs = list(specs)
        self.start_timeout_s = start_timeout_s
        self.show_progress = show_progress
        self.launchers = [launcher(ENGINES[s.engine], s.bin) for s in self.specs]
        groups = gpu_groups(self.specs, visible_gpus() if gpus is None else gpus)
        self.servers: list[tuple[ServeSpec, list[str], ServerProcess]] = []
        for spec, start in zip(self.specs, self.launchers):
            for i in range(spec.replicas):
                process = ServerProcess(spec.role, [], free_port(), Path(), groups.pop(0), ENGINES[spec.engine].title)
                process.log = Path(f"{spec.role}-{i}.log")
                self.servers.append((spec, start, process))
        self.started = False

    def urls(self, role: str) -> list[str]:
        """The base URLs of a role's servers."""
        return [p.url for s, _, p in self.servers if s.role == role]

    def name(self, role: str) -> str | None:
        """The model name a role's servers answer to."""
        return next((s.name for s in self.specs if s.role == role), None)

    def start(
        self, folder: Path, max_images: int | None = None, compact_json: bool = False, local_media: Path | None = None
    ) -> None:
        """Start every server (logs in `folder`) and wait until each answers /v1/models; with
        `compact_json` (--structured-output) the main model's without free JSON whitespace; with
        `local_media` (--local-images) each chat server reads image files under that folder."""
        if self.started:
            return
        self.started = True
        atexit.register(self.stop)
        for spec, start, process in self.servers:
            compact = compact_json and spec.role == "model"
            process.command = server_command(spec, start, process.port, max_images, compact, local_media)
            process.log = folder / process.log.name
            process.start()
        try:
            self._wait()
        except BaseException:
            self.stop()
            raise

    def _wait(self) -> None:
        began = time.monotonic()
        title = ENGINES[self.specs[0].engine].title
        tty = sys.stderr.isatty()
        last_note = began - NOTE_EVERY_S  # the first line at once, then one every NOTE_EVERY_S
        pending = [p for _, _, p in self.servers]
        while pending:
            for p in list(pending):
                code = p.exited()
                if code is not None:
                    raise p.died(code)
                if p.answers():
                    pending.remove(p)
            if not pending:
                break
            waited = time.monotonic() - began
            if waited > self.start_timeout_s:
                p = pending[0]
                raise DataError(
                    f"the {p.title} server for {p.role} on port {p.port} did not answer /v1/models within "
                    f"{self.start_timeout_s:.0f} s; see {p.log}"
                )
            if self.show_progress:
                ready = len(self.servers) - len(pending)
                line = f"{title} loading weights: {waited:.0f} s" + (
                    f" ({ready} of {len(self.servers)} servers ready)" if len(self.servers) > 1 else ""
                )
                if tty:
                    print(f"\r{line}", end="", file=sys.stderr, flush=True)
                elif time.monotonic() - last_note >= NOTE_EVERY_S:
                    print(line, file=sys.stderr, flush=True)
                    last_note = time.monotonic()
            time.sleep(1.0)
        if self.show_progress:
            end = "\r" if tty else ""
            print(f"{end}{title} ready after {time.monotonic() - began:.0f} s: {len(self.servers)} server(s)", file=sys.stderr)

    def stop(self) -> None:
        """Stop every server (each as its whole process tree), all at once, returning as soon as
        they are gone; safe to call more than once."""
        for _, _, p in self.servers:
            p.ask_to_stop()
        for _, _, p in self.servers:
            p.wait_stopped()

    def public(self) -> dict[str, Any]:
        """What run.json records: each server's role, command line (credentials scrubbed: the
        run's report page shows it too), GPUs and log."""
        return {
            "engine": sorted({s.engine for s in self.specs}),
            "servers": [
                {
                    "role": p.role,
                    "url": p.url,
                    "command": scrub_args(p.command),
                    "generation_config": given_flag(p.command, "--generation-config"),
                    "gpus": p.gpus,
                    "log": p.log.name,
                }
                for _, _, p in self.servers
            ],
        }

    def __enter__(self) -> ServePlan:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
