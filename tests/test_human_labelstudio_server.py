"""The Label Studio round trip against a real Label Studio (marker `labelstudio`; run with
`bash scripts/setup-labelstudio.sh && python -m pytest -m labelstudio tests/test_human_labelstudio_server.py`,
as .ci/run does). It fails, never skips, when Label Studio is missing or does not start.

Label Studio runs on 127.0.0.1 with SQLite in a temporary data folder and its admin user and
token made on the command line; the test creates a project with the exported labeling config,
connects the exported images as local files (and fetches one as the labeling page would),
imports the exported tasks, posts two annotators' boxes through the annotations API as the
labeling page posts them, exports the project as JSON, imports that into needlepoint and checks
each annotator's scores equal those of the same boxes given through HumanRun (the web page's path).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.labelstudio import mc_results, person_answers
from helpers.paths import REPO

from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.human.labelstudio import CONFIG_FILE, TASKS_FILE, export_project, import_export
from needlepoint.human.plan import load_plan_data, make_plan
from needlepoint.human.runs import HumanRun

pytestmark = pytest.mark.labelstudio

LABEL_STUDIO = REPO / ".venv-labelstudio" / "bin" / "label-studio"
MIGRATED = REPO / ".venv-labelstudio" / "needlepoint-migrated" / "label_studio.sqlite3"  # setup-labelstudio.sh
TOKEN = "needlepoint-test-token-0123456789abcdef"
START_S = 300  # from the migrated database: seconds (migrating an empty one takes minutes on two cores)


@dataclass
class LabelStudio:
    url: str
    log: Path

    def call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Token {TOKEN}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:2000]!r}") from None
        return payload if raw else json.loads(payload)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("labelstudio-project")


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory: pytest.TempPathFactory, project_dir: Path) -> Iterator[LabelStudio]:
    for path in (LABEL_STUDIO, MIGRATED):
        assert path.exists(), f"{path} is missing; run bash scripts/setup-labelstudio.sh first"
    home = tmp_path_factory.mktemp("labelstudio-data")
    shutil.copyfile(MIGRATED, home / MIGRATED.name)
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(home),
        "LABEL_STUDIO_BASE_DATA_DIR": str(home),
        "DJANGO_DB": "sqlite",
        "LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED": "true",
        "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT": str(project_dir),
        "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
        "SENTRY_DSN": "",
        "FRONTEND_SENTRY_DSN": "",
        "COLLECT_ANALYTICS": "false",
        "LATEST_VERSION_CHECK": "false",  # no request to pypi.org at start
    }
    args = [str(LABEL_STUDIO), "start", "--no-browser", "--internal-host", "127.0.0.1", "--port", str(port)]
    args += ["--data-dir", str(home), "--username", "admin@example.com", "--password", "needlepoint-pw-1"]
    args += ["--user-token", TOKEN, "--enable-legacy-api-token", "--log-level", "WARNING"]
    log = home / "label-studio.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(args, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    ls = LabelStudio(f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + START_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"Label Studio exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(ls.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"Label Studio did not answer within {START_S} s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        yield ls
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_round_trip_through_label_studio(label_studio: LabelStudio, project_dir: Path, tmp_path: Path) -> None:
    ls = label_studio
    data = write_release(tmp_path / "mc", pairs=12)[0]
    export_project("mc_bench", data, 8, 4, project_dir)
    project = ls.call(
        "POST", "/api/projects/", {"title": "needlepoint MC-Bench", "label_config": (project_dir / CONFIG_FILE).read_text()}
    )
    pid = project["id"]
    # The images as Label Studio serves local files: a storage over the folder, then the URL a task names.
    ls.call(
        "POST",
        "/api/storages/localfiles/",
        {"project": pid, "path": str(project_dir / "images"), "title": "images", "use_blob_urls": False},
    )
    tasks = json.loads((project_dir / TASKS_FILE).read_text())
    ls.call("POST", f"/api/projects/{pid}/import", tasks)
    first = tasks[0]["data"]["image_1"]
    assert ls.call("GET", first, raw=True) == (project_dir / first.split("?d=", 1)[1]).read_bytes()
    # Two annotators: the admin, and a user made through the API.
    me = ls.call("GET", "/api/current-user/whoami")["id"]
    other = ls.call("POST", "/api/users/", {"email": "bob@example.com", "username": "bob"})["id"]
    _, dataset = load_plan_data("mc_bench", data)
    plan = make_plan("mc_bench", data, 8, 4)
    samples = [s for s in dataset if s.id in set(plan.ids)]
    people = {me: person_answers(samples, dataset.truth, 1), other: person_answers(samples, dataset.truth, 2)}
    sizes = {s.id: s.geometry.sizes for s in samples}
    served = ls.call("GET", f"/api/tasks/?project={pid}&page_size=1000")
    served = served["tasks"] if isinstance(served, dict) else served
    assert sorted(t["data"]["sample_id"] for t in served) == sorted(plan.ids)
    for task in served:
        sid = task["data"]["sample_id"]
        for user, answers in people.items():
            results = [{**r, "id": f"r{n}", "origin": "manual"} for n, r in enumerate(mc_results(answers[sid], sizes[sid]))]
            body = {"result": results, "lead_time": 6.25, "was_cancelled": False, "completed_by": user}
            ls.call("POST", f"/api/tasks/{task['id']}/annotations/", body)
    exported = ls.call("GET", f"/api/projects/{pid}/export?exportType=JSON", raw=True)
    export = tmp_path / "export.json"
    export.write_bytes(exported)
    folders = import_export("mc_bench", data, export, tmp_path / "runs", {str(me): "admin", str(other): "bob"})
    assert sorted(folders) == ["admin", "bob"]
    for user, name in ((me, "admin"), (other, "bob")):
        imported = json.loads((folders[name] / "metrics.json").read_text())
        run = HumanRun.open("mc_bench", data, name, plan, out=tmp_path / f"page-{name}")
        try:
            for sid in plan.ids:
                run.add(sid, people[user][sid], seconds=6.25)
            direct = run.finish()
        finally:
            run.close()
        for protocol in ("official", "corrected"):
            for metric in ("acc", "ap50"):
                assert imported[protocol][metric] == direct[protocol][metric], (name, protocol, metric)
        first_record = json.loads((folders[name] / "records.jsonl").read_text().splitlines()[0])
        assert first_record["solver"]["seconds"] == 6.25 and first_record["solver"]["source"] == "labelstudio"
