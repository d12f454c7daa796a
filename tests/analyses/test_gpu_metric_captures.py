"""GPU metrics on the three H200 captures whose truth is known by construction
(tests/data/counters/: a bf16 GEMM loop, memory-bound adds, a one-block Triton kernel, each
with NVTX steps, recorded under `nsys --gpu-metrics-devices=all` at 5 kHz).

Three checks each: the window's figures against a plain loop over the export's own rows
(kernels, memsets and samples read with sqlite3 here, the loop in tests/reference.py); each
steady step's figures against the recording script's facts (`facts_counters.json`: means
over the samples inside each step's GPU window, computed on the device when they were
recorded); and what the workload is by construction (Tensor Active high and the clock below
its maximum under the GEMMs; DRAM at the HBM roof for the adds; one SM of 132 at work for the
one-block kernel), in the figures, the verdict and the findings.
"""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import sqlite3
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.reference import sample_figures
from traceanalyzer import api

DATA = REPO / "tests" / "data" / "counters"
CAPTURES = ("gemm_healthy", "memory_bound_adds", "one_block_kernel")
#: Figure -> the counter the recording script names.
COUNTERS = {
    "sm_active_share": "SMs Active [Throughput %]",
    "tensor_active_share": "Tensor Active [Throughput %]",
    "dram_read_share": "DRAM Read Bandwidth [Throughput %]",
    "dram_write_share": "DRAM Write Bandwidth [Throughput %]",
    "gpc_clock_hz": "GPC Clock Frequency [MHz]",
}


@cache
def _done(name: str) -> api.Done:
    return api.analyze_path(DATA / f"{name}.sqlite.gz")


def _export(name: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{name}.sqlite"
    with gzip.open(DATA / f"{name}.sqlite.gz") as fin, out.open("wb") as fout:
        shutil.copyfileobj(fin, fout)
    return out


def _loop_rows(path: Path) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """The samples (one dict per timestamp, the figures in the schema's units, each period
    up to the next timestamp) and the GPU work (kernels and memsets), row by row."""
    con = sqlite3.connect(path)
    names = dict(con.execute("SELECT metricId, metricName FROM TARGET_INFO_GPU_METRICS"))
    by_name = {v: k for k, v in COUNTERS.items()}
    by_time: dict[int, dict[str, Any]] = {}
    for ts, mid, value in con.execute("SELECT timestamp, metricId, value FROM GPU_METRICS"):
        col = by_name.get(names[mid])
        if col:
            by_time.setdefault(ts, {})[col] = value if col == "gpc_clock_hz" else value / 100
    work = [
        (s, e)
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET")
        if con.execute(f"SELECT count(*) FROM sqlite_master WHERE name = '{table}'").fetchone()[0]
        for s, e in con.execute(f"SELECT start, end FROM {table}")
    ]
    con.close()
    times = sorted(by_time)
    rows = [{"start_ns": t, "end_ns": n, **by_time[t]} for t, n in itertools.pairwise(times)]
    return rows, work


@pytest.mark.parametrize("name", CAPTURES)
def test_window_against_a_loop(tmp_path: Path, name: str) -> None:
    rows, work = _loop_rows(_export(name, tmp_path))
    metrics = _done(name).metrics
    (win,) = metrics.steps.windows.iter_rows(named=True)
    want = sample_figures(rows, work, win["start_ns"], win["end_ns"], list(COUNTERS))
    (dev,) = metrics.gpu_metrics.devices.iter_rows(named=True)
    assert want["busy_samples"] > 500
    for key, value in want.items():
        assert dev[key] == pytest.approx(value, rel=1e-9), key


def _facts(name: str) -> dict[str, dict[str, float]]:
    """Step name -> the recording script's means over the samples in its GPU window."""
    doc = json.loads((DATA / "facts_counters.json").read_text())
    return {
        f["step"]["name"]: f["step"]["metrics_mean_in_window"]
        for f in doc["scenarios"][name]["facts"]
        if isinstance(f.get("step"), dict) and "metrics_mean_in_window" in f["step"]
    }


@pytest.mark.parametrize("name", CAPTURES)
def test_steps_against_the_recording(name: str) -> None:
    facts = _facts(name)
    steps = _done(name).metrics.gpu_metrics.steps
    assert steps.height >= 9
    for row in steps.iter_rows(named=True):
        fact = facts[row["name"]]
        assert row["busy_samples"] >= 0.6 * row["samples"] > 0
        for col, counter in COUNTERS.items():
            got = row[f"busy_{col}"]
            if col == "gpc_clock_hz":
                assert got / 1e6 == pytest.approx(fact[counter], abs=1.0), (row["name"], col)
            else:
                assert got == pytest.approx(fact[counter] / 100, abs=0.003), (row["name"], col)


def test_gemm_loop_tensor_cores_and_a_power_capped_clock() -> None:
    done = _done("gemm_healthy")
    (dev,) = done.metrics.gpu_metrics.devices.iter_rows(named=True)
    assert dev["busy_tensor_active_share"] > 0.9 and dev["busy_sm_active_share"] > 0.9
    assert dev["busy_dram_read_share"] < 0.3
    assert 1_300e6 < dev["busy_gpc_clock_hz"] < 1_400e6  # 1 329-1 387 MHz in steps 1-9
    assert (dev["max_clock_hz"], dev["max_clock_source"]) == (1_980_000_000, "target_info")
    assert dev["busy_clock_share"] == pytest.approx(0.68, abs=0.02)
    inside = done.metrics.gpu_metrics.of_class(0, 0, "gemm")
    assert inside is not None and inside["tensor_active_share"] > 0.9
    clock = [f for f in done.report.findings if f.rule == "TA026"]
    assert len(clock) == 1 and clock[0].severity.value == "info"  # the power limit, by design
    assert "heavy Tensor Core load" in clock[0].message
    verdict = done.report.verdict
    assert verdict is not None and verdict["bound_by"] == "gpu_compute"
    assert (
        "GPU busy 100%, GPC clock 1350 of 1980 MHz while busy: the power limit of a dense "
        "GEMM load (TA026, info)" in verdict["headline"]
    )
    assert not [f for f in done.report.findings if f.rule in ("TA004", "TA005")]


def test_adds_at_the_hbm_roof() -> None:
    done = _done("memory_bound_adds")
    dram = done.metrics.gpu_metrics.dram(0, 0)
    assert dram is not None and dram["where"] == "inside the memory-bound kernels"
    assert dram["read_share"] + dram["write_share"] > 0.88  # 60.6 % + 30.6 %
    assert done.metrics.gpu_metrics.device(0, 0)["busy_tensor_active_share"] == 0  # type: ignore[index]
    verdict = done.report.verdict
    assert verdict is not None and verdict["bound_by"] == "memory"
    assert "of peak DRAM bandwidth (measured: read 61% + write 31%" in verdict["headline"]
    (mem,) = [f for f in done.report.findings if f.rule == "TA004"]
    assert mem.evidence["bandwidth_source"] == "measured"
    assert "DRAM read 61% + write 31% = 91% of the peak" in mem.message
    assert not [f for f in done.report.findings if f.rule == "TA026"]  # 1 978 of 1 980 MHz


def test_one_block_kernel_busy_but_one_sm_at_work() -> None:
    done = _done("one_block_kernel")
    (dev,) = done.metrics.devices.summary.iter_rows(named=True)
    assert dev["busy_ns"] / dev["window_ns"] > 0.99
    g = done.metrics.gpu_metrics.device(0, 0)
    assert g is not None and g["busy_sm_active_share"] <= 0.02  # 1 of 132 SMs, rounded to 1 %
    assert g["busy_clock_share"] == pytest.approx(1.0, abs=0.01)
    headline = done.report.verdict["headline"]  # type: ignore[index]
    assert "GPU busy 100%, but 1% of SMs active" in headline
    assert not [f for f in done.report.findings if f.rule in ("TA026", "TA004")]
