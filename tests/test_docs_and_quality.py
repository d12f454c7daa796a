"""Generated docs stay in sync; ruff and mypy keep the package honest."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO
from traceanalyzer.model.schema import schema_markdown


def test_schema_doc_is_generated_from_the_schema() -> None:
    assert (REPO / "docs" / "schema.md").read_text() == schema_markdown()


def test_ruff() -> None:
    pytest.importorskip("ruff")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "traceanalyzer", "tests", "bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict() -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "traceanalyzer"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
