"""What a person reads in the terminal and in a ticket: fitted to the width, one entry per
rule across ranks, names shown exactly as written (issue 17)."""

from __future__ import annotations

import io
from functools import cache
from pathlib import Path

import pytest

from tests.builders import kernel, launch, step, write_trace
from tests.conftest import SAMPLES, corpus
from traceanalyzer import api
from traceanalyzer.render import RENDERERS
from traceanalyzer.render.grouping import group_findings, ranks_text
from traceanalyzer.render.terminal import fit
from traceanalyzer.report import Report


@cache
def _report(path: str) -> Report:
    return api.report(path)


def _render(report: Report, fmt: str) -> str:
    out = io.StringIO()
    RENDERERS[fmt].render(report, out)
    return out.getvalue()


def _traces() -> list[str]:
    found = [str(SAMPLES / "sampled_2rank"), str(SAMPLES / "train_bf16_healthy.json.gz")]
    root = corpus()
    if root is not None:
        found.append(str(root / "public" / "param" / "dlrm_8rank_v100"))
    return found


@pytest.mark.parametrize("width", [80, 100, 132])
@pytest.mark.parametrize("trace", _traces())
def test_every_line_fits_the_width(trace: str, width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    text = _render(_report(trace), "terminal")
    wide = [line for line in text.splitlines() if len(line) > width]
    assert wide == []
    # the findings lose nothing to folding (only long kernel names are cut, with "…")
    monkeypatch.setenv("COLUMNS", "100000")
    assert _diagnoses(text).split() == _diagnoses(_render(_report(trace), "terminal")).split()


def _diagnoses(text: str) -> str:
    start = text.index("Diagnoses (most impactful first)")
    return text[start : text.index("\nCritical path", start)]


def test_fit_keeps_items_whole_and_indents_continuations() -> None:
    lines = [
        "verdict  host-bound: " + "word " * 30,
        "      -> " + "advice " * 20,
        "     0   0  ProfilerStep#3   29.24 ms  "
        "host_wait\u00a011.03\u00a0ms, sync\u00a02.3\u00a0µs",
    ]
    out = fit(lines, 40)
    assert all(len(line) <= 40 for line in out)
    assert out[1].startswith(" " * 9) and out[0].startswith("verdict  ")
    assert any("sync 2.3 µs" in line for line in out)  # an item is never split
    assert not any("\u00a0" in line for line in out)


def test_ranks_text() -> None:
    assert ranks_text([3]) == "rank 3"
    assert ranks_text([0, 1]) == "ranks 0, 1"
    assert ranks_text([0, 1, 2, 3, 5, 7, 8, 9]) == "ranks 0-3, 5, 7-9"


@pytest.mark.skipif(corpus() is None, reason="TRACEANALYZER_CORPUS not set")
def test_a_rule_across_eight_ranks_is_one_entry() -> None:
    root = corpus()
    assert root is not None
    report = _report(str(root / "public" / "param" / "dlrm_8rank_v100"))
    (starved,) = [f for f in report.findings if f.rule == "TA001"]  # one cause, one finding
    assert starved.evidence["ranks"] == list(range(8)) and starved.scope.rank is None
    prices = [r["impact_ns"] for r in starved.evidence["per_rank"]]
    assert len(prices) == 8 and starved.impact_ns == max(prices) and min(prices) < max(prices)
    (group,) = [g for g in group_findings(report.findings) if g.lead.rule == "TA001"]
    assert group.ranks == list(range(8))
    for fmt in ("terminal", "md"):
        text = _render(report, fmt)
        assert text.count("TA001") - text.count("fixing TA001") == 1, fmt
        assert "ranks 0-7" in text and "7 other ranks" in text
        head = text[text.index("GPU starved: idle while waiting for the host on") :]
        assert " to " not in head[: head.index("orst: ")]  # one price, not a range


#: Not a C++ signature (a space before its template), so shown whole (render/kernel_names.py)
HOSTILE = "void k <(anonymous namespace)::<unnamed>, a|b>(`x`)"


def test_markdown_shows_names_exactly(tmp_path: Path) -> None:
    events = [
        step(1, 100, 100),
        launch(110, 2, corr=1),
        kernel(150, 30, HOSTILE, corr=1),
        step(2, 200, 100),
        launch(210, 2, corr=2),
        kernel(260, 40, "gemm", corr=2),
    ]
    report = api.report(write_trace(tmp_path / "t.json", events))
    md = _render(report, "md")
    row = next(line for line in md.splitlines() if "<unnamed>" in line)
    # raw <> inside the code span, the pipe escaped for the table, backticks fenced by more
    assert "`` void k <(anonymous namespace)::<unnamed>, a\\|b>(`x`) ``" in row
    assert "&lt;" not in md
    assert "…" not in md  # whole sentences, nothing cut


def test_markdown_running_text_escapes_markup() -> None:
    from traceanalyzer.render.markdown import _text

    assert _text("a*b <x> [y] send_recv __init__") == (
        "a\\*b \\<x\\> \\[y\\] send_recv \\_\\_init\\_\\_"
    )


def test_a_finding_reads_in_short_sentences() -> None:
    """The renderers show a message as sentences: the scope first, each `; ` clause outside
    parentheses its own sentence, a colon inside a clause kept; the JSON keeps the line."""
    from traceanalyzer.render.units import sentences

    line = (
        "rank 0: 64.0 allocator calls per step (32.0 cudaFree; 32.0 cudaMalloc) in 4 of 4 "
        "steps: 6.1 ms of host time; reserved memory falls by 1.45 GiB"
    )
    assert sentences(line) == (
        "Rank 0. 64.0 allocator calls per step (32.0 cudaFree; 32.0 cudaMalloc) in 4 of 4 "
        "steps: 6.1 ms of host time. Reserved memory falls by 1.45 GiB."
    )
    assert sentences("rank 1 GPU 0: idle 5%") == "Rank 1, GPU 0. Idle 5%."
    assert sentences("71% of kernel time is memory-bound; casts add 0%.") == (
        "71% of kernel time is memory-bound. Casts add 0%."
    )
