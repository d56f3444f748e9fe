"""The one error type a user can cause and fix; the CLI prints it as one sentence, exit code 2."""


class DataError(Exception):
    """Bad input a user can fix (missing file, wrong layout, bad value, bad flag)."""


class InternalFault(Exception):
    """Too many samples hit a fault in needlepoint's own code: the run stops (a bug to report)."""
