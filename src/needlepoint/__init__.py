"""needlepoint: evaluate multimodal models on finding things (MC-Bench, Ref-Adv-s, MM-NIAH).

The public surface is small and imported lazily, so that `needlepoint --help` starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["DataError", "RunConfig", "RunResult", "__version__", "evaluate", "score"]

if TYPE_CHECKING:
    from needlepoint.api import RunResult, evaluate, score
    from needlepoint.core.config import RunConfig
    from needlepoint.core.errors import DataError

_LAZY = {
    "evaluate": "needlepoint.api",
    "score": "needlepoint.api",
    "RunResult": "needlepoint.api",
    "RunConfig": "needlepoint.core.config",
    "DataError": "needlepoint.core.errors",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'needlepoint' has no attribute {name!r}")
