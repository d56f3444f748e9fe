"""The one credential rule (core/redact.py) on command lines and on what a program prints about its
settings, and the one inside rule (core/images.py) for data-file paths, links followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from needlepoint.core.errors import DataError
from needlepoint.core.images import lies_inside, safe_path
from needlepoint.core.redact import REDACTED, arg_secrets, environment_secrets, scrub, scrub_args


def test_command_line_credentials_are_scrubbed_and_settings_are_not() -> None:
    args = ["vllm", "serve", "org/m", "--api-key", "sk-1234", "--hf-token=hf_abcd", "--max-model-len", "4096"]
    args += ["--download-dir", "http://user:pw@host/x?sig=zz", "--max-num-batched-tokens", "8192", "--token", "tok-9"]
    out = scrub_args(args)
    assert out[:5] == ["vllm", "serve", "org/m", "--api-key", REDACTED] and out[5] == f"--hf-token={REDACTED}"
    assert out[6:8] == ["--max-model-len", "4096"] and out[10:12] == ["--max-num-batched-tokens", "8192"]
    assert out[8:10] == ["--download-dir", f"http://host/x?sig={REDACTED}"] and out[12:] == ["--token", REDACTED]
    assert "sk-1234" not in " ".join(out) and "pw" not in " ".join(out)
    assert arg_secrets(args) == ["sk-1234", "hf_abcd", "tok-9"]
    assert scrub_args(["--api-key", "--port", "8000"]) == ["--api-key", "--port", "8000"]  # a flag, not a value


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        ("args: --api-key sk-1234 --port 8000", "--port 8000"),
        ("env OPENAI_API_KEY=sk-1234 HOME=/root", "HOME=/root"),
        ("non-default args: {'api_key': 'sk-1234', 'max_tokens': 5}", "'max_tokens': 5"),
        ('{"hf_token": "sk-1234", "rag_max_tokens": 7}', '"rag_max_tokens": 7'),
        ("--hf-token=sk-1234 --rag-max-tokens 7", "--rag-max-tokens 7"),
    ],
)
def test_settings_a_program_prints_are_scrubbed(said: str, kept: str) -> None:
    out = scrub(said)
    assert "sk-1234" not in out and REDACTED in out and kept in out, out
    assert scrub(out) == out  # scrubbing twice changes nothing


def test_the_environments_credentials_are_known() -> None:
    env = {"OPENAI_API_KEY": "sk-1", "HF_TOKEN": "hf-2", "HOME": "/root", "MAX_TOKENS": "9"}
    assert sorted(environment_secrets(env)) == ["hf-2", "sk-1"]


def test_a_link_inside_the_folder_to_a_file_outside_is_outside(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "a.jpg").write_bytes(b"x")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (root / "link.jpg").symlink_to(secret)
    (root / "sub").symlink_to(tmp_path, target_is_directory=True)
    assert lies_inside(root, root / "a.jpg") and not lies_inside(root, root / "link.jpg")
    assert not lies_inside(root, root / "sub" / "secret.txt") and not lies_inside(root, root / ".." / "secret.txt")
    through = tmp_path / "through"
    through.symlink_to(root, target_is_directory=True)  # the folder given through a link still holds its files
    assert lies_inside(through, root / "a.jpg") and lies_inside(root, through / "a.jpg")
    assert safe_path(root, str(root / "a.jpg"), absolute=True) == root / "a.jpg"
    with pytest.raises(DataError, match="lies outside the images folder"):
        safe_path(root, str(root / "link.jpg"), absolute=True)


def test_a_long_line_without_a_url_is_scrubbed_in_linear_time() -> None:
    """The guard scrubs every line a server prints (a progress bar can be 64 KB without a newline):
    the URL pattern tried once per letter took about ten seconds for such a line."""
    import time

    began = time.monotonic()
    for line in ("a" * 65536, "-a" * 32768, "a_" * 32768):
        assert scrub(line) == line
    assert time.monotonic() - began < 3.0  # about 0.05 s; 15 s before
