"""Every rule fires on its bad example and stays quiet on its good one; thresholds work;
the committed rule docs are what the generator writes now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import REPO
from traceanalyzer import api
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.gpu.gemm_units import GemmUnits
from traceanalyzer.analyses.timeline.clock import EarlyStarts
from traceanalyzer.config import Settings
from traceanalyzer.docgen import index_markdown, rule_markdown
from traceanalyzer.readers import read
from traceanalyzer.rules import ALL_RULES, BY_CODE, Rule, Severity, run_rules
from traceanalyzer.rules.base import Context, Finding
from traceanalyzer.rules.examples import Event, write_example
from traceanalyzer.rules.rule_pages import rule_page

CODES = [r.code for r in ALL_RULES]


def _findings(tmp_path: Path, code: str, events: list[Event], **thresholds: Any) -> list[Finding]:
    path = write_example(events, tmp_path, f"{code}_example")
    settings = Settings(select=(code,), thresholds={code: thresholds} if thresholds else {})
    return list(api.report(path, settings=settings).findings)


@pytest.mark.parametrize("code", CODES)
def test_bad_example_fires(tmp_path: Path, code: str) -> None:
    rule = BY_CODE[code]
    found = _findings(tmp_path, code, rule.example_bad)
    assert found, f"{code} does not fire on its bad example"
    assert {f.rule for f in found} == {code}
    for f in found:
        assert f.category == rule.category
        assert f.message and f.advice
        assert "impact_share_of_step" in f.evidence


@pytest.mark.parametrize("code", CODES)
def test_good_example_is_quiet(tmp_path: Path, code: str) -> None:
    assert not _findings(tmp_path, code, BY_CODE[code].example_good)


@pytest.mark.parametrize("rule", ALL_RULES, ids=CODES)
def test_threshold_names_carry_units_and_help(rule: type[Rule]) -> None:
    units = (
        "_share",
        "_ns",
        "_bytes",
        "_kernels",
        "_steps",
        "_events",
        "_operators",
        "_per_step",
        "top_",
    )
    for f in rule.threshold_fields():
        assert f.metadata["help"]
        assert any(u in f.name for u in units), f"{rule.code}.{f.name} names no unit"


def test_launch_overhead_threshold_edge(tmp_path: Path) -> None:
    bad = BY_CODE["TA003"].example_bad
    found = _findings(tmp_path, "TA003", bad)
    share = found[0].evidence["launch_overhead_share"]
    assert found[0].severity is Severity.CRITICAL
    assert _findings(tmp_path, "TA003", bad, min_launch_idle_share=share)
    assert not _findings(tmp_path, "TA003", bad, min_launch_idle_share=share + 1e-9)
    assert not _findings(tmp_path, "TA003", bad, min_kernels=121)
    assert _findings(tmp_path, "TA003", bad, min_kernels=120)


def test_pageable_memcpy_threshold_edge(tmp_path: Path) -> None:
    bad = BY_CODE["TA009"].example_bad
    size = 4 << 20
    assert _findings(tmp_path, "TA009", bad, min_copy_bytes=size)
    assert not _findings(tmp_path, "TA009", bad, min_copy_bytes=size + 1)


def test_trace_quality_steps_threshold(tmp_path: Path) -> None:
    good = BY_CODE["TA012"].example_good  # three steps
    assert not _findings(tmp_path, "TA012", good, min_steps=3)
    found = _findings(tmp_path, "TA012", good, min_steps=4)
    assert [f.severity for f in found] == [Severity.INFO]
    assert found[0].impact_ns is None


def test_trace_quality_without_steps(tmp_path: Path) -> None:
    events = [ev for ev in BY_CODE["TA012"].example_good if not ev["name"].startswith("Profiler")]
    found = _findings(tmp_path, "TA012", events)
    assert len(found) == 1 and "no step markers" in found[0].message


def test_odd_shapes_suggests_padding(tmp_path: Path) -> None:
    (f,) = _findings(tmp_path, "TA006", BY_CODE["TA006"].example_bad)
    assert f.impact_ns is None
    assert f.evidence["shapes"][0]["pad"] == "N 50257 -> 50304"


def test_rank_imbalance_names_the_slow_rank(tmp_path: Path) -> None:
    (f,) = _findings(tmp_path, "TA008", BY_CODE["TA008"].example_bad)
    assert f.scope.rank == 1 and f.evidence["slowest_rank"] == 1
    # rank 1's GPU does 200 µs more work: spread evenly over two ranks, a step saves 100 µs
    assert f.impact_ns == 100_000 and f.evidence["cause"] == "gpu"


class _Extended:
    """Metrics with the extra summaries the rules read when `analyze` provides them."""

    def __init__(self, metrics: Any, **extra: Any) -> None:
        self._metrics = metrics
        self.__dict__.update(extra)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._metrics, name)


def _context(tmp_path: Path, events: list[Event], **extra: Any) -> Context:
    timeline = read(write_example(events, tmp_path, "ctx"))
    ctx = api.context(analyze(timeline), timeline.meta)
    return Context(
        metrics=_Extended(ctx.metrics, **extra),  # type: ignore[arg-type]
        meta=ctx.meta,
        what_if=ctx.what_if,
        step_ns=ctx.step_ns,
    )


def test_trace_quality_reports_clock_problems(tmp_path: Path) -> None:
    early = pl.DataFrame(
        {
            "rank": [0],
            "device": [0],
            "linked": [100],
            "early": [5],
            "early_share": [0.05],
            "max_early_ns": [40_000],
        }
    )
    device = {"rank": pl.Int32, "device": pl.Int32}
    ctx = _context(
        tmp_path, BY_CODE["TA012"].example_good, early_starts=EarlyStarts(early.cast(device))
    )
    found = run_rules(ctx, Settings(select=("TA012",)))
    assert [f.severity for f in found] == [Severity.WARNING]
    assert "clocks disagree" in found[0].message
    quiet = Settings(select=("TA012",), thresholds={"TA012": {"max_early_start_share": 0.05}})
    assert not run_rules(ctx, quiet)


def test_no_tensor_cores_reads_the_gemm_summary(tmp_path: Path) -> None:
    summary = pl.DataFrame(
        {
            "rank": [0],
            "device": [0],
            "name": ["volta_sgemm_128x64_nn"],
            "evidence": ["op dtype fp32, no TF32 token"],
            "op_dtype": ["fp32"],
            "count": [1],
            "total_ns": [300_000],
        }
    )
    device = {"rank": pl.Int32, "device": pl.Int32}
    ctx = _context(
        tmp_path, BY_CODE["TA005"].example_bad, gemm_units=GemmUnits(summary.cast(device))
    )
    (f,) = run_rules(ctx, Settings(select=("TA005",)))
    assert f.evidence["kernels"][0]["evidence"] == "op dtype fp32, no TF32 token"
    assert f.evidence["fp32_without_tf32"] is True
    assert "TF32" in f.advice


@pytest.mark.parametrize("rule", ALL_RULES, ids=CODES)
def test_committed_rule_docs_are_generated(rule: type[Rule]) -> None:
    fresh = rule_markdown(rule)
    for page in (
        REPO / "docs" / "rules" / f"{rule.code}.md",
        REPO / "traceanalyzer" / "rules" / "pages" / f"{rule.code}.md",
    ):
        assert page.read_text(encoding="utf-8") == fresh, (
            f"{page.relative_to(REPO)} is stale: run `python -m traceanalyzer.docgen`"
        )
    assert rule_page(rule.code) == fresh  # what the HTML page and `traceanalyzer rule` show


def test_committed_rule_index_is_generated() -> None:
    index = REPO / "docs" / "rules" / "README.md"
    assert index.read_text(encoding="utf-8") == index_markdown(ALL_RULES)


def test_rank_imbalance_priced_by_the_slowest_ranks_excess(tmp_path: Path) -> None:
    """Rank 1 computes 300 µs, rank 0 100 µs: its own time is 200 µs longer, and evening the
    work out gains half of that a step (the mean of two ranks), not the sum of the waits;
    rank 0's exposed all-reduce is mostly waiting, which overlap would not hide."""
    rule = BY_CODE["TA008"]
    path = write_example(rule.example_bad, tmp_path, "imbalance")
    found = api.report(path).findings
    imbalance = next(f for f in found if f.rule == "TA008")
    assert imbalance.impact_ns == 100_000
    assert imbalance.evidence["gap_ns"] == 200_000
    assert found[0].rule == "TA008"
    # overlap could hide the 50 µs transfer, not the 200 µs waiting for rank 1
    (overlap,) = [f for f in found if f.rule == "TA007"]  # one finding for both ranks
    per_rank = {r["rank"]: r["impact_ns"] for r in overlap.evidence.get("per_rank", [])}
    assert per_rank.get(0, overlap.impact_ns) == 50_000


def test_amd_findings_use_amd_words(tmp_path: Path) -> None:
    from traceanalyzer.rules.base import _vendor_words

    assert _vendor_words("GEMMs not on Tensor Cores; NCCL") == "GEMMs not on Matrix Cores; RCCL"


def test_renderers_never_run_the_pipeline() -> None:
    """The HTML page shows each rule's docs from the pages generated ahead of time: importing
    the renderers loads no pipeline (`api`), so no renderer can run an analysis."""
    import subprocess
    import sys

    code = (
        "import sys, traceanalyzer.render, traceanalyzer.render.html;"
        "print('traceanalyzer.api' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_rank_order_by_chance() -> None:
    """TA008's chance of an order: two ranks, 2 of 3 steps: certain; 3 of 3: a quarter."""
    from traceanalyzer.rules.ta008_rank_imbalance import chance_share

    assert chance_share(2, 3, 2) == 1.0
    assert chance_share(2, 3, 3) == pytest.approx(0.25)
    assert chance_share(2, 8, 8) == pytest.approx(2 / 256)
    assert chance_share(4, 4, 4) == pytest.approx(4 / 256)
