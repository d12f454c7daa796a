"""GPU metrics per device, step and class of kernel (analyses/counters/gpu_metrics.py),
against a plain loop over the samples (tests/reference.py: sample_figures).

A small trace of steps, each a GEMM and an elementwise kernel, with random samples every
100 µs; and, when TRACEANALYZER_CORPUS is set, the shared H200 capture, whose kernels and
samples the loop reads straight from the SQLite file.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import kernel, launch, step, write_trace
from tests.conftest import corpus
from tests.reference import sample_figures
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.counters.gpu_metrics import CLASS_GROUPS, FIGURE_BINS, FIGURES
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.model import GPU_METRIC_SCHEMA, Timeline
from traceanalyzer.readers import read

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>"
PERIOD_NS = 100_000


def _trace(tmp_path: Path) -> Timeline:
    """Six steps of 1 ms; in each a 500 µs GEMM and a 300 µs add (with 50 µs and 100 µs
    gaps), launched from the step."""
    events: list[dict[str, Any]] = []
    for n in range(1, 7):
        t = 1000.0 * n
        events += [
            step(n, t, 1000),
            launch(t + 5, 2, corr=2 * n),
            launch(t + 10, 2, corr=2 * n + 1),
        ]
        events += [kernel(t + 50, 500, GEMM, corr=2 * n), kernel(t + 600, 300, ADD, corr=2 * n + 1)]
    return read(write_trace(tmp_path / "t.json", events))


def _samples(seed: int, first_ns: int, last_ns: int) -> list[dict[str, Any]]:
    """A sample every 100 µs with random readings (integer percents, as Nsight's), one
    column never sampled and one sometimes unknown."""
    rng = random.Random(seed)
    rows = []
    for start in range(first_ns, last_ns, PERIOD_NS):
        row: dict[str, Any] = {"rank": 0, "device": 0, "start_ns": start,
                               "end_ns": start + PERIOD_NS}  # fmt: skip
        row["gpc_clock_hz"] = rng.randrange(1_200, 1_981) * 1_000_000
        for c in FIGURES[1:]:
            row[c] = rng.randrange(0, 101) / 100
        row["pcie_rx_share"] = None  # not in the metric set
        if rng.random() < 0.2:
            row["dram_write_share"] = None  # a reading out of range
        rows.append(row)
    return rows


def _with_samples(tl: Timeline, rows: list[dict[str, Any]]) -> Timeline:
    frame = pl.DataFrame(rows, schema=GPU_METRIC_SCHEMA, orient="row")
    return dataclasses.replace(tl, gpu_metrics=frame).validate()


def _work(tl: Timeline, names: tuple[str, ...] | None = None) -> list[tuple[int, int]]:
    work = tl.gpu_work().collect()
    if names is not None:
        work = work.filter(pl.col("name").cast(pl.String).is_in(names))
    return list(work.select("start_ns", "end_ns").iter_rows())


def _check(row: dict[str, Any], expected: dict[str, Any]) -> None:
    for key, value in expected.items():
        if value is None:
            assert row[key] is None, key
        else:
            assert row[key] == pytest.approx(value, rel=1e-12), key


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_window_steps_and_classes_against_a_loop(tmp_path: Path, seed: int) -> None:
    tl = _trace(tmp_path)
    rows = _samples(seed, 500_000, 7_600_000)
    m = analyze(_with_samples(tl, rows))
    gm = m.gpu_metrics
    cols = list(FIGURES)
    (win,) = m.steps.windows.iter_rows(named=True)
    (dev,) = gm.devices.iter_rows(named=True)
    want = sample_figures(rows, _work(tl), win["start_ns"], win["end_ns"], cols)
    assert want["samples"] > 20 and 0 < want["busy_samples"] < want["samples"]
    _check(dev, want)
    assert dev["pcie_rx_share"] is None and dev["busy_pcie_rx_share"] is None  # never 0
    assert dev["period_ns"] == PERIOD_NS
    assert dev["max_clock_source"] == "max_sample"  # a Chrome trace names no clock
    assert dev["max_clock_hz"] == max(r["gpc_clock_hz"] for r in rows)
    assert dev["busy_clock_share"] == pytest.approx(dev["busy_gpc_clock_hz"] / dev["max_clock_hz"])
    assert m.steps.steady.height >= 4
    for s in m.steps.steady.iter_rows(named=True):
        got = gm.steps.filter(pl.col("step") == s["step"]).row(0, named=True)
        _check(got, sample_figures(rows, _work(tl), s["start_ns"], s["end_ns"], cols))
        assert (got["name"], got["start_ns"], got["end_ns"]) == (
            s["name"], s["start_ns"], s["end_ns"]
        )  # fmt: skip
    for group, names in (("gemm", (GEMM,)), ("memory_bound", (ADD,))):
        assert group in CLASS_GROUPS
        inside = sample_figures(rows, _work(tl, names), win["start_ns"], win["end_ns"], cols)
        got = gm.of_class(0, 0, group)
        assert got is not None and got["samples"] == inside["busy_samples"] > 0
        _check(got, {c: inside[f"busy_{c}"] for c in cols})


def test_series_bins_hold_the_window(tmp_path: Path) -> None:
    tl = _trace(tmp_path)
    m = analyze(_with_samples(tl, _samples(7, 0, 8_000_000)))
    series = m.gpu_metrics.series
    (win,) = m.steps.windows.iter_rows(named=True)
    (dev,) = m.devices.summary.iter_rows(named=True)
    assert 0 < series.height <= FIGURE_BINS
    assert series["start_ns"].min() == win["start_ns"]
    assert series["end_ns"].max() <= win["end_ns"]
    busy = (series["busy_share"] * (series["end_ns"] - series["start_ns"])).sum()
    assert busy == pytest.approx(dev["busy_ns"], rel=0.01)


def test_no_samples_no_figures(tmp_path: Path) -> None:
    m = analyze(_trace(tmp_path))
    assert all(f.height == 0 for f in dataclasses.astuple(m.gpu_metrics))
    assert m.gpu_metrics.device(0, 0) is None


def test_metrics_record_declares_the_frames() -> None:
    from traceanalyzer.analyses.metrics import FRAME_SCHEMAS

    assert {k for k in FRAME_SCHEMAS if k.startswith("gpu_metrics.")} == {
        "gpu_metrics.devices", "gpu_metrics.steps", "gpu_metrics.classes", "gpu_metrics.series"
    }  # fmt: skip
    assert "gpu_metrics" in Metrics.__dataclass_fields__


# ------------------------------------------------------------------ the shared H200 capture


def test_h200_capture_against_a_loop(tmp_path: Path) -> None:
    """The capture has no step markers but its kernels repeat: its window is its steady
    iterations'. The loop reads the kernels, memsets and samples from the file itself."""
    root = corpus()
    src = root / "h200" / "nsys_gpu_metrics_matmul.sqlite.gz" if root else None
    if src is None or not src.is_file():
        pytest.skip("the shared corpus (TRACEANALYZER_CORPUS) is not here")
    path = tmp_path / "gm.sqlite"
    with gzip.open(src) as fin, path.open("wb") as fout:
        shutil.copyfileobj(fin, fout)
    # its kernels repeat (a memset, a GEMM and three elementwise kernels, three times): they
    # are its iterations, the cold first (172 ms of cuBLAS's start-up) left out
    m = analyze(read(path))
    assert m.basis == "iterations" and m.steps.excluded["step"].to_list() == [1]
    con = sqlite3.connect(path)
    work = [
        (s, e)
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET")
        for s, e in con.execute(f"SELECT start, end FROM {table}")
    ]
    names = dict(con.execute("SELECT metricId, metricName FROM TARGET_INFO_GPU_METRICS"))
    cols = {"SMs Active [Throughput %]": "sm_active_share",
            "Tensor Active [Throughput %]": "tensor_active_share",
            "DRAM Read Bandwidth [Throughput %]": "dram_read_share",
            "GPC Clock Frequency [MHz]": "gpc_clock_hz"}  # fmt: skip
    by_time: dict[int, dict[str, Any]] = {}
    for ts, mid, value in con.execute("SELECT timestamp, metricId, value FROM GPU_METRICS"):
        col = cols.get(names[mid])
        if col:
            by_time.setdefault(ts, {"start_ns": ts})[col] = (
                value if col == "gpc_clock_hz" else value / 100
            )
    gemms = [
        (s, e)
        for s, e, n in con.execute(
            "SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName"
        )
        if n.startswith("nvjet")
    ]
    con.close()
    times = sorted(by_time)
    rows = [dict(by_time[t], end_ns=n) for t, n in itertools.pairwise(times)]
    (dev,) = m.gpu_metrics.devices.iter_rows(named=True)
    (window,) = m.devices.rows()
    lo, hi = window["start_ns"], window["end_ns"]
    assert lo <= min(s for s, e in work if s >= lo) and hi == max(e for _, e in work)
    want = sample_figures(rows, work, lo, hi, list(cols.values()))
    _check(dev, want)
    # the figures this capture gives: seven samples in the two steady iterations, two of
    # them inside their two 175 µs GEMMs
    assert (want["samples"], want["busy_samples"]) == (7, 2)
    assert dev["busy_sm_active_share"] == pytest.approx(0.96, abs=1e-4)
    assert dev["busy_tensor_active_share"] == pytest.approx(0.875, abs=1e-4)
    assert dev["busy_gpc_clock_hz"] / 1e6 == pytest.approx(1597.7, abs=0.1)
    assert (dev["max_clock_hz"], dev["max_clock_source"]) == (1_980_000_000, "target_info")
    inside = sample_figures(rows, gemms, lo, hi, list(cols.values()))
    got = m.gpu_metrics.of_class(0, 0, "gemm")
    assert got is not None and got["samples"] == inside["busy_samples"] == 2
    assert m.gpu_metrics.of_class(0, 0, "memory_bound") is None  # 16 µs kernels: no sample
