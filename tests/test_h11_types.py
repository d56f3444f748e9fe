"""The typed surfaces of issue 21 item 4: evaluate()'s keywords follow RunConfig's fields, and the
optional model methods are found by their protocols."""

from __future__ import annotations

import dataclasses
from typing import get_type_hints

from needlepoint.api import EvaluateSettings
from needlepoint.config import RunConfig
from needlepoint.conversation import Closes, Scrubs, WaitNotes


def test_evaluate_takes_every_field_of_run_config_and_no_other() -> None:
    assert set(get_type_hints(EvaluateSettings)) == {f.name for f in dataclasses.fields(RunConfig)}


def test_optional_model_methods_are_found_by_protocol() -> None:
    class Plain:
        name = "plain"

    class Rich:
        name = "rich"

        def scrub(self, text: str) -> str:
            return text.replace("sk-1", "***")

        def wait_note(self) -> str | None:
            return None

        async def aclose(self) -> None:
            return None

    assert not isinstance(Plain(), (Scrubs, WaitNotes, Closes))
    assert isinstance(Rich(), Scrubs) and isinstance(Rich(), WaitNotes) and isinstance(Rich(), Closes)
