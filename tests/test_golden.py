"""Golden outputs: the JSON, terminal (plain), Markdown and HTML reports of every sample trace
are kept under tests/golden/ and compared here, so that every change to a report's text or
numbers shows as a reviewed diff.

Regenerate them (then review `git diff tests/golden`) with::

    python -m tests.test_golden
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES
from traceanalyzer import api
from traceanalyzer.render import RENDERERS
from traceanalyzer.report import Report

GOLDEN = REPO / "tests" / "golden"
#: renderer -> file suffix
FORMATS = {"json": "json", "terminal": "txt", "md": "md", "html": "html"}
TRACES = ("train_bf16_healthy.json.gz", "tiny_kernels.json.gz", "sampled_2rank")


def _stem(trace: str) -> str:
    return trace.removesuffix(".json.gz")


@cache
def _report(trace: str) -> Report:
    """The sample's report, read by its path relative to the repository (as the README's
    command names it), so that the outputs do not depend on where the checkout lives."""
    here = Path.cwd()
    os.chdir(REPO)
    try:
        return api.report(Path(SAMPLES.name) / trace)
    finally:
        os.chdir(here)


#: matplotlib's SVG (the HTML page's figures) changes with matplotlib's version, not with the
#: report: the goldens keep the page's text and numbers, with each figure elided.
_SVG = re.compile(r"<svg\b.*?</svg>", re.DOTALL)


def render(trace: str, fmt: str) -> str:
    """One output of one sample, as text (the HTML page's SVG figures elided)."""
    out = io.StringIO()
    columns = os.environ.pop("COLUMNS", None)  # plain text at its default width, everywhere
    try:
        RENDERERS[fmt].render(_report(trace), out)
    finally:
        if columns is not None:
            os.environ["COLUMNS"] = columns
    text = out.getvalue()
    if fmt == "html":
        return _SVG.sub("<svg><!-- figure elided --></svg>", text)
    if fmt == "json":  # floats to 10 significant digits: sums may differ in the last bit
        return json.dumps(_rounded(json.loads(text)), indent=1, ensure_ascii=False) + "\n"
    return text


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _path(trace: str, fmt: str) -> Path:
    return GOLDEN / f"{_stem(trace)}.{FORMATS[fmt]}"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("trace", TRACES)
def test_output_matches_golden(trace: str, fmt: str) -> None:
    golden = _path(trace, fmt)
    assert golden.is_file(), f"{golden} is missing: run `python -m tests.test_golden`"
    expected = golden.read_text(encoding="utf-8")
    got = render(trace, fmt)
    assert got == expected, (
        f"{golden.name} changed: review the diff, then run `python -m tests.test_golden` "
        "and say in the commit which text or numbers changed and why"
    )


def test_every_sample_has_goldens() -> None:
    samples = {p.name for p in SAMPLES.iterdir() if p.name not in ("README.md", "make")}
    assert samples == set(TRACES)


def regenerate() -> list[Path]:
    """Write every golden output; returns the files written."""
    GOLDEN.mkdir(exist_ok=True)
    written = []
    for trace in TRACES:
        for fmt in FORMATS:
            path = _path(trace, fmt)
            path.write_text(render(trace, fmt), encoding="utf-8", newline="")
            written.append(path)
    return written


if __name__ == "__main__":
    for p in regenerate():
        print(p.relative_to(REPO), file=sys.stdout)
