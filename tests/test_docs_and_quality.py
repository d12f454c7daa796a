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


def test_the_glossary_is_in_the_docs_and_the_page() -> None:
    """docs/glossary.md is the packaged glossary (docgen writes it), and the HTML page embeds
    it as its Terms section, linked from the navigation and the Ranks notes' terms."""
    from traceanalyzer.render.base import static_text

    text = static_text("glossary.md")
    assert (REPO / "docs" / "glossary.md").read_text(encoding="utf-8") == text
    for term in ("step time", "own", "exposed", "host wait", "GPU tile", "MFU", "impact"):
        assert f"**{term}**" in text, term
    from tests.render.helpers import page_for

    page = page_for(REPO / "sample_traces" / "sampled_2rank")
    assert '<section id="glossary">' in page and page.count('href="#glossary"') >= 2
    assert "<strong>own</strong>" in page
