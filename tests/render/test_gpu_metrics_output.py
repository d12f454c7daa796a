"""GPU metrics in the report: `devices[].gpu_metrics` in the JSON, the verdict's words, the
terminal, Markdown and HTML sections; nothing of it for a trace without metrics."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.builders import gpu_metric_rows, kernel, launch, step, with_gpu_metrics, write_trace
from traceanalyzer import api
from traceanalyzer.model import Timeline
from traceanalyzer.readers import read
from traceanalyzer.render.html import HtmlRenderer
from traceanalyzer.render.markdown import MarkdownRenderer
from traceanalyzer.render.terminal import TerminalRenderer
from traceanalyzer.report import Report

ONE_BLOCK = "triton_poi_fused_add_0"


def _busy_trace(tmp_path: Path) -> Timeline:
    """Eight 5 ms steps, each one kernel that holds the GPU for the whole step (a one-block
    kernel: busy 100 % on the timeline)."""
    events: list[dict[str, Any]] = []
    for n in range(1, 9):
        t = 5000.0 * n
        events += [step(n, t, 5000), launch(t + 1, 2, corr=n)]
        events.append(kernel(t + 2, 4997, ONE_BLOCK, corr=n))
    return read(write_trace(tmp_path / "one_block.json", events))


def _report(tmp_path: Path, sm_active: float, **values: Any) -> Report:
    tl = _busy_trace(tmp_path)
    readings: dict[str, Any] = {
        "sm_active_share": sm_active,
        "sm_issue_share": sm_active / 2,
        "tensor_active_share": 0.0,
        "dram_read_share": 0.02,
        "dram_write_share": 0.01,
        "pcie_rx_share": 0.0,
        "pcie_tx_share": 0.01,
        "gpc_clock_hz": 1_980_000_000,
    }
    rows = gpu_metric_rows(0, 50_000_000, **(readings | values))
    return api.run(with_gpu_metrics(tl, rows)).report


def _text(rep: Report, renderer: Any) -> str:
    out = io.StringIO()
    renderer.render(rep, out)
    return out.getvalue()


def test_json_entry(tmp_path: Path) -> None:
    rep = _report(tmp_path, 0.0097)
    doc = json.loads(json.dumps(rep.to_json_dict()))  # plain JSON: no NaN
    (dev,) = doc["devices"]
    g = dev["gpu_metrics"]
    assert g["samples"] == g["busy_samples"] > 200
    assert g["period_ns"] == 100_000 and g["busy_sample_min_share"] == 0.9
    assert g["busy"]["sm_active_share"] == pytest.approx(0.0097)
    assert g["window"]["sm_active_share"] == pytest.approx(0.0097)
    assert g["busy"]["gpc_clock_hz"] == 1_980_000_000
    assert g["busy"]["nvlink_rx_share"] is None  # not sampled: null, never 0
    assert (g["max_clock_hz"], g["max_clock_source"]) == (1_980_000_000, "max_sample")
    assert set(g) >= {"inside", "steps", "busy_clock_share", "busy_min_gpc_clock_hz"}
    assert len(g["steps"]) == len([s for s in doc["steps"] if not s["warmup"]])
    assert all(s["busy"]["sm_active_share"] == pytest.approx(0.0097) for s in g["steps"])
    assert not any(isinstance(v, float) and math.isnan(v) for v in g["busy"].values())


def test_no_metrics_no_entry(tmp_path: Path) -> None:
    rep = api.run(_busy_trace(tmp_path)).report
    assert all("gpu_metrics" not in d for d in rep.to_json_dict()["devices"])
    for renderer in (TerminalRenderer(), MarkdownRenderer()):
        assert "GPU metrics" not in _text(rep, renderer)
    assert 'id="gpu-metrics"' not in _text(rep, HtmlRenderer())  # the glossary names them


def test_verdict_busy_but_few_sms(tmp_path: Path) -> None:
    headline = _report(tmp_path, 0.0097).verdict["headline"]  # type: ignore[index]
    assert "GPU busy 100%, but 0.97% of SMs active" in headline


def test_verdict_quiet_where_the_sms_work(tmp_path: Path) -> None:
    headline = _report(tmp_path, 0.9).verdict["headline"]  # type: ignore[index]
    assert "GPU busy 100%" in headline and "SMs active" not in headline


def test_terminal_and_markdown(tmp_path: Path) -> None:
    rep = _report(tmp_path, 0.0097, gpc_clock_hz=1_600_000_000)
    text = _text(rep, TerminalRenderer())
    assert "GPU metrics while busy" in text
    assert "0.97%" in text and "1600/1600 MHz 100%" in text  # no target info: the max sample
    assert "per steady step:" in text
    md = _text(rep, MarkdownRenderer())
    assert "### GPU metrics while busy" in md and "| 0.97% |" in md


def test_html_section_and_figure(tmp_path: Path) -> None:
    page = _text(_report(tmp_path, 0.0097), HtmlRenderer())
    assert '<a href="#gpu-metrics">GPU metrics</a>' in page
    section = page[page.index('<section id="gpu-metrics">') :]
    section = section[: section.index("</section>")]
    assert "<svg" in section and "0.97%" in section and "Per steady step" in section
