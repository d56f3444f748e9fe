"""The public face for benchmark authors: every name a benchmark package needs, in one place.

`from needlepoint.contract import BaseBenchmark, Dataset, Declaration, parse_boxes, iou, ...`: the
protocols (Benchmark and one per optional verb), BaseBenchmark and the types its verbs take and
return, the Declaration and its parts, what a prediction file reads as (PredictionsRun), the
leaderboard's boards, the box helpers (reply parsing, box formats, IoU), records and their
statuses, the errors, and the core helpers a benchmark uses (file writers, JSON lines, image paths,
number checks). A benchmark package imports needlepoint through this face (and a solver of its own
through `needlepoint.solvers`, the solver authors' face, which lies above this layer); the modules
behind it may move. `tests/toybench/` is built that way and tests/test_package.py holds it to it.

The names are imported when first used, so that a declaration module (imported whenever the command
line is built) stays cheap: `from needlepoint.contract import Declaration` loads no numpy. Every name
lies in this layer or below (core/): the face imports nothing above it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from needlepoint.contract.base import (
        BaseBenchmark,
        Benchmark,
        Dataset,
        DrawsFigures,
        Parsed,
        ReadsPredictions,
        ReportBox,
        ReportImage,
        ReportItem,
        Resamples,
        SampleLike,
        Stratifies,
        Table,
        count_parse_errors,
        format_cell,
        parse_errors,
        percent,
        replies_text,
        report_parse_error,
        request_failures,
    )
    from needlepoint.contract.boards import (
        Board,
        BoardRow,
        Cell,
        PublishedRow,
        Run,
        answer_label,
        at,
        count,
        pct,
        progress_mark,
    )
    from needlepoint.contract.boxes import MAX_BOXES, PRIORITY_KEYS, collect_boxes, parse_boxes
    from needlepoint.contract.boxoptions import BoxOptions
    from needlepoint.contract.coverage import (
        answered_cell,
        coverage_note,
        has_answers,
        is_incomplete,
        no_answers_table,
        run_counts,
    )
    from needlepoint.contract.declaration import Builder, Declaration, PublishedTable
    from needlepoint.contract.grounding import (
        ANSWER_FORMATS,
        Found,
        GroundedBox,
        check_answer_format,
        find_boxes,
        format_box,
        format_image_line,
        format_ref,
        parse_grounded_boxes,
    )
    from needlepoint.contract.predictions import PredictionsRun
    from needlepoint.contract.registry import register, unregister
    from needlepoint.core import status
    from needlepoint.core.conversation import MAIN, Conversation, Generation, ImageRef, Message, Part, Reply
    from needlepoint.core.errors import DataError, RequestError
    from needlepoint.core.files import AtomicFile, json_text, write_atomic, write_json, write_lines, write_parquet
    from needlepoint.core.geometry import (
        ABS_FRAMES,
        BOX_FORMATS,
        AbsFrame,
        Box,
        BoxFormat,
        check_abs_frame,
        check_box_format,
        dedupe,
        fitted_size,
        from_absolute,
        iou,
        iou_matrix,
        model_frame,
        require_box_format,
        to_absolute,
        xywh_to_xyxy,
        xyxy_to_xywh,
    )
    from needlepoint.core.images import safe_path
    from needlepoint.core.jsonl import read_json, read_jsonl
    from needlepoint.core.numeric import boolean, finite, integer, is_box, is_finite, size
    from needlepoint.core.options import ABS_FRAME, ANSWER_FORMAT, BOX_FORMAT, MAX_IMAGE_SIDE, Option
    from needlepoint.core.records import Record, Turn, scores
    from needlepoint.core.shard import WeighsSamples
    from needlepoint.core.structured import AnswersInJson

# name -> the module that defines it (the face's whole content; `__all__` lists the same names)
_WHERE: dict[str, str] = {
    # the protocols: the verbs every benchmark offers, and one per optional verb
    "Benchmark": "needlepoint.contract.base",
    "SampleLike": "needlepoint.contract.base",
    "WeighsSamples": "needlepoint.core.shard",
    "AnswersInJson": "needlepoint.core.structured",
    "Resamples": "needlepoint.contract.base",
    "Stratifies": "needlepoint.contract.base",
    "DrawsFigures": "needlepoint.contract.base",
    "ReadsPredictions": "needlepoint.contract.base",
    # writing the verbs
    "BaseBenchmark": "needlepoint.contract.base",
    "Dataset": "needlepoint.contract.base",
    "Parsed": "needlepoint.contract.base",
    "Table": "needlepoint.contract.base",
    "ReportBox": "needlepoint.contract.base",
    "ReportImage": "needlepoint.contract.base",
    "ReportItem": "needlepoint.contract.base",
    "count_parse_errors": "needlepoint.contract.base",
    "format_cell": "needlepoint.contract.base",
    "parse_errors": "needlepoint.contract.base",
    "percent": "needlepoint.contract.base",
    "replies_text": "needlepoint.contract.base",
    "report_parse_error": "needlepoint.contract.base",
    "request_failures": "needlepoint.contract.base",
    "answered_cell": "needlepoint.contract.coverage",
    "coverage_note": "needlepoint.contract.coverage",
    "has_answers": "needlepoint.contract.coverage",
    "is_incomplete": "needlepoint.contract.coverage",
    "no_answers_table": "needlepoint.contract.coverage",
    "run_counts": "needlepoint.contract.coverage",
    "PredictionsRun": "needlepoint.contract.predictions",
    # the declaration, its flags, the registry
    "Declaration": "needlepoint.contract.declaration",
    "PublishedTable": "needlepoint.contract.declaration",
    "Builder": "needlepoint.contract.declaration",
    "Option": "needlepoint.core.options",
    "BOX_FORMAT": "needlepoint.core.options",
    "ANSWER_FORMAT": "needlepoint.core.options",
    "MAX_IMAGE_SIDE": "needlepoint.core.options",
    "ABS_FRAME": "needlepoint.core.options",
    "register": "needlepoint.contract.registry",
    "unregister": "needlepoint.contract.registry",
    # the leaderboard's boards
    "Board": "needlepoint.contract.boards",
    "BoardRow": "needlepoint.contract.boards",
    "Cell": "needlepoint.contract.boards",
    "PublishedRow": "needlepoint.contract.boards",
    "Run": "needlepoint.contract.boards",
    "answer_label": "needlepoint.contract.boards",
    "at": "needlepoint.contract.boards",
    "count": "needlepoint.contract.boards",
    "pct": "needlepoint.contract.boards",
    "progress_mark": "needlepoint.contract.boards",
    # boxes: how replies state them (one checked value of the box flags), in a reply, formats, frames, IoU
    "BoxOptions": "needlepoint.contract.boxoptions",
    "parse_boxes": "needlepoint.contract.boxes",
    "collect_boxes": "needlepoint.contract.boxes",
    "MAX_BOXES": "needlepoint.contract.boxes",
    "PRIORITY_KEYS": "needlepoint.contract.boxes",
    "ANSWER_FORMATS": "needlepoint.contract.grounding",
    "check_answer_format": "needlepoint.contract.grounding",
    "parse_grounded_boxes": "needlepoint.contract.grounding",
    "find_boxes": "needlepoint.contract.grounding",
    "Found": "needlepoint.contract.grounding",
    "GroundedBox": "needlepoint.contract.grounding",
    "format_box": "needlepoint.contract.grounding",
    "format_image_line": "needlepoint.contract.grounding",
    "format_ref": "needlepoint.contract.grounding",
    "Box": "needlepoint.core.geometry",
    "BoxFormat": "needlepoint.core.geometry",
    "BOX_FORMATS": "needlepoint.core.geometry",
    "AbsFrame": "needlepoint.core.geometry",
    "ABS_FRAMES": "needlepoint.core.geometry",
    "check_box_format": "needlepoint.core.geometry",
    "check_abs_frame": "needlepoint.core.geometry",
    "require_box_format": "needlepoint.core.geometry",
    "to_absolute": "needlepoint.core.geometry",
    "from_absolute": "needlepoint.core.geometry",
    "model_frame": "needlepoint.core.geometry",
    "fitted_size": "needlepoint.core.geometry",
    "dedupe": "needlepoint.core.geometry",
    "iou": "needlepoint.core.geometry",
    "iou_matrix": "needlepoint.core.geometry",
    "xyxy_to_xywh": "needlepoint.core.geometry",
    "xywh_to_xyxy": "needlepoint.core.geometry",
    # conversations, records, statuses, errors
    "Conversation": "needlepoint.core.conversation",
    "Message": "needlepoint.core.conversation",
    "ImageRef": "needlepoint.core.conversation",
    "Part": "needlepoint.core.conversation",
    "Generation": "needlepoint.core.conversation",
    "Reply": "needlepoint.core.conversation",
    "MAIN": "needlepoint.core.conversation",
    "Record": "needlepoint.core.records",
    "Turn": "needlepoint.core.records",
    "scores": "needlepoint.core.records",
    "status": "needlepoint.core",
    "DataError": "needlepoint.core.errors",
    "RequestError": "needlepoint.core.errors",
    # files: the one writer (tests/test_writers_only.py), JSON lines, image paths, number checks
    "AtomicFile": "needlepoint.core.files",
    "write_atomic": "needlepoint.core.files",
    "write_json": "needlepoint.core.files",
    "write_lines": "needlepoint.core.files",
    "write_parquet": "needlepoint.core.files",
    "json_text": "needlepoint.core.files",
    "read_json": "needlepoint.core.jsonl",
    "read_jsonl": "needlepoint.core.jsonl",
    "safe_path": "needlepoint.core.images",
    "is_box": "needlepoint.core.numeric",
    "is_finite": "needlepoint.core.numeric",
    "finite": "needlepoint.core.numeric",
    "size": "needlepoint.core.numeric",
    "integer": "needlepoint.core.numeric",
    "boolean": "needlepoint.core.numeric",
}

__all__ = [
    "ABS_FRAME",
    "ABS_FRAMES",
    "ANSWER_FORMAT",
    "ANSWER_FORMATS",
    "BOX_FORMAT",
    "BOX_FORMATS",
    "MAIN",
    "MAX_BOXES",
    "MAX_IMAGE_SIDE",
    "PRIORITY_KEYS",
    "AbsFrame",
    "AnswersInJson",
    "AtomicFile",
    "BaseBenchmark",
    "Benchmark",
    "Board",
    "BoardRow",
    "Box",
    "BoxFormat",
    "BoxOptions",
    "Builder",
    "Cell",
    "Conversation",
    "DataError",
    "Dataset",
    "Declaration",
    "DrawsFigures",
    "Found",
    "Generation",
    "GroundedBox",
    "ImageRef",
    "Message",
    "Option",
    "Parsed",
    "Part",
    "PredictionsRun",
    "PublishedRow",
    "PublishedTable",
    "ReadsPredictions",
    "Record",
    "Reply",
    "ReportBox",
    "ReportImage",
    "ReportItem",
    "RequestError",
    "Resamples",
    "Stratifies",
    "Run",
    "SampleLike",
    "Table",
    "Turn",
    "WeighsSamples",
    "answer_label",
    "answered_cell",
    "at",
    "boolean",
    "check_abs_frame",
    "check_answer_format",
    "check_box_format",
    "collect_boxes",
    "count",
    "count_parse_errors",
    "coverage_note",
    "dedupe",
    "find_boxes",
    "finite",
    "fitted_size",
    "format_box",
    "format_cell",
    "format_image_line",
    "format_ref",
    "from_absolute",
    "has_answers",
    "integer",
    "iou",
    "iou_matrix",
    "is_box",
    "is_finite",
    "is_incomplete",
    "json_text",
    "model_frame",
    "no_answers_table",
    "parse_boxes",
    "parse_errors",
    "parse_grounded_boxes",
    "pct",
    "percent",
    "progress_mark",
    "read_json",
    "read_jsonl",
    "register",
    "replies_text",
    "report_parse_error",
    "request_failures",
    "require_box_format",
    "run_counts",
    "safe_path",
    "scores",
    "size",
    "status",
    "to_absolute",
    "unregister",
    "write_atomic",
    "write_json",
    "write_lines",
    "write_parquet",
    "xywh_to_xyxy",
    "xyxy_to_xywh",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(import_module(_WHERE[name]), name)
        globals()[name] = value  # found once
        return value
    raise AttributeError(f"module 'needlepoint.contract' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
