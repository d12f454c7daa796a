"""The two small analyses written for the rules (not yet wired into `analyze`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from traceanalyzer.analyses.gpu.gemm_units import non_tensor_core_gemms
from traceanalyzer.analyses.timeline.clock import early_starts
from traceanalyzer.readers import read
from traceanalyzer.rules.examples import kernel, launch, launched, step, write_example


def test_early_starts_counts_gpu_work_before_its_launch(tmp_path: Path) -> None:
    events = [
        step(1, 100, 400),
        *launched(110, 120, 50, 1, "gemm"),
        launch(300, 2, 2),
        kernel(290, 10, "late_clock", corr=2),  # 10 µs before its launch
        launch(320, 2, 3),
        kernel(318, 10, "rounding", corr=3),  # 2 µs: within the tolerance
    ]
    timeline = read(write_example(events, tmp_path, "clock"))
    (row,) = early_starts(timeline).to_dicts()
    assert row == {
        "rank": 0,
        "device": 0,
        "linked": 3,
        "early": 1,
        "early_share": 1 / 3,
        "max_early_ns": 10_000,
    }
    assert early_starts(timeline, tolerance_ns=1_000)["early"].item() == 2


def test_non_tensor_core_gemms_keeps_the_top_gemms_off_tensor_cores() -> None:
    kernels = pl.DataFrame(
        {
            "rank": [0, 0, 0, 0, 1],
            "device": [0, 0, 0, 0, 1],
            "name": ["volta_sgemm", "volta_sgemm", "nvjet_x", "add", "gemm_k"],
            "kernel_class": ["gemm", "gemm", "gemm", "memory_bound", "gemm"],
            "verdict": ["no", "no", "tc", "no", "no"],
            "evidence": ["name: sgemm (SIMT)"] * 2 + ["name: nvjet", "class", "op dtype fp32"],
            "op_dtype": [None, None, "half", None, "fp32"],
            "clipped_ns": [100, 50, 500, 70, 30],
        }
    )
    out = non_tensor_core_gemms(kernels, top_n=1)
    assert out.select("rank", "name", "op_dtype", "count", "total_ns").rows() == [
        (0, "volta_sgemm", None, 2, 150),
        (1, "gemm_k", "fp32", 1, 30),
    ]
