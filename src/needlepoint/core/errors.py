"""needlepoint's own error types: what a user can cause and fix (the CLI prints it as one sentence,
exit code 2), a request that failed for good, and a run stopped by faults in needlepoint itself."""

from __future__ import annotations

from typing import Any

# The command's exit codes (docs/evaluating.md, "Exit codes").
EXIT_OK = 0
EXIT_BAD_INPUT = 2  # one sentence says what is wrong, where, what to do
EXIT_FAILED_SAMPLES = 3  # the run ended with samples a rerun with --retry-failed can answer
EXIT_INTERNAL = 4  # a fault of needlepoint's own code, with its traceback
EXIT_INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C (128 + SIGINT), as shells use


class DataError(Exception):
    """Bad input a user can fix (missing file, wrong layout, bad value, bad flag)."""


class InternalFault(Exception):
    """Too many samples hit a fault in needlepoint's own code: the run stops (a bug to report)."""


class RequestError(Exception):
    """A request to a server (a chat model, a localizer, an embedding model, `/tokenize`) that failed
    for good: `kind` is a `status.REQUEST_FAILURES` value, the message is scrubbed of credentials;
    `attempts` and `endpoint` (the redacted URL that answered last) say where it ended. The one
    failure type of every client (models/http.py), and what a solver raises for a failed tool call."""

    def __init__(
        self, kind: str, message: str, attempts: int = 1, endpoint: str | None = None, usage: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.attempts = attempts
        self.endpoint = endpoint
        self.usage = usage  # what the failed attempts' answers said they used (a 200 that was no answer is billed)
