"""The HTML post-mortem: sections, escaping of trace strings, embedded data, no network."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import REPO, SAMPLES, corpus
from tests.render.helpers import (
    GPU_NAME,
    IMG_NAME,
    SCRIPT_NAME,
    evil_trace,
    external_references,
    page_for,
    parse,
    render,
)
from traceanalyzer import api
from traceanalyzer.cli import cli
from traceanalyzer.render import RENDERERS, pick
from traceanalyzer.render.figures import timeline_figure, to_svg
from traceanalyzer.render.markdown_html import markdown_html
from traceanalyzer.report import Report

SECTIONS = [
    "summary",
    "diagnoses",
    "timeline",
    "devices",
    "kernels",
    "duration-histogram",
    "launch-size-histogram",
    "top-kernels",
    "steps",
    "overlap",
    "tensor-cores",
    "copies",
    "idle",
    "critical-path",
    "rules",
    "data",
]
MAX_PAGE_BYTES = 2_000_000
HEALTHY = SAMPLES / "train_bf16_healthy.json.gz"


@pytest.fixture(scope="module")
def evil_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    return page_for(evil_trace(tmp_path_factory.mktemp("evil")))


@pytest.fixture(scope="module")
def healthy() -> tuple[Report, str]:
    rep = api.report(HEALTHY)
    return rep, render(rep)


def _ids(page: str) -> set[str]:
    return {a["id"] or "" for _t, a in parse(page).tags if "id" in a}


def test_registered_by_name_and_suffix() -> None:
    assert RENDERERS["html"].suffix == ".html"
    assert pick(None, "postmortem.html") is RENDERERS["html"]
    assert pick("html", None) is RENDERERS["html"]


def test_sections_findings_and_rule_docs(healthy: tuple[Report, str]) -> None:
    rep, page = healthy
    ids = _ids(page)
    assert set(SECTIONS) <= ids
    findings = rep.findings
    assert findings, "the sample trace has diagnoses"
    for n, f in enumerate(findings, start=1):
        assert f"finding-{n}" in ids
        assert f"rule-{f.rule}" in ids  # its docs are in the page ...
        assert f'href="#rule-{f.rule}"' in page  # ... and the finding links to them
    assert "What it detects" in page and "How to fix" in page
    assert "NVIDIA H100 80GB HBM3" in page and "traceanalyzer 0.1.0" in page


def test_tables_are_static_markup_and_sortable(healthy: tuple[Report, str]) -> None:
    rep, page = healthy
    top = re.search(r'<table class="sortable" id="top-kernels-table">.*?</table>', page, re.S)
    assert top is not None
    assert top.group(0).count("<tr>") == 1 + len(rep.kernels["top"])
    steps = re.search(r'<table class="sortable" id="steps-table">.*?</table>', page, re.S)
    assert steps is not None and "ProfilerStep#3" in steps.group(0)
    assert 'data-sort="' in top.group(0)


def test_figures_are_inline_svg(healthy: tuple[Report, str]) -> None:
    _rep, page = healthy
    assert page.count("<svg") >= 3  # timeline, duration and launch-size histograms
    assert "<?xml" not in page and "<!--" not in page and "<metadata" not in page
    assert "<img" not in page


def test_embedded_json_is_the_json_report(healthy: tuple[Report, str], tmp_path: Path) -> None:
    rep, page = healthy
    data = parse(page).data
    assert "<" not in data and ">" not in data and "&" not in data
    out = tmp_path / "r.json"
    api.write(rep, "json", str(out))
    assert json.loads(data) == json.loads(out.read_text())


def test_trace_strings_are_inert_text(evil_page: str) -> None:
    page = evil_page
    for raw in (SCRIPT_NAME, IMG_NAME, GPU_NAME, "<svg onload"):
        assert raw not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, escaped
    tags = parse(page)
    assert [t for t, _a in tags.tags if t == "script"] == ["script", "script"]  # ours only
    assert not [t for t, _a in tags.tags if t == "img"]
    handlers = [(t, k) for t, a in tags.tags for k in a if k.lower().startswith("on")]
    assert handlers == []
    # The embedded data still carries the names exactly.
    names = {k["name"] for k in json.loads(tags.data)["kernels"]["top"]}
    assert {SCRIPT_NAME, IMG_NAME} <= names


def test_figure_text_is_escaped() -> None:
    bins = [
        {"rank": 0, "device": 0, "bin": 0, "start_ns": 0, "end_ns": 10, "busy_ns": 5,
         "host_wait_ns": 5, "sync_ns": 0, "launch_overhead_ns": 0, "other_ns": 0}
    ]  # fmt: skip
    svg = to_svg(timeline_figure(bins, [(0, 0, SCRIPT_NAME + " $x^2$")], 0))
    assert "<script" not in svg and "&lt;script&gt;" in svg
    assert "$x^2$" in svg  # no mathtext: names with $ are drawn as they are


def test_no_external_references(evil_page: str, healthy: tuple[Report, str]) -> None:
    assert external_references(evil_page) == []
    assert external_references(healthy[1]) == []
    assert re.search(r"https?://(?!www\.w3\.org/)", healthy[1]) is None
    assert "@import" not in healthy[1] and "@font-face" not in healthy[1]


def test_csp_pins_the_one_inline_script(healthy: tuple[Report, str]) -> None:
    page = healthy[1]
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp is not None and "default-src 'none'" in csp.group(1)
    script = re.search(r"<script>(.*?)</script>", page, re.S)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp.group(1)


def test_deterministic(healthy: tuple[Report, str]) -> None:
    rep, page = healthy
    assert render(rep) == page


def test_page_size(healthy: tuple[Report, str]) -> None:
    assert len(healthy[1].encode()) <= MAX_PAGE_BYTES


@pytest.mark.skipif(corpus() is None, reason="TRACEANALYZER_CORPUS not set")
def test_page_size_8_ranks() -> None:
    root = corpus()
    assert root is not None
    job = root / "public" / "param" / "dlrm_8rank_v100"
    if not job.is_dir():
        pytest.skip("dlrm_8rank_v100 not in the corpus")
    page = page_for(job)
    assert len(page.encode()) <= MAX_PAGE_BYTES
    assert "rank 7 · GPU 7" in page and 'id="overlap"' in page
    assert external_references(page) == []


def test_cli_writes_html(tmp_path: Path) -> None:
    out = tmp_path / "postmortem.html"
    result = CliRunner().invoke(cli, ["report", str(evil_trace(tmp_path)), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    other = tmp_path / "page.out"
    result = CliRunner().invoke(
        cli, ["report", str(evil_trace(tmp_path)), "--format", "html", "-o", str(other)]
    )
    assert result.exit_code == 0 and "report-data" in other.read_text(encoding="utf-8")


def test_markdown_docs_are_escaped() -> None:
    html = markdown_html("# T\n\nsee `<b>` and [x](https://e.com)\n\n- a <i>\n")
    assert "<b>" not in html and "&lt;b&gt;" in html and "<code>" in html
    assert "href" not in html and "<li>" in html


def test_roofline_holds_the_memory_bound_operators() -> None:
    """memory_bound (a GPT whose top finding is memory-bound elementwise work): the roofline
    draws the Bandwidth table's operators beside the matrix ones, each at one FLOP per
    element, so its height under the bandwidth's slope is its share of the peak."""
    from traceanalyzer import api
    from traceanalyzer.render.html import _roofline

    rep = api.report(REPO / "tests" / "data" / "gpu" / "memory_bound.json.gz")
    svg = str(_roofline(rep))
    assert "memory-bound operators (1 FLOP per element)" in svg
    assert "matrix, convolution and attention operators" in svg
    rows = [b for b in rep.bandwidth if b["elements"] and b["gbps"] is not None]
    assert rows
    for b in rows:
        x = b["elements"] / b["bytes"]
        y = b["elements"] / b["kernel_ns"] / 1e3  # TFLOP/s
        under_slope = y / (x * b["peak_gbps"] / 1e3)
        assert abs(under_slope - b["share_of_peak"]) < 1e-9
