"""traceanalyzer: where the GPU time went, and why."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
