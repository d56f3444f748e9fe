"""The Label Studio round trip of a human baseline (docs/human-labelstudio.md).

`needlepoint human export BENCH --data D [--plan N --seed S] --to labelstudio OUT` writes a
project for Label Studio: `OUT/labeling_config.xml` (the labeling interface), `OUT/tasks.json`
(one task per sample of the plan, the sample id and the plan in `data`) and `OUT/images/` (each
image under a stable name, so that Label Studio can serve it: by default as a local file,
`/data/local-files/?d=images/NAME`, with OUT as Label Studio's local-files document root; or under
`--image-url-prefix`, for a web server of the team's).

`needlepoint human import BENCH --data D --from labelstudio EXPORT.json --out RUNS` reads Label
Studio's JSON export (boxes in percent of the image with `original_width`/`original_height`,
`completed_by`, `lead_time`) into one human run folder per annotator (`RUNS/human-NAME`), through
`HumanRun`, the same path the web page writes by: the same checks, records and scores. Everything
in the export is checked before anything is written; a rerun adds only what is new.

It serves the benchmarks whose kind of human page (`Declaration.human`, kinds.py) is "image_pair"
(MC-Bench: two images, boxes in groups) or "one_box" (Ref-Adv-s, RefCOCO: one image, one box).
The "document" kind (MM-NIAH) is refused: its documents are long interleaved texts and images with
an answer widget per task type, which `needlepoint human mm_niah` shows and a Label Studio config
cannot.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from needlepoint.core.errors import DataError
from needlepoint.core.files import write_atomic, write_json
from needlepoint.core.images import read_image
from needlepoint.core.numeric import boolean, is_finite
from needlepoint.human.answers import MAX_GROUPS, check_answer
from needlepoint.human.kinds import DOCUMENT, IMAGE_PAIR, ONE_BOX, declared, either, names_of, pages
from needlepoint.human.plan import Plan, load_plan_data, plan_of

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_URL_PREFIX",
    "TASKS_FILE",
    "Annotation",
    "add_parsers",
    "export_project",
    "import_export",
    "labeling_config",
    "read_export",
]

CONFIG_FILE = "labeling_config.xml"
TASKS_FILE = "tasks.json"
IMAGES = "images"
DEFAULT_URL_PREFIX = "/data/local-files/?d="
KINDS = (IMAGE_PAIR, ONE_BOX)  # the kinds of human page a Label Studio config can show
EXPORT_BYTES = 512 << 20  # a Label Studio export of a few thousand tasks is megabytes
PIXEL_DIGITS = 6  # decimals of a pixel kept from Label Studio's percents
EDGE = 1e-6  # a box edge this far (relative) outside its image is rounding in Label Studio's percents
MAX_SECONDS = 7 * 86400  # an annotation's lead_time: from 0 to a week, as a human run keeps it (runs.HumanRun.add)
GROUP_LABEL = re.compile(r"group ([0-9]{1,3})")  # ASCII digits only: "group ²" is no group

PAIR_INSTRUCTIONS = (
    "Box every object in Image 1 and Image 2 that the description refers to. It may refer to objects in one image, "
    "in both, or in neither: leave an image without boxes when nothing there matches. When it asks for several kinds "
    "of object (for example pairs of the same colour), give each kind its own group (1, 2, 3, ...); otherwise put "
    "every box in group 1."
)
ONE_BOX_INSTRUCTIONS = "Draw one box around the object the expression refers to."


# --- export -----------------------------------------------------------------------------------


def _group_colour(group: int) -> str:
    from needlepoint.report.thumbs import box_colour

    return box_colour("gt", group, True)


def _kind(bench_name: str) -> str:
    """The benchmark's kind of page, one Label Studio can show; DataError says why not otherwise."""
    if bench_name not in pages():
        raise DataError(f"Label Studio export knows {either(names_of(*KINDS), 'and')}, not {bench_name}")
    bench = declared(bench_name)
    if bench.human == DOCUMENT:
        raise DataError(
            f"Label Studio cannot show {bench.title}'s long interleaved documents with an answer widget per task type; "
            f"take {bench.title} with `needlepoint human {bench_name}` instead"
        )
    if bench.human not in KINDS:
        raise DataError(f"Label Studio export knows {either(names_of(*KINDS), 'and')}, not {bench_name}")
    return str(bench.human)


def labeling_config(bench_name: str) -> str:
    """The Label Studio labeling config (XML) of a benchmark, by its kind of page: an image pair
    (MC-Bench) side by side, each image with its own RectangleLabels of groups 1-9 (the report's
    colours), the description as text; one image (Ref-Adv-s, RefCOCO) with its expression and one
    label."""
    kind = _kind(bench_name)
    if kind == IMAGE_PAIR:
        images = []
        for n in (1, 2):
            labels = "\n".join(
                f'        <Label value="group {g}" background="{_group_colour(g)}"/>' for g in range(1, MAX_GROUPS + 1)
            )
            images.append(
                f'    <View style="flex: 1; min-width: 0">\n      <Header value="Image {n}" size="5"/>\n'
                f'      <Image name="image_{n}" value="$image_{n}" zoom="true" zoomControl="true"/>\n'
                f'      <RectangleLabels name="boxes_{n}" toName="image_{n}">\n{labels}\n      </RectangleLabels>\n    </View>'
            )
        return (
            f'<View>\n  <Header value={quoteattr(PAIR_INSTRUCTIONS)} size="6"/>\n'
            '  <Header value="Description" size="5"/>\n  <Text name="prompt" value="$prompt"/>\n'
            '  <View style="display: flex; gap: 16px">\n' + "\n".join(images) + "\n  </View>\n</View>\n"
        )
    return (
        f'<View>\n  <Header value={quoteattr(ONE_BOX_INSTRUCTIONS)} size="6"/>\n'
        '  <Header value="Expression" size="5"/>\n  <Text name="expression" value="$expression"/>\n'
        '  <Image name="image" value="$image" zoom="true" zoomControl="true"/>\n'
        '  <RectangleLabels name="box" toName="image">\n'
        f'    <Label value="target" background="{_group_colour(1)}"/>\n'
        "  </RectangleLabels>\n</View>\n"
    )


def _image_file(out: Path, ref: Any, written: dict[str, str]) -> str:
    """Write an image under OUT/images (a name from its key: stable and safe) once; its relative path."""
    if ref.key in written:
        return written[ref.key]
    from PIL import Image

    data = read_image(ref)
    with Image.open(io.BytesIO(data)) as im:
        fmt = (im.format or "png").lower()
    suffix = {"jpeg": "jpg"}.get(fmt, fmt)
    name = f"{IMAGES}/{hashlib.sha256(ref.key.encode()).hexdigest()[:20]}.{suffix}"
    write_atomic(out / name, data)
    written[ref.key] = name
    return name


def _plan_data(plan: Plan) -> dict[str, Any]:
    return {"plan_size": plan.size, "plan_seed": plan.seed}


def export_project(
    bench_name: str, data: Path, size: int | None, seed: int, out: Path, url_prefix: str = DEFAULT_URL_PREFIX
) -> list[Path]:
    """Write the labeling config, the tasks and the images of a plan (no gold samples: Label Studio
    shows no answer after submission) into `out`; the paths written."""
    config = labeling_config(bench_name)
    kind = _kind(bench_name)
    _, dataset = load_plan_data(bench_name, data)
    plan = plan_of(bench_name, dataset, size, seed)
    by_id = {s.id: s for s in dataset}
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    tasks = []
    for sid in plan.ids:
        s = by_id[sid]
        task: dict[str, Any] = {"sample_id": sid, "benchmark": bench_name, **_plan_data(plan)}
        if kind == IMAGE_PAIR:
            task["prompt"] = s.text
            for n, ref in enumerate(s.images, 1):
                task[f"image_{n}"] = url_prefix + _image_file(out, ref, written)
        else:
            task["expression"] = s.caption
            task["image"] = url_prefix + _image_file(out, s.image, written)
        tasks.append({"data": task})
    return [write_atomic(out / CONFIG_FILE, config), write_json(out / TASKS_FILE, tasks)]


# --- import -----------------------------------------------------------------------------------


@dataclass
class Annotation:
    """One annotator's answer to one sample, read from the export and checked."""

    annotator: str
    sample_id: str
    answer: Any
    seconds: float
    skipped: bool
    where: str


def _number(value: Any, where: str, what: str) -> float:
    if not is_finite(value):
        raise DataError(f"{where}: {what} {str(value)[:40]!r} is not a finite number; export the project again from Label Studio")
    return float(value)


def _annotator(value: Any, names: dict[str, str], where: str) -> str:
    """The annotator's name from `completed_by` (a user id, or a user object in older exports)."""
    from needlepoint.human.runs import check_annotator

    if isinstance(value, dict):
        key = str(value.get("id", ""))
        email = str(value.get("email") or "")
        fallback = email.split("@", 1)[0] if email else f"user{key}"
    elif isinstance(value, int) and not isinstance(value, bool):
        key, email, fallback = str(value), "", f"user{value}"
    else:
        raise DataError(f"{where}: completed_by {str(value)[:40]!r} names no Label Studio user; export the project as JSON")
    name = names.get(key) or (names.get(email) if email else None) or fallback
    try:
        return check_annotator(name)
    except DataError:
        raise DataError(
            f"{where}: annotator {name[:60]!r} is not a name of letters, digits, '.', '_' or '-'; "
            f"name the user with --annotator-name {key}=NAME"
        ) from None


def _box(item: dict[str, Any], size: tuple[float, float], where: str) -> tuple[list[float], str]:
    """A rectangle result as [x1, y1, x2, y2] in image pixels, and its label."""
    value = item.get("value")
    if not isinstance(value, dict):
        raise DataError(f"{where} has no value with x, y, width and height; export the project as JSON")
    x, y, w, h = (_number(value.get(k), where, k) for k in ("x", "y", "width", "height"))
    rotation = _number(value.get("rotation", 0), where, "rotation")
    if abs(rotation) > 1e-9:
        raise DataError(f"{where} is rotated by {rotation:g} degrees; boxes must be upright: redraw it without rotating")
    width, height = size
    for key, expect in (("original_width", width), ("original_height", height)):
        if key in item and _number(item[key], where, key) != expect:
            raise DataError(
                f"{where}: {key} {item[key]} differs from the image's {expect:g} pixels; export the tasks again from this --data"
            )
    # Percents of the image carry float rounding (12 px may come back as 12.000000000000002, and
    # a box at IoU 0.5 exactly would then score otherwise): pixels are rounded to PIXEL_DIGITS.
    box = [round(v, PIXEL_DIGITS) for v in (x * width / 100, y * height / 100, (x + w) * width / 100, (y + h) * height / 100)]
    limits = (width, height, width, height)
    box = [min(max(v, 0.0), lim) if -EDGE * lim <= v <= lim * (1 + EDGE) else v for v, lim in zip(box, limits)]
    labels = value.get("rectanglelabels")
    if not isinstance(labels, list) or len(labels) != 1 or not isinstance(labels[0], str):
        raise DataError(f"{where} carries {labels!r}, not exactly one label; give each box one label in Label Studio")
    return box, labels[0]


def _answer(bench_name: str, sample: Any, results: Any, where: str) -> Any:
    """An annotation's results in the benchmark's answer schema (None: no box, on a one-box page a skip)."""
    page = _kind(bench_name)
    if not isinstance(results, list):
        raise DataError(f"{where} has no result list; export the project as JSON")
    boxes: list[Any] = []
    for n, item in enumerate(results, 1):
        at = f"{where} result {n}"
        if not isinstance(item, dict) or item.get("type") != "rectanglelabels":
            kind = item.get("type") if isinstance(item, dict) else type(item).__name__
            raise DataError(f"{at} is a {kind!r}, not a rectangle; annotate with the labeling config `human export` wrote")
        to = item.get("to_name")
        if page == IMAGE_PAIR:
            if to not in ("image_1", "image_2"):
                raise DataError(f"{at} is drawn on {to!r}, not image_1 or image_2; use the labeling config `human export` wrote")
            image = int(str(to)[-1]) - 1
            box, label = _box(item, sample.geometry.sizes[image], at)
            found = GROUP_LABEL.fullmatch(label.strip())
            if found is None:  # its range is check_answer's (groups 1 to MAX_GROUPS), as on the page
                raise DataError(f"{at} has label {label[:40]!r}, not 'group N'; use the labeling config `human export` wrote")
            boxes.append({"image": image, "group": int(found.group(1)), "bbox": box})
        else:
            if to != "image":
                raise DataError(f"{at} is drawn on {to!r}, not image; use the labeling config `human export` wrote")
            boxes.append(_box(item, (sample.width, sample.height), at)[0])
    if page == ONE_BOX:
        if len(boxes) > 1:
            title = declared(bench_name).title
            raise DataError(f"{where} holds {len(boxes)} boxes; {title} takes one: delete the others in Label Studio")
        return boxes or None
    return boxes


def _seconds(value: Any, where: str) -> float:
    """An annotation's `lead_time` (absent or null: 0): a number of seconds from 0 to a week."""
    if value is None:
        return 0.0
    seconds = _number(value, where, "lead_time")
    if not 0 <= seconds <= MAX_SECONDS:
        raise DataError(
            f"{where}: lead_time {value!r} is not a number of seconds from 0 to a week ({MAX_SECONDS:,}); "
            "fix that annotation's lead_time in the export or export the project again"
        )
    return seconds


def _parse_names(items: Sequence[str]) -> dict[str, str]:
    names = {}
    for item in items:
        key, sep, name = item.partition("=")
        if not sep or not key or not name:
            raise DataError(f"--annotator-name {item!r} is not ID=NAME (a Label Studio user id or email, then a name)")
        names[key] = name
    return names


def read_export(
    bench_name: str, path: Path, dataset: Any, names: dict[str, str] | None = None
) -> tuple[tuple[int | None, int], list[Annotation]]:
    """The plan (size, seed) the tasks came from and every annotation of a Label Studio JSON
    export, checked against the samples (DataError naming the task and annotation otherwise)."""
    names = names or {}
    if not path.is_file():
        raise DataError(f"--from labelstudio {path} is not a file; export the project from Label Studio as JSON")
    if path.stat().st_size > EXPORT_BYTES:
        raise DataError(
            f"{path} is over {EXPORT_BYTES >> 20} MB, more than any Label Studio export of a benchmark; check the file"
        )
    try:
        tasks = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        raise DataError(f"{path} is not JSON; export the project from Label Studio as JSON (not JSON-MIN or CSV)") from None
    if not isinstance(tasks, list):
        raise DataError(f"{path} is not a list of tasks; export the project from Label Studio as JSON")
    by_id = {s.id: s for s in dataset}
    plans: set[tuple[Any, Any]] = set()
    seen: set[tuple[str, str]] = set()
    out = []
    for t, task in enumerate(tasks, 1):
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("sample_id"), str):
            raise DataError(f"{path} task {t} has no data.sample_id; import into Label Studio the tasks `human export` wrote")
        sid = data["sample_id"]
        where = f"{path} task {t} (sample {sid[:60]!r})"
        if data.get("benchmark") != bench_name:
            raise DataError(f"{where} was exported for {data.get('benchmark')!r}, not {bench_name}; import it as that benchmark")
        if sid not in by_id:
            raise DataError(f"{where} names a sample --data does not hold; pass the data the tasks were exported from")
        plan = (data.get("plan_size"), data.get("plan_seed"))
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in plan):
            raise DataError(
                f"{where}: data.plan_size and data.plan_seed must be whole numbers; import the tasks `human export` wrote"
            )
        plans.add(plan)
        annotations = task.get("annotations", [])
        if not isinstance(annotations, list):
            raise DataError(f"{where} has annotations that are no list; export the project as JSON")
        for a, ann in enumerate(annotations, 1):
            at = f"{where} annotation {a}"
            if not isinstance(ann, dict):
                raise DataError(f"{at} is no object; export the project as JSON")
            name = _annotator(ann.get("completed_by"), names, at)
            if (name, sid) in seen:
                raise DataError(f"{at} is a second annotation of this sample by {name}; delete one of them in Label Studio")
            seen.add((name, sid))
            seconds = _seconds(ann.get("lead_time"), at)
            skipped = boolean(
                ann.get("was_cancelled"), at, "was_cancelled", "it must be JSON true or false, as Label Studio writes it"
            )
            answer = None if skipped else _answer(bench_name, by_id[sid], ann.get("result"), at)
            skipped = skipped or answer is None
            if not skipped:
                try:
                    check_answer(bench_name, by_id[sid], answer)
                except DataError as exc:
                    raise DataError(f"{at}: {exc}") from None
            out.append(Annotation(name, sid, answer, seconds, skipped, at))
    if len(plans) > 1:
        raise DataError(f"{path} mixes tasks of several plans ({sorted(map(str, plans))}); export and import one plan at a time")
    size, seed = next(iter(plans)) if plans else (None, 0)
    if (size is not None and not (isinstance(size, int) and size > 0)) or not isinstance(seed, int):
        raise DataError(f"{path}: plan_size {size!r} / plan_seed {seed!r} are not the numbers `human export` wrote")
    return (size, seed), out


def import_export(bench_name: str, data: Path, path: Path, out: Path, names: dict[str, str] | None = None) -> dict[str, Path]:
    """Write each annotator's answers from a Label Studio export into `out/human-NAME` (a human
    run folder over the export's plan), score each run; the folders by annotator."""
    from needlepoint.human.runs import HumanRun

    _kind(bench_name)  # refuses with the reason
    _, dataset = load_plan_data(bench_name, data)
    (size, seed), annotations = read_export(bench_name, path, dataset, names)
    if not annotations:
        raise DataError(f"{path} holds no annotation; annotate in Label Studio, then export the project as JSON")
    plan = plan_of(bench_name, dataset, size, seed)
    planned = set(plan.ids)
    stray = next((a for a in annotations if a.sample_id not in planned), None)
    if stray is not None:
        raise DataError(f"{stray.where} is not in the plan of {size} samples with seed {seed}; export the tasks again")
    # Every annotator's run folder is opened (or refused: another plan's run there) before anything
    # is added; a refusal removes the folders this import made, so that a failure writes nothing.
    runs: dict[str, HumanRun] = {}
    made = [] if out.exists() else [out]
    try:
        for name in sorted({a.annotator for a in annotations}):
            folder = out / f"human-{name}"
            if not folder.exists():
                made.append(folder)
            runs[name] = HumanRun.open(bench_name, data, name, plan, out=folder)
    except BaseException:
        for run in runs.values():
            run.close()
        for folder in reversed(made):
            shutil.rmtree(folder, ignore_errors=True)
        raise
    folders = {}
    try:
        for name, run in runs.items():
            done = run.done()
            for a in annotations:
                if a.annotator == name and a.sample_id not in done:
                    run.add(a.sample_id, a.answer, seconds=a.seconds, skipped=a.skipped, source="labelstudio")
            run.finish()
            folders[name] = run.dir
    finally:
        for run in runs.values():
            run.close()
    return folders


# --- command line -----------------------------------------------------------------------------


def add_parsers(human: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`human export` and `human import` under the `human` command's sub-commands."""
    shown = either(names_of(*KINDS))
    own = either([d.title for d in pages().values() if d.human not in KINDS], "and")
    ex = human.add_parser("export", help="write a plan as a Label Studio project: labeling config, tasks, images")
    ex.add_argument("benchmark", metavar="BENCH", help=shown + (f" ({own}: taken on needlepoint's own page)" if own else ""))
    ex.add_argument("--data", required=True, type=Path, help="the release folder")
    ex.add_argument("--plan", type=int, help="samples in the plan (default: all)")
    ex.add_argument("--seed", type=int, default=0, help="the plan's seed (the same for every annotator)")
    ex.add_argument("--to", nargs=2, required=True, metavar=("labelstudio", "OUT"), help="labelstudio and the folder to write")
    ex.add_argument(
        "--image-url-prefix",
        default=DEFAULT_URL_PREFIX,
        help=f"what precedes images/NAME in the tasks' image URLs (default {DEFAULT_URL_PREFIX!r}: "
        "Label Studio's local files, with OUT as its document root)",
    )
    ex.set_defaults(human_run=run_export)
    im = human.add_parser("import", help="read a Label Studio JSON export into one human run folder per annotator")
    im.add_argument("benchmark", metavar="BENCH", help=shown)
    im.add_argument("--data", required=True, type=Path, help="the release folder the tasks were exported from")
    im.add_argument("--from", dest="source", nargs=2, required=True, metavar=("labelstudio", "EXPORT.json"))
    im.add_argument("--out", required=True, type=Path, help="folder of the run folders (one per annotator: human-NAME)")
    im.add_argument(
        "--annotator-name",
        action="append",
        default=[],
        metavar="ID=NAME",
        help="name a Label Studio user (id or email) in the runs (default: userID, or the email's name)",
    )
    im.set_defaults(human_run=run_import)


def _tool(value: str, flag: str) -> None:
    if value != "labelstudio":
        raise DataError(f"{flag} {value!r} is unknown; the one tool is labelstudio ({flag} labelstudio PATH)")


def run_export(ns: argparse.Namespace) -> int:
    """`needlepoint human export`."""
    _tool(ns.to[0], "--to")
    _kind(ns.benchmark)  # refuses with the reason
    out = Path(ns.to[1])
    paths = export_project(ns.benchmark, ns.data, ns.plan, ns.seed, out, ns.image_url_prefix)
    print(f"Label Studio project written: {', '.join(map(str, paths))} and {out / IMAGES}/")
    return 0


def run_import(ns: argparse.Namespace) -> int:
    """`needlepoint human import`."""
    _tool(ns.source[0], "--from")
    folders = import_export(ns.benchmark, ns.data, Path(ns.source[1]), ns.out, _parse_names(ns.annotator_name))
    for name, folder in folders.items():
        print(f"{name}: {folder}")
    return 0
