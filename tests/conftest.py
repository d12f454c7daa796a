"""Shared fixtures: where the real traces are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"


def corpus() -> Path | None:
    """The shared real-trace corpus, when TRACEANALYZER_CORPUS points at it (CI sets it)."""
    value = os.environ.get("TRACEANALYZER_CORPUS")
    if not value:
        return None
    path = Path(value)
    return path if path.is_dir() else None


@pytest.fixture
def samples() -> Path:
    return SAMPLES
