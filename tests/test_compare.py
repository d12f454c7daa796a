"""Comparing runs: numbers against plain subtraction, diagnoses appearing and vanishing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SAMPLES, corpus
from traceanalyzer import api
from traceanalyzer.comparison import compare, load_report
from traceanalyzer.render.compare import render_text


def test_compare_two_samples() -> None:
    a = api.report(SAMPLES / "train_bf16_healthy.json.gz").to_json_dict()
    b = api.report(SAMPLES / "tiny_kernels.json.gz").to_json_dict()
    diff = compare(a, b)
    da, db = a["devices"][0], b["devices"][0]
    idle = diff["metrics"]["idle_share"]
    assert idle["before"] == da["idle_share"] and idle["after"] == db["idle_share"]
    assert idle["change"] == pytest.approx(db["idle_share"] - da["idle_share"])
    assert (
        diff["metrics"]["kernel_ns"]["change"]
        == b["kernels"]["total_ns"] - a["kernels"]["total_ns"]
    )
    rules_a = {d["rule"] for d in a["diagnoses"]}
    rules_b = {d["rule"] for d in b["diagnoses"]}
    assert {x.split()[0] for x in diff["diagnoses_appeared"]} == rules_b - rules_a
    assert {x.split()[0] for x in diff["diagnoses_disappeared"]} == rules_a - rules_b
    top = diff["kernels"][0]
    assert abs(top["change_ns"]) == max(abs(k["change_ns"]) for k in diff["kernels"])
    assert "Kernels whose time changed" in render_text(diff)


def test_compare_reads_reports_and_summary_rows(tmp_path: Path) -> None:
    from traceanalyzer.batch import run_batch, write_summary

    summary = run_batch([str(SAMPLES)], tmp_path / "out", jobs=1)
    table = write_summary(summary, tmp_path / "out", "parquet")
    run = summary.filter(summary["error"].is_null())["run"][0]
    from_row = load_report(f"{table}#{run}")
    from_json = load_report(summary.filter(summary["run"] == run)["report"][0])
    assert from_row == from_json


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            "public/nsys/nsysai_h100x2_train_before.sqlite",
            "public/nsys/nsysai_h100x2_train_after.sqlite",
        ),
        (
            "public/hta/trace_diff_control_a100/control.json.gz",
            "public/hta/trace_diff_test_v100/test.json.gz",
        ),
    ],
)
def test_compare_public_pairs(before: str, after: str) -> None:
    root = corpus()
    if root is None:
        pytest.skip("TRACEANALYZER_CORPUS is not set")
    a = load_report(str(root / before))
    b = load_report(str(root / after))
    diff = compare(a, b)
    assert diff["metrics"]["window_ns"]["before"] == sum(d["window_ns"] for d in a["devices"])
    assert diff["metrics"]["window_ns"]["after"] == sum(d["window_ns"] for d in b["devices"])
    assert diff["kernels"], "some kernel time must change between two different runs"


def test_compare_html_is_self_contained_and_escaped(tmp_path: Path) -> None:
    import json
    import re

    from tests.builders import kernel, write_trace
    from traceanalyzer.render.compare import render_html

    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    a = api.report(write_trace(tmp_path / "a.json", [kernel(10, 5, evil)])).to_json_dict()
    b = api.report(write_trace(tmp_path / "b.json", [kernel(10, 9, evil)])).to_json_dict()
    page = render_html(compare(a, b))
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not re.search(
        r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//""", page
    )
    data = re.search(
        r'<script type="application/json" id="compare-data">(.*?)</script>', page, re.S
    )
    assert data and json.loads(data.group(1))["kernels"][0]["name"] == evil


def _doc(
    step_ns: int, idle: float, tc: float, diagnoses: list[dict[str, str]]
) -> dict[str, object]:
    """A minimal report: one device, one analysed step of `step_ns`."""
    return {
        "source": {"path": "x"},
        "devices": [
            {
                "window_ns": step_ns,
                "busy_ns": step_ns - int(step_ns * idle),
                "idle_ns": int(step_ns * idle),
                "idle_by_cause": {
                    "host_wait": int(step_ns * idle),
                    "sync": 0,
                    "launch_overhead": 0,
                    "other": 0,
                },
                "tensor_core": {"gemm_ns": 1000, "tc_ns": int(1000 * tc)},
                "comm_ns": 0,
                "exposed_comm_ns": 0,
            }
        ],
        "critical_path": [{"steps": 1, "step_ns": step_ns}],
        "kernels": {"count": 10, "total_ns": 1_000_000, "top": []},
        "diagnoses": diagnoses,
    }


def test_compare_reads_like_a_change_review() -> None:
    starved = {"rule": "TA001", "title": "GPU starved", "severity": "warning"}
    worse = {**starved, "severity": "critical"}
    diff = compare(
        _doc(20_000_000, 0.40, 0.5, [starved]), _doc(30_000_000, 0.405, 1.0, [worse, starved])
    )
    m = diff["metrics"]
    assert m["step_ns"]["verdict"] == "worse" and m["step_ns"]["ratio"] == pytest.approx(1.5)
    assert m["tc_share_of_gemm"]["verdict"] == "better"  # higher is better
    assert m["idle_share"]["verdict"] == "same"  # +0.5 pp: within noise
    assert m["window_ns"]["verdict"] == "changed"  # neither better nor worse
    assert diff["severity_changed"] == [
        {"diagnosis": "TA001 GPU starved", "before": "warning", "after": "critical"}
    ]
    text = render_text(diff)
    assert text.index("Worse") < text.index("Better") < text.index("Within noise")
    assert "Step time" in text and "+10.00 ms (1.50x)" in text and "+50.0 pp" in text
    assert "severity: TA001 GPU starved: warning -> critical" in text
    assert "step_ns" not in text  # labels, not field names
    from traceanalyzer.render.compare import render_html

    page = render_html(diff)
    assert '<figure id="step-chart"><svg' in page and 'tbody id="worse"' in page
