"""The human page's safety and durability: every request needs the token, images come only from
the data folder, malformed answers are refused with one sentence, data texts are escaped, and a
kill -9 of the `needlepoint human` command loses no submitted answer (a rerun resumes)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers.browser import ARTIFACTS, chromium
from helpers.cli import start_cli
from helpers.human import Person, releases, request, serving

from needlepoint.core.conversation import ImageRef
from needlepoint.core.store import read_records


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return releases(tmp_path_factory.mktemp("human_safety"))


def test_token_paths_and_answers_are_checked(data: dict[str, Path], tmp_path: Path) -> None:
    with serving("mc_bench", data["mc_bench"], tmp_path / "run", size=2, seed=3) as server:
        base = server.url
        root = base.rsplit("/", 2)[0]
        assert request(base + "api/state")[0] == 200
        wrong = ("y" if server.token[0] == "x" else "x") + server.token[1:]  # one character off, never the token itself
        for url in (root + "/api/state", root + "/", root + "/" + wrong + "/api/state", root + "/favicon.ico"):
            assert request(url)[0] == 403, url  # without the token, or with a wrong one
        code, body = request(root + "/api/answer", {"id": "1", "answer": []})
        assert code == 403
        sid = server.run.plan.ids[0]
        assert request(f"{base}api/image?id={quote(sid)}&i=0")[0] == 200
        for url in (
            f"{base}static/..%2F..%2Fhuman%2Fruns.py",
            f"{base}static/%2Fetc%2Fpasswd",
            f"{base}api/image?id=..%2F..%2Fetc%2Fpasswd&i=0",
            f"{base}api/image?id={quote(sid)}&i=7",
        ):
            assert request(url)[0] in (403, 404), url
        # an image file outside the data folder is never served, whatever the sample names
        sample = server._samples[sid]
        sample.images = (ImageRef(key="x", path=Path("/etc/hostname")), sample.images[1])
        code, body = request(f"{base}api/image?id={quote(sid)}&i=0")
        assert code == 403 and "outside the data folder" in body["error"]
        w, h = sample.geometry.sizes[0]
        bad = [
            (None, b"{not json", "not JSON"),
            (
                None,
                b'{"id": "%s", "answer": [{"image": 0, "group": 1, "bbox": [0, 0, NaN, 5]}], "seconds": 1}' % sid.encode(),
                "not JSON",
            ),
            ({"id": sid, "answer": [{"image": 0, "group": 1, "bbox": [0, 0, w + 50, 5]}], "seconds": 1}, None, "inside"),
            ({"id": sid, "answer": [{"image": 0, "group": 1, "bbox": [0, 0, 5, 5]}] * 301, "seconds": 1}, None, "more than 300"),
            ({"id": "no-such-sample", "answer": [], "seconds": 1}, None, "not in this plan"),
            ({"id": sid, "answer": "boxes", "seconds": 1}, None, "list of boxes"),
            ({"id": sid, "answer": [], "seconds": -1}, None, "seconds"),
            ([1, 2], None, "not a JSON object"),
        ]
        for body_json, raw, words in bad:
            code, reply = request(base + "api/answer", body_json, raw)
            assert code == 400 and words in reply["error"], (reply, words)
            assert reply["error"].count(". ") == 0  # one sentence
        assert read_records(tmp_path / "run" / "records.jsonl") == {}
        code, reply = request(base + "api/answer", {"id": sid, "answer": [], "seconds": 1.5})
        assert code == 200 and reply["ok"]
        headers = _headers(base)
        assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["Referrer-Policy"] == "no-referrer"


def _headers(url: str) -> dict[str, str]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return dict(resp.headers)


def test_data_texts_are_escaped(data: dict[str, Path], tmp_path: Path) -> None:
    with serving("mc_bench", data["mc_bench"], tmp_path / "run", size=1, seed=3) as server:
        sample = server._samples[server.run.plan.ids[0]]
        sample.text = '<img id="evil" src="x" onerror="document.body.dataset.owned=1"><b id="bold">the cat</b>'
        with chromium() as browser:
            person = Person(browser, server.url)
            person.start()
            assert person.page.locator("#evil, #bold").count() == 0
            assert person.page.locator("#prompt").inner_text() == sample.text
            assert person.page.locator("body").get_attribute("data-owned") is None
            person.close()


def _start(args: list[str], cwd: Path) -> tuple[subprocess.Popen[str], str]:
    proc = start_cli(["human", *args], cwd)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "open http://127.0.0.1:PORT/TOKEN/"
    if not line.startswith("open "):
        proc.kill()
        raise AssertionError(f"no address printed: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split()[1]


def test_kill_9_loses_no_submitted_answer_and_a_rerun_resumes(data: dict[str, Path], tmp_path: Path) -> None:
    args = ["ref_adv_s", "--data", str(data["ref_adv_s"]), "--annotator", "kim", "--plan", "4", "--seed", "2"]
    proc, url = _start(args, tmp_path)
    try:
        _, state = request(url + "api/state")
        ids = [o["id"] for o in state["order"]]
        assert len(ids) == 4 and not any(o["done"] for o in state["order"])
        for sid in ids[:2]:
            code, reply = request(url + "api/answer", {"id": sid, "answer": [10, 20, 110, 120], "seconds": 3})
            assert code == 200, reply
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    (folder,) = [p.parent for p in (tmp_path / "runs" / "ref_adv_s").glob("human-kim/*/run.json")]
    records = read_records(folder / "records.jsonl")
    assert set(records) == set(ids[:2]) and records[ids[0]]["answer"] == [[10.0, 20.0, 110.0, 120.0]]
    proc, url = _start(args, tmp_path)  # the same command: the same folder, the two answers kept
    try:
        _, state = request(url + "api/state")
        assert [o["id"] for o in state["order"]] == ids
        assert [o["done"] for o in state["order"]] == [True, True, False, False]
        assert json.loads((folder / "metrics.json").read_text())["run"]["answered"] == 2  # rescored on resume
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()  # no server left behind when it did not stop
    assert proc.returncode == 0 and "rerun the same command" in err
    assert set(read_records(folder / "records.jsonl")) == set(ids[:2])


def test_command_line_refusals(data: dict[str, Path], tmp_path: Path) -> None:
    from helpers.cli import run_quiet

    rc, err = run_quiet(["human", "ref_adv_s", "--data", str(data["ref_adv_s"]), "--annotator", "../x"])
    assert rc == 2 and "--annotator" in err
    rc, err = run_quiet(["human", "ref_adv_s", "--data", str(data["ref_adv_s"]), "--annotator", "a", "--plan", "999"])
    assert rc == 2 and "ask for fewer" in err
    rc, err = run_quiet(["human", "ref_adv_s", "--data", str(data["ref_adv_s"]), "--annotator", "a", "--confidence"])
    assert rc == 2 and "mc_bench only" in err
    rc, err = run_quiet(["human", "mm_niah", "--data", str(tmp_path / "absent"), "--annotator", "a"])
    assert rc == 2 and "does not exist" in err


def test_a_row_rewritten_during_a_session_is_refused(tmp_path: Path) -> None:
    """An MM-NIAH row rewritten in place after the plan was loaded (the same length, so only the
    digest tells) is neither shown nor answered: one sentence each, the answer not stored."""
    niah = tmp_path / "niah"
    shutil.copytree(releases(tmp_path / "made")["mm_niah"], niah)
    with serving("mm_niah", niah, tmp_path / "run", size=1, seed=0) as server:
        sid = server.run.plan.ids[0]
        sample = server._samples[sid]
        code, view = request(f"{server.url}api/sample?id={quote(sid)}")
        assert code == 200 and view["question"] == sample.question
        raw = sample.source.read_bytes()
        line = raw[sample.offset : sample.offset + sample.length]
        at = line.index(b'"context": "') + len(b'"context": "')
        changed = line[:at] + (b"X" if line[at : at + 1] != b"X" else b"Y") + line[at + 1 :]
        sample.source.write_bytes(raw[: sample.offset] + changed + raw[sample.offset + len(line) :])
        code, reply = request(f"{server.url}api/sample?id={quote(sid)}")
        assert (
            code == 409 and f"changed during the run (row {sample.row_id})" in reply["error"] and reply["error"].count(". ") == 0
        )
        code, reply = request(f"{server.url}api/answer", {"id": sid, "answer": str(sample.answer), "seconds": 1})
        assert code == 400 and "changed during the run" in reply["error"]
        assert read_records(tmp_path / "run" / "records.jsonl") == {}
        with chromium() as browser:  # the page shows the sentence over its instructions, not a blank page
            person = Person(browser, server.url)
            person.page.keyboard.press("Enter")
            person.page.wait_for_selector("#load-error:not([hidden])", timeout=10_000)
            assert "changed during the run" in person.page.locator("#load-error").inner_text()
            assert person.page.locator("#intro").is_visible() and not person.page.locator("#work").is_visible()
            person.page.screenshot(path=str(ARTIFACTS / "human-row-changed.png"))
            person.close()


def test_a_link_out_of_the_data_folder_and_a_file_that_is_no_image_are_not_served(data: dict[str, Path], tmp_path: Path) -> None:
    """A symbolic link inside the data folder that points outside it is refused (the file it
    names is read nowhere), and a file of the folder that is no image is not served either."""
    copy = tmp_path / "mc"
    shutil.copytree(data["mc_bench"], copy)
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret\n")
    with serving("mc_bench", copy, tmp_path / "run", size=2, seed=3) as server:
        base = server.url
        sid = server.run.plan.ids[0]
        first, second = (ref.path for ref in server._samples[sid].images)
        assert first is not None and second is not None
        first.unlink()
        first.symlink_to(secret)  # a link inside the folder, to a file outside it
        code, body = request(f"{base}api/image?id={quote(sid)}&i=0")
        assert code == 403 and "outside the data folder" in body["error"], body
        second.unlink()
        second.write_text("not an image, inside the folder\n")
        code, body = request(f"{base}api/image?id={quote(sid)}&i=1")
        assert code == 415 and "not an image" in body["error"], body


def test_a_negative_image_index_and_a_float_image_number_are_refused(data: dict[str, Path], tmp_path: Path) -> None:
    with serving("mc_bench", data["mc_bench"], tmp_path / "run", size=2, seed=3) as server:
        base = server.url
        sid = server.run.plan.ids[0]
        for i in ("-1", "-2", "+0", "1e0", " 0", "٠"):
            assert request(f"{base}api/image?id={quote(sid)}&i={quote(i)}")[0] == 404, i
        assert request(f"{base}api/image?id={quote(sid)}&i=1")[0] == 200
        for image in (0.0, 1.0, "0", True, None):
            answer = [{"image": image, "group": 1, "bbox": [0, 0, 5, 5]}]
            code, reply = request(base + "api/answer", {"id": sid, "answer": answer, "seconds": 1})
            assert code == 400 and "must be 0 (image 1) or 1 (image 2)" in reply["error"], (image, reply)
        assert read_records(tmp_path / "run" / "records.jsonl") == {}
