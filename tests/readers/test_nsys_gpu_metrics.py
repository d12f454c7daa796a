"""Nsight GPU metrics (`--gpu-metrics-devices`): the samples a reader puts on the timeline.

A hand-written export (tests/data/nsys/gpu_metrics.sql) covers the format's traps: GPUs told
apart by the typeId's low byte and mapped to CUDA ordinals, a GPU sampled that ran no work,
the clock in Hz under a name that says MHz (and an older set in MHz), integer percentages,
negative timestamps, a hole in the sampling, several NVLink counters in one column, a value
out of range, a metric set without Tensor Active. The shared H200 capture (when
TRACEANALYZER_CORPUS is set) is checked against a plain loop over its rows.
"""

from __future__ import annotations

import gzip
import itertools
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import corpus
from tests.readers.test_nsys_sqlite import nsys_db_from_sql
from traceanalyzer.model import GPU_METRIC_SCHEMA, GPU_METRIC_SHARES
from traceanalyzer.readers import read
from traceanalyzer.readers.nsys_gpu_metrics import METRIC_NAMES, column_of
from traceanalyzer.readers.nsys_sqlite import NsysSqliteReader

READER = NsysSqliteReader()


def _samples(tl_metrics: pl.DataFrame, device: int) -> list[dict[str, object]]:
    """The device's samples in time order, shares rounded to 9 places (95 / 100 != 0.95)."""
    rows = tl_metrics.filter(pl.col("device") == device).sort("start_ns").to_dicts()
    return [{k: round(v, 9) if isinstance(v, float) else v for k, v in r.items()} for r in rows]


def test_samples_per_device(tmp_path: Path) -> None:
    tl = READER.read(nsys_db_from_sql("gpu_metrics", tmp_path))
    m = tl.gpu_metrics
    assert m.schema == GPU_METRIC_SCHEMA
    assert sorted(set(m["device"].to_list())) == [0, 1]  # GPU id 2 ran nothing: left out
    d0 = _samples(m, 0)  # GPU id 1 (TARGET_INFO_CUDA_DEVICE), clock in Hz
    assert [s["start_ns"] for s in d0] == [-100_000, 0, 100_000, 200_000]
    assert [s["end_ns"] for s in d0] == [0, 100_000, 200_000, 300_000]
    assert [s["gpc_clock_hz"] for s in d0] == [1_980_000_000, 1_500_000_000, 1_600_000_000,
                                                1_700_000_000]  # fmt: skip
    assert [s["sm_active_share"] for s in d0] == [0.0, 0.9, 0.95, None]  # 101 %: unknown
    assert [s["tensor_active_share"] for s in d0] == [0.0, 0.8, 0.85, 0.7]
    assert [s["dram_read_share"] for s in d0] == [0.0, 0.3, 0.4, 0.35]
    # requests + responses of user data; the protocol counter is not read; none: unknown
    assert [s["nvlink_rx_share"] for s in d0] == [0.15, 0.03, 0.03, None]
    assert all(s["pcie_rx_share"] is None for s in d0)  # not in the metric set
    d1 = _samples(m, 1)  # GPU id 0: "SM Active", the clock in MHz, a hole after 200 us
    assert [s["gpc_clock_hz"] for s in d1] == [1_410_000_000, 1_200_000_000, 1_300_000_000,
                                                1_410_000_000]  # fmt: skip
    assert [s["sm_active_share"] for s in d1] == [0.5, 0.55, 0.45, 0.0]
    assert [s["end_ns"] for s in d1] == [100_000, 200_000, 300_000, 700_000]
    assert all(s["tensor_active_share"] is None for s in d1)
    assert {d.device: d.max_clock_hz for d in tl.meta.devices} == {0: 1_980_000_000,
                                                                   1: 1_410_000_000}  # fmt: skip


def test_problems_are_noted_once(tmp_path: Path) -> None:
    notes = [n for n in READER.read(nsys_db_from_sql("gpu_metrics", tmp_path)).meta.quality.notes]
    metric_notes = [n for n in notes if n.startswith("GPU metrics:")]
    assert len(metric_notes) == 2, metric_notes
    assert "rank 0 GPU 1 has no Tensor Active" in metric_notes[0]
    assert "1 counter value(s) out of range" in metric_notes[1]


def test_a_capture_without_metrics_says_nothing(tmp_path: Path) -> None:
    tl = READER.read(nsys_db_from_sql("env_rank", tmp_path))
    assert tl.gpu_metrics.height == 0 and tl.gpu_metrics.schema == GPU_METRIC_SCHEMA
    assert not [n for n in tl.meta.quality.notes if "GPU metrics" in n]


def test_a_device_without_samples_is_noted(tmp_path: Path) -> None:
    path = nsys_db_from_sql(
        "gpu_metrics", tmp_path, "DELETE FROM GPU_METRICS WHERE typeId = 281479271677952"
    )
    tl = READER.read(path)
    assert sorted(set(tl.gpu_metrics["device"].to_list())) == [0]
    (note,) = [n for n in tl.meta.quality.notes if "has no samples" in n]
    assert "rank 0 GPU 1 ran GPU work but has no samples" in note


def test_an_empty_table_is_noted(tmp_path: Path) -> None:
    tl = READER.read(nsys_db_from_sql("gpu_metrics", tmp_path, "DELETE FROM GPU_METRICS"))
    assert tl.gpu_metrics.height == 0
    assert [n for n in tl.meta.quality.notes if "holds no samples" in n]


def test_no_names_no_figures(tmp_path: Path) -> None:
    path = nsys_db_from_sql("gpu_metrics", tmp_path, "DROP TABLE TARGET_INFO_GPU_METRICS")
    tl = READER.read(path)
    assert tl.gpu_metrics.height == 0
    assert [n for n in tl.meta.quality.notes if "no TARGET_INFO_GPU_METRICS" in n]


def test_an_unknown_layout_is_noted_not_refused(tmp_path: Path) -> None:
    """A names table without typeId (a layout the reader does not know): the trace is read,
    its metrics are not, and a note says why."""
    path = nsys_db_from_sql(
        "gpu_metrics",
        tmp_path,
        "DROP TABLE TARGET_INFO_GPU_METRICS",
        "CREATE TABLE TARGET_INFO_GPU_METRICS (metricId INTEGER, metricName TEXT)",
    )
    tl = READER.read(path)
    assert tl.gpu_metrics.height == 0 and tl.events.height > 0
    (note,) = [n for n in tl.meta.quality.notes if "GPU metrics" in n]
    assert "TARGET_INFO_GPU_METRICS.typeId" in note


def test_real_values_are_read(tmp_path: Path) -> None:
    path = nsys_db_from_sql(
        "gpu_metrics", tmp_path, "UPDATE GPU_METRICS SET value = value + 0.4 WHERE metricId = 1"
    )
    d0 = _samples(READER.read(path).gpu_metrics, 0)
    assert [s["sm_active_share"] for s in d0] == [0.0, 0.9, 0.95, None]


@pytest.mark.parametrize(
    ("name", "column"),
    [
        ("GPC Clock Frequency [MHz]", "gpc_clock_hz"),
        ("SMs Active [Throughput %]", "sm_active_share"),
        ("SM Active", "sm_active_share"),
        ("SM Issue [Throughput %]", "sm_issue_share"),
        ("Tensor Active [Throughput %]", "tensor_active_share"),
        ("Tensor Active / FP16 Active [Throughput %]", "tensor_active_share"),
        ("DRAM Write Bandwidth [Throughput %]", "dram_write_share"),
        ("PCIe TX Throughput [Throughput %]", "pcie_tx_share"),
        ("NVLink TX Responses User Data [Throughput %]", "nvlink_tx_share"),
        ("NVLink TX Responses Protocol Data [Throughput %]", None),
        ("SYS Clock Frequency [MHz]", None),
        ("Compute Warps in Flight [Throughput %]", None),
        ("Unallocated Warps in Active SMs [Throughput %]", None),
    ],
)
def test_counter_names(name: str, column: str | None) -> None:
    assert column_of(name) == column


def test_every_column_has_its_counters() -> None:
    assert set(METRIC_NAMES) == {"gpc_clock_hz", *GPU_METRIC_SHARES}


# ------------------------------------------------------------------ the shared H200 capture


def _h200_capture(tmp_path: Path) -> Path:
    root = corpus()
    src = root / "h200" / "nsys_gpu_metrics_matmul.sqlite.gz" if root else None
    if src is None or not src.is_file():
        pytest.skip("the shared corpus (TRACEANALYZER_CORPUS) is not here")
    out = tmp_path / "gm.sqlite"
    with gzip.open(src) as fin, out.open("wb") as fout:
        shutil.copyfileobj(fin, fout)
    return out


def test_h200_capture_against_a_plain_loop(tmp_path: Path) -> None:
    """Every sample of the capture, read by the reader, against the rows taken one by one."""
    path = _h200_capture(tmp_path)
    m = read(path).gpu_metrics
    con = sqlite3.connect(path)
    names = {mid: name for mid, name in con.execute("SELECT metricId, metricName FROM "
                                                    "TARGET_INFO_GPU_METRICS")}  # fmt: skip
    wanted = {"SMs Active [Throughput %]": "sm_active_share",
              "Tensor Active [Throughput %]": "tensor_active_share",
              "DRAM Read Bandwidth [Throughput %]": "dram_read_share",
              "GPC Clock Frequency [MHz]": "gpc_clock_hz"}  # fmt: skip
    by_time: dict[int, dict[str, float]] = defaultdict(dict)
    for ts, mid, value in con.execute("SELECT timestamp, metricId, value FROM GPU_METRICS"):
        col = wanted.get(names[mid])
        if col:
            by_time[ts][col] = value if col == "gpc_clock_hz" else value / 100
    con.close()
    assert m.height == len(by_time) == 46_029
    times = sorted(by_time)
    assert m["start_ns"].to_list() == times and times[0] < 0  # sampling starts before zero
    for col in wanted.values():
        expected = [by_time[t][col] for t in times]
        assert m[col].to_list() == pytest.approx(expected), col
    assert max(by_time[t]["gpc_clock_hz"] for t in times) == 1_980_053_750  # Hz, not MHz
    spacing = sorted(b - a for a, b in itertools.pairwise(times))
    assert spacing[len(spacing) // 2] == 100_000  # 10 kHz
    assert read(path).meta.devices[0].max_clock_hz == 1_980_000_000
