"""TA004 and TA005 with GPU metrics: the figures the GPU's counters measured beside the ones
estimated from names and shapes, each labelled; without metrics, the estimates alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from traceanalyzer import api
from traceanalyzer.config import Settings
from traceanalyzer.rules import Severity
from traceanalyzer.rules.base import Finding
from traceanalyzer.rules.examples import Event, gpu_metrics, launched, step, write_example

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>"
SGEMM = "volta_sgemm_128x64_nn"


def _loop(kernel: str, metrics: dict[str, int] | None) -> list[Event]:
    """Six steps that each queue four 495 µs kernels in 20 µs of host time; the GPU runs them
    back to back, 2 ms a step. GPU metrics over the loop where given."""
    events: list[Event] = []
    corr = 0
    for n in range(1, 7):
        events.append(step(n, 30.0 * n, 20))
        for j in range(4):
            corr += 1
            events += launched(30.0 * n + 1 + j, 2000.0 * n + 5 + 497 * j, 495, corr, kernel)
    if metrics is not None:
        events.append(gpu_metrics(2000, 12_000, clock_mhz=1980, **metrics))
    return events


def _findings(tmp_path: Path, code: str, events: list[Event], name: str) -> list[Finding]:
    path = write_example(events, tmp_path, name)
    return list(api.report(path, settings=Settings(select=(code,))).findings)


def test_memory_bound_with_measured_dram(tmp_path: Path) -> None:
    readings: dict[str, Any] = {"sm_active": 99, "dram_read": 60, "dram_write": 30}
    (f,) = _findings(tmp_path, "TA004", _loop(ADD, readings), "adds")
    assert "measured by the GPU's counters (rank 0 GPU 0): DRAM read 60% + write 30%" in f.message
    assert "= 90% of the peak bandwidth" in f.message
    assert "samples inside the memory-bound kernels" in f.message
    assert f.evidence["bandwidth_source"] == "measured"
    dram = f.evidence["dram_measured"]
    assert dram["read_share"] == pytest.approx(0.6) and dram["write_share"] == pytest.approx(0.3)
    assert dram["samples"] > 50


def test_memory_bound_without_metrics_says_nothing_measured(tmp_path: Path) -> None:
    (f,) = _findings(tmp_path, "TA004", _loop(ADD, None), "adds_plain")
    assert "measured" not in f.message
    assert f.evidence["dram_measured"] is None


def test_off_tensor_cores_confirmed_by_the_counters(tmp_path: Path) -> None:
    (f,) = _findings(tmp_path, "TA005", _loop(SGEMM, {"sm_active": 95, "tensor_active": 0}), "s")
    assert "measured by the GPU's counters: tensor pipes 0% active inside these kernels" in (
        f.message
    )
    assert f.evidence["tensor_active_source"] == "measured"
    assert f.evidence["tensor_active_measured_share"] == 0.0
    assert f.severity is not Severity.INFO


def test_off_tensor_cores_contradicted_by_the_counters(tmp_path: Path) -> None:
    (f,) = _findings(tmp_path, "TA005", _loop(SGEMM, {"sm_active": 95, "tensor_active": 80}), "t")
    assert "they use the Tensor Cores after all" in f.message
    assert f.severity is Severity.INFO
    assert f.evidence["tensor_active_measured_share"] == pytest.approx(0.8)


def test_off_tensor_cores_estimated_without_metrics(tmp_path: Path) -> None:
    (f,) = _findings(tmp_path, "TA005", _loop(SGEMM, None), "u")
    assert f.evidence["tensor_active_source"] == "estimated"
    assert f.evidence["tensor_active_measured_share"] is None
