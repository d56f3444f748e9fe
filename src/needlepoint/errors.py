"""The one error type a user can cause and fix; the CLI prints it as one sentence, exit code 2."""


class DataError(Exception):
    """Bad input a user can fix (missing file, wrong layout, bad value, bad flag)."""
