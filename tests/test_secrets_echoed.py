"""A hostile server that echoes the request's credentials (the API key, an endpoint URL's user
info as Basic authorization or percent-decoded) back cut short, in an answer of 200, or in a
header too long for the client: no piece of the key of 8 or more characters reaches the run
folder or the terminal (core/redact.py: `hide`, `scrub`, `url_secrets`)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import run_quiet
from helpers.cli import ref_eval_args

from needlepoint.core.redact import FRAGMENT, scrub, url_secrets
from needlepoint.core.store import read_records
from needlepoint.models.simulated import SimulatedServer

KEY = "sk-ECHO-SECRET-1234567890abc"
PASSWORD = "pw/ECHO@SECRET-0987654321"  # percent-encoded in the URL


class EchoingServer(SimulatedServer):
    """Answers every chat request with the request's credentials in it, as `mode` says."""

    mode: str = ""

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        auth = request.headers.get("Authorization", "")
        secret = auth.split()[-1] if auth else ""
        if auth.startswith("Basic "):
            secret = base64.b64decode(secret).decode().split(":", 1)[1]  # the password as the server reads it
        if self.mode == "cut400":  # the key past the 500 bytes an error message keeps
            return web.Response(status=400, text="x" * 475 + secret)
        if self.mode == "cut500":  # past the 200 bytes a retried error keeps
            return web.Response(status=500, text="x" * 190 + secret)
        if self.mode == "basic400":
            return web.Response(status=400, text=f"refused {auth} ({secret})")
        if self.mode == "header":  # past the client's header limit: its message quotes 100 bytes
            return web.Response(status=200, text="{}", headers={"X-Echo": secret * 400})
        answer = f"your header was {auth}; the box is [1, 2, 3, 4]"
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]})


@pytest.fixture
def echoing() -> Iterator[EchoingServer]:
    with EchoingServer(models=("m",)) as server:  # started, and stopped after the test
        yield server


def pieces(secret: str) -> list[bytes]:
    """Every run of FRAGMENT characters of `secret`."""
    return [secret[i : i + FRAGMENT].encode() for i in range(len(secret) - FRAGMENT + 1)]


def leaks(folder: Path, text: str, secret: str) -> list[str]:
    found = [p.name for p in folder.rglob("*") if p.is_file() and any(s in p.read_bytes() for s in pieces(secret))]
    return found + (["stderr"] if any(s.decode() in text for s in pieces(secret)) else [])


@pytest.mark.parametrize("mode", ["cut400", "cut500", "header", "echo200"])
def test_a_key_echoed_cut_short_or_in_an_answer_is_stored_nowhere(
    mode: str, echoing: EchoingServer, ref_release: Any, tmp_path: Path
) -> None:
    echoing.mode = mode
    out = tmp_path / "run"
    args = ref_eval_args(ref_release[0], echoing.url, out, "--limit", "2", "--api-key", KEY, model="m", max_retries=1)
    rc, err = run_quiet(args)
    assert rc in (0, 3), err  # answered, or failed samples
    assert not leaks(out, err, KEY)
    records = read_records(out / "records.jsonl")
    assert len(records) == 2
    if mode == "echo200":  # the answer is kept whole but for the key
        text = records[next(iter(records))]["turns"][0]["reply"]
        assert text == "your header was Bearer [redacted]; the box is [1, 2, 3, 4]", text
    else:
        assert all(r["status"] != "done" for r in records.values())


def test_url_credentials_echoed_as_basic_authorization_or_decoded_are_stored_nowhere(
    echoing: EchoingServer, ref_release: Any, tmp_path: Path
) -> None:
    echoing.mode = "basic400"
    url = echoing.url.replace("http://", "http://user:pw%2FECHO%40SECRET-0987654321@")
    out = tmp_path / "run"
    rc, err = run_quiet(ref_eval_args(ref_release[0], url, out, "--limit", "1", model="m"))
    assert rc == 3, err
    basic = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    for secret in (PASSWORD, basic):
        assert not leaks(out, err, secret), secret
    (record,) = read_records(out / "records.jsonl").values()
    assert record["error"].startswith("http_400: refused Basic [redacted] ([redacted]")


def test_scrub_takes_out_the_pieces_a_cut_left_and_nothing_else() -> None:
    assert scrub("x" * 10 + KEY[:20], [KEY]) == "x" * 10 + "[redacted]"
    assert scrub(f"b'{KEY[-12:]} and then", [KEY]) == "b'[redacted] and then"
    assert scrub(f"{KEY}{KEY}{KEY[:9]}...'", [KEY]) == "[redacted][redacted][redacted]...'"
    assert scrub("sk-ECHO was seven letters long", [KEY]) == "sk-ECHO was seven letters long"  # under FRAGMENT
    secrets = url_secrets("http://user:pw%2FECHO%40SECRET-0987654321@host:1/v1")
    assert PASSWORD in secrets and base64.b64encode(f"user:{PASSWORD}".encode()).decode() in secrets


class EchoingFiles(SimulatedServer):
    """A Batch API whose file upload answers 200 with text (not JSON) that quotes the request's
    Authorization header, or (`refuse`) a 400 quoting it percent-decoded."""

    refuse = False

    def _add_routes(self, app: Any) -> None:
        from aiohttp import web

        async def files(request: Any) -> Any:
            auth = request.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                auth += " " + base64.b64decode(auth.split()[-1]).decode()
            return web.Response(status=400 if self.refuse else 200, text=f"upload refused for {auth}")

        app.router.add_post("/v1/files", files)


@pytest.mark.parametrize("refuse", [False, True])
def test_the_batch_clients_messages_hold_no_credential(refuse: bool, tmp_path: Path) -> None:
    import asyncio
    import dataclasses

    from needlepoint.core.errors import RequestError
    from needlepoint.models.batch import BatchClient

    with EchoingFiles(models=("m",)) as server:
        server.refuse = refuse
        url = server.url.replace("http://", "http://user:pw%2FECHO%40SECRET-0987654321@") if refuse else server.url
        client = BatchClient(url, tmp_path / "batches.jsonl", api_key=None if refuse else KEY)
        client.retry = dataclasses.replace(client.retry, max_retries=0)
        with pytest.raises(RequestError) as failed:
            asyncio.run(client.submit([("a", b'{"model":"m","messages":[{"role":"user","content":"hi"}]}')]))
    message = str(failed.value)
    assert "upload refused for" in message
    for secret in (PASSWORD, base64.b64encode(f"user:{PASSWORD}".encode()).decode()) if refuse else (KEY,):
        assert not any(s.decode() in message for s in pieces(secret)), message
