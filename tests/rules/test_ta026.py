"""TA026 (clock below its maximum while busy): the reason it gives by the load, the severity
of power capping under a dense GEMM load, the price against the model done by hand, and its
thresholds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from traceanalyzer import api
from traceanalyzer.config import Settings
from traceanalyzer.rules import Severity
from traceanalyzer.rules.base import Finding
from traceanalyzer.rules.examples import Event, gpu_metrics, launched, step, write_example

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>"


def _loop(clock_mhz: int, kernels: list[tuple[str, float]], **readings: int) -> list[Event]:
    """Six 2 ms steps; in each, `kernels` (name, µs) back to back from the step's start;
    samples over the whole loop."""
    events: list[Event] = []
    corr = 0
    for n in range(1, 7):
        t = 2000.0 * n
        events.append(step(n, t, 2000))
        at = t + 5
        for name, dur in kernels:
            corr += 1
            events += launched(t + 1, at, dur, corr, name)
            at += dur
    return [*events, gpu_metrics(2000, 12_000, clock_mhz=clock_mhz, **readings)]


def _run(tmp_path: Path, events: list[Event], **thresholds: Any) -> tuple[list[Finding], Any]:
    path = write_example(events, tmp_path, "loop")
    settings = Settings(select=("TA026",), thresholds={"TA026": thresholds} if thresholds else {})
    done = api.analyze_path(path, settings=settings)
    return list(done.report.findings), done


def test_power_capping_of_a_dense_gemm_load_is_info(tmp_path: Path) -> None:
    events = _loop(1630, [(GEMM, 1990)], sm_active=89, tensor_active=86, sm_issue=40)
    (f,), done = _run(tmp_path, events)
    assert f.severity is Severity.INFO  # 18 % of the step, but the GPU works as designed
    # unpriced: no fix the user can make changes the power limit (18 % of the step by the
    # model, kept in the evidence)
    assert f.impact_ns is None
    assert f.evidence["clock_cost_ns"] > 0.1 * done.report.verdict["step_ns"]
    assert "1630 MHz of its 1980 MHz maximum (82%)" in f.message
    assert "heavy Tensor Core load (tensor active 86%)" in f.message
    assert "power limit" in f.message and "nvidia-smi -q -d PERFORMANCE" in f.message
    assert f.advice.startswith("Nothing to fix")
    assert done.report.verdict["bound_by"] == "gpu_compute"
    headline = done.report.verdict["headline"]
    assert "fixing TA026" not in headline  # an info leads nothing, but the clock is said
    assert "the power limit of a dense GEMM load (TA026, info)" in headline


def test_few_sms_at_work_is_no_power_limit(tmp_path: Path) -> None:
    (f,), done = _run(tmp_path, _loop(1200, [("one_block_kernel", 1990)], sm_active=1))
    assert "1% of the SMs active this is no power limit" in f.message
    assert "clocks locked below the maximum" in f.message
    assert f.severity is Severity.CRITICAL  # 39 % of the step at 1200 of 1980 MHz
    assert (
        "GPC clock 1200 of 1980 MHz while busy: a thermal limit or clocks locked low "
        "(TA026, critical)" in done.report.verdict["headline"]
    )


def test_price_against_the_model(tmp_path: Path) -> None:
    """A step of 1 ms of compute and 0.9 ms of memory-bound adds at 1500 of 1980 MHz: only
    the compute kernels speed up with the clock."""
    events = _loop(1500, [("compute_kernel", 1000), (ADD, 900)], sm_active=90)
    (f,), done = _run(tmp_path, events)
    dev = done.metrics.devices.summary.row(0, named=True)
    steps = done.metrics.steps.counts.on(0, 0)
    share = 1500 / 1980
    bound = 6 * 1000 / (6 * 1900)  # the compute kernels' share of kernel time
    busy = dev["busy_ns"] // steps
    assert f.impact_ns == pytest.approx(busy * (1 - share) * bound, rel=1e-3)
    assert f.evidence["impact_ceiling_ns"] == pytest.approx(busy * (1 - share), rel=1e-3)
    assert f.evidence["clock_bound_share"] == pytest.approx(bound, rel=1e-3)
    assert f.impact_ns <= f.evidence["impact_ceiling_ns"]


def test_thresholds(tmp_path: Path) -> None:
    events = _loop(1881, [("compute_kernel", 1990)], sm_active=90)  # 95 % of the maximum
    assert _run(tmp_path, events)[0]
    assert not _run(tmp_path, events, min_clock_deficit_share=0.06)[0]
    assert not _run(tmp_path, events, min_sampled_busy_ns=20_000_000)[0]
    heavy = _loop(1500, [(GEMM, 1990)], sm_active=90, tensor_active=60)
    assert _run(tmp_path, heavy)[0][0].severity is Severity.INFO
    assert _run(tmp_path, heavy, heavy_tensor_active_share=0.7)[0][0].severity is not (
        Severity.INFO
    )
