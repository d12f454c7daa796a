"""traceanalyzer: where the GPU time went, and why.

    import traceanalyzer as ta
    a = ta.analyze("trace.json.gz")   # see docs/python-api.md

The API is loaded on first use (`analyze`, `compare`, `Analysis`), so that `import
traceanalyzer` costs nothing more than its version. (The comparison of two reports lives in
`traceanalyzer.comparison`: a submodule named `compare` would shadow the function.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceanalyzer.version import __version__

__all__ = ["Analysis", "__version__", "analyze", "compare"]

if TYPE_CHECKING:
    from traceanalyzer.notebook import Analysis, analyze, compare


def __getattr__(name: str) -> Any:
    if name in ("Analysis", "analyze", "compare"):
        from traceanalyzer import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'traceanalyzer' has no attribute {name!r}")
