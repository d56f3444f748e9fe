"""What the tests share, imported as `from helpers import ...` (pyproject puts tests/ on sys.path):
the repository's paths and reference data, the simulated servers as tests start them, release
writers, CLI runners and readers of a run folder; `helpers.rag` holds the RAG tests' hand-made set.
Fixtures and pytest hooks stay in tests/conftest.py."""

from helpers.cli import one_sentence, ref_eval_args, run_cli, run_quiet
from helpers.paths import MC_BENCH_RELEASE, REF_ADV_PREDICTIONS, REPO, TEST_DATA, TEST_DEVICE, extra_module, in_ci, models_extra
from helpers.releases import (
    demo_config,
    good_ref_reply,
    prompt_key,
    ref_run_config,
    scripted_ref_release,
    small_niah,
    write_jsonl_release,
)
from helpers.runs import records, report_blob, untimed, untimed_record
from helpers.servers import TEST_MODELS, CountingServer

__all__ = [
    "MC_BENCH_RELEASE",
    "REF_ADV_PREDICTIONS",
    "REPO",
    "TEST_DATA",
    "TEST_DEVICE",
    "TEST_MODELS",
    "CountingServer",
    "demo_config",
    "extra_module",
    "good_ref_reply",
    "in_ci",
    "models_extra",
    "one_sentence",
    "prompt_key",
    "records",
    "ref_eval_args",
    "ref_run_config",
    "report_blob",
    "run_cli",
    "run_quiet",
    "scripted_ref_release",
    "small_niah",
    "untimed",
    "untimed_record",
    "write_jsonl_release",
]
