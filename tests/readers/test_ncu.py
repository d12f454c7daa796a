"""Nsight Compute exports read (readers/ncu.py): the raw-page CSV and, through a stand-in for
Nsight Compute's `ncu_report` module, `.ncu-rep` reports.

`tests/data/counters/ncu_matmul.csv.gz` is `../shared/traces/h200/ncu_matmul.csv` (its README:
`ncu --csv --page raw -c 4` of a bf16 4096 x 4096 matmul script on an H200: a random fill,
the GEMM, a multiply and an add), gzipped: 566 columns, a units row, thousands separators.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import REPO
from traceanalyzer.errors import ConfigError, TraceFormatError
from traceanalyzer.readers.ncu import read_ncu, unit_scale

SAMPLE = REPO / "tests" / "data" / "counters" / "ncu_matmul.csv.gz"

IDENTITY = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream"]
IDENTITY += ["Block Size", "Grid Size", "Device", "CC"]

#: The counters the reader uses, with the units ncu writes in its base form.
UNITS = {
    "gpu__time_duration.sum": "ns",
    "dram__bytes_read.sum": "byte",
    "dram__bytes_write.sum": "byte",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "%",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "%",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": "%",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "%",
    "sm__warps_active.avg.per_cycle_active": "warp",
    "launch__registers_per_thread": "register/thread",
    "launch__shared_mem_per_block_static": "byte/block",
    "launch__shared_mem_per_block_dynamic": "byte/block",
    "device__attribute_memory_clock_rate": "",
    "device__attribute_global_memory_bus_width": "",
    "device__attribute_display_name": "",
}


def kernel_row(
    name: str,
    *,
    grid: str = "(16384, 1, 1)",
    block: str = "(128, 1, 1)",
    device: int = 0,
    process: int = 4242,
    **metrics: str,
) -> dict[str, str]:
    """One kernel of a hand-made CSV: its identity, and metric values as ncu writes them
    (`"219,456"`); metric names with `__` and `.` are passed as a dict (`**{"gpu__...": v}`)."""
    return {
        "Process ID": str(process),
        "Process Name": "python3.12",
        "Host Name": "host",
        "Kernel Name": name,
        "Context": "1",
        "Stream": "7",
        "Block Size": block,
        "Grid Size": grid,
        "Device": str(device),
        "CC": "9.0",
        **metrics,
    }


def ncu_csv(
    path: Path,
    rows: list[dict[str, str]],
    units: dict[str, str] | None = None,
    *,
    before: str = "",
    units_row: bool = True,
) -> Path:
    """Write a `--page raw` CSV: the header, a units row, one row per kernel (IDs in order),
    every value quoted as ncu writes them; `before`: lines printed before the header."""
    units = UNITS if units is None else units
    metrics = [m for m in units if any(m in r for r in rows)]
    header = [*IDENTITY, *metrics]

    def line(cells: list[str]) -> str:
        return ",".join(json.dumps(c) for c in cells)

    lines = [before.rstrip("\n")] if before else []
    lines.append(line(header))
    if units_row:
        lines.append(line(["" for _ in IDENTITY] + [units[m] for m in metrics]))
    for i, r in enumerate(rows):
        lines.append(line([str(i), *[r.get(h, "") for h in header[1:]]]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_h200_sample() -> None:
    """The four kernels of the shared sample: scaled units, DRAM bytes derived from the
    throughput share (no dram__bytes counters in the default set), named as such."""
    export = read_ncu(SAMPLE)
    k = export.kernels
    assert k.height == 4
    assert k["name"][1] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    gemm = k.row(1, named=True)
    assert gemm["ncu_duration_ns"] == 219_456  # "219,456" ns
    assert gemm["grid"] == "2,66,1" and gemm["block"] == "384,1,1"
    assert gemm["registers_per_thread"] == 168
    assert gemm["shared_mem_bytes"] == 213_188  # static 0 + dynamic 213,188
    assert gemm["sm_throughput_share"] == pytest.approx(0.9046)
    # the MMA types' cycles, not the tensor pipe that also counts the shared pipe
    assert gemm["tensor_pipe_share"] == pytest.approx(0.9046)
    assert k["tensor_pipe_share"][0] == 0.0  # the random fill: 1.27 % on the whole pipe
    assert gemm["achieved_occupancy_share"] == pytest.approx(0.1464)
    assert gemm["warps_active"] == pytest.approx(9.37)
    # peak = 3,201,000 kHz x 6,016 bits / 8 x 2 = 4.814 TB/s; x 10.54 % x 219,456 ns
    peak = 3_201_000e3 * 6016 / 8 * 2
    assert gemm["dram_peak_bytes_per_s"] == pytest.approx(peak)
    assert gemm["dram_bytes"] == round(0.1054 * peak * 219_456e-9)
    assert gemm["dram_source"] == "throughput"
    assert gemm["dram_read_bytes"] is None and gemm["dram_write_bytes"] is None
    assert export.missing == ("dram__bytes_read.sum", "dram__bytes_write.sum")
    assert export.device_name == "NVIDIA H200"
    assert any("derived from the DRAM throughput share" in n for n in export.notes)
    assert k["launch"].to_list() == [0, 1, 2, 3] and k["process"].unique().to_list() == [1167]


def test_units_are_scaled_at_the_boundary(tmp_path: Path) -> None:
    units = dict(UNITS) | {
        "gpu__time_duration.sum": "usecond",
        "dram__bytes_read.sum": "Mbyte",
        "dram__bytes_write.sum": "Kbyte",
        "launch__shared_mem_per_block_dynamic": "Kbyte/block",
    }
    row = kernel_row(
        "k",
        **{
            "gpu__time_duration.sum": "1,234.5",
            "dram__bytes_read.sum": "2.5",
            "dram__bytes_write.sum": "1,500",
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": "50",
            "launch__shared_mem_per_block_dynamic": "48",
        },
    )
    export = read_ncu(ncu_csv(tmp_path / "k.csv", [row], units))
    r = export.kernels.row(0, named=True)
    assert r["ncu_duration_ns"] == 1_234_500
    assert r["dram_read_bytes"] == 2_500_000 and r["dram_write_bytes"] == 1_500_000
    assert r["dram_bytes"] == 4_000_000 and r["dram_source"] == "counters"
    assert r["sm_throughput_share"] == 0.5
    assert r["shared_mem_bytes"] == 48_000


@pytest.mark.parametrize(
    ("unit", "kind", "factor"),
    [
        ("nsecond", "time", 1.0),
        ("msecond", "time", 1e6),
        ("second", "time", 1e9),
        ("Gbyte", "bytes", 1e9),
        ("KiB", "bytes", 1024.0),
        ("byte/block", "bytes", 1.0),
        ("%", "percent", 0.01),
        ("warp", "count", 1.0),
        ("furlong", "time", None),
        ("Mbyte/s", "percent", None),
    ],
)
def test_unit_scale(unit: str, kind: str, factor: float | None) -> None:
    assert unit_scale(unit, kind) == factor


def test_printed_lines_before_the_header_and_gzip(tmp_path: Path) -> None:
    """`ncu --csv ... > out.csv` also captures ncu's `==PROF==` lines and the program's
    prints; they are skipped."""
    row = kernel_row("k", **{"gpu__time_duration.sum": "1,000"})
    path = ncu_csv(
        tmp_path / "k.csv",
        [row],
        before='==PROF== Connected to process 1167\nloss 2.31\n==PROF== Profiling "k": 0%\n',
    )
    assert read_ncu(path).kernels["ncu_duration_ns"].to_list() == [1000]


def test_missing_counters_and_bad_values_are_said_once(tmp_path: Path) -> None:
    """An export made with `--metrics gpu__time_duration.sum` only: every other counter is
    null and named once; a value that is not a number is null in its row, and counted."""
    rows = [
        kernel_row("a", **{"gpu__time_duration.sum": "1,000"}),
        kernel_row("b", **{"gpu__time_duration.sum": "n/a"}),
    ]
    export = read_ncu(ncu_csv(tmp_path / "k.csv", rows))
    k = export.kernels
    assert k["ncu_duration_ns"].to_list() == [1000, None]
    assert k["dram_bytes"].null_count() == 2 and k["dram_source"].null_count() == 2
    assert k["tensor_pipe_share"].null_count() == 2
    assert "dram__bytes_read.sum" in export.missing
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in export.missing
    notes = "\n".join(export.notes)
    assert notes.count("counters missing from the export") == 1
    assert "gpu__time_duration.sum (1)" in notes  # the one `n/a`
    assert "no DRAM bytes" in notes


def test_a_file_cut_off(tmp_path: Path) -> None:
    rows = [kernel_row(n, **{"gpu__time_duration.sum": "1,000"}) for n in ("a", "b")]
    path = ncu_csv(tmp_path / "k.csv", rows)
    text = path.read_text()
    path.write_text(text[: text.rindex('"host"')])  # the last row ends mid-way
    export = read_ncu(path)
    assert export.kernels["name"].to_list() == ["a"]
    assert any("1 row(s) with fewer than the header's" in n for n in export.notes)


def test_a_unit_not_understood_leaves_the_counter_out(tmp_path: Path) -> None:
    units = dict(UNITS) | {"gpu__time_duration.sum": "cycle"}
    row = kernel_row("a", **{"gpu__time_duration.sum": "1,000"})
    export = read_ncu(ncu_csv(tmp_path / "k.csv", [row], units))
    assert export.kernels["ncu_duration_ns"].to_list() == [None]
    assert "gpu__time_duration.sum" in export.missing
    assert any("'cycle'" in n for n in export.notes)


def test_refusals(tmp_path: Path) -> None:
    details = tmp_path / "details.csv"
    details.write_text(
        '"ID","Process ID","Kernel Name","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"\n"0","1","k","Speed Of Light","Duration","usecond","1.5"\n'
    )
    with pytest.raises(TraceFormatError, match="details page") as e:
        read_ncu(details)
    assert e.value.path == str(details) and "--page raw" in e.value.hint
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(TraceFormatError, match="no header row"):
        read_ncu(other)
    with pytest.raises(TraceFormatError, match="no such"):
        read_ncu(tmp_path / "absent.csv")


# --- `.ncu-rep` through a stand-in for Nsight Compute's Python module

#: A stand-in for `extras/python/ncu_report.py` with the API the reader uses (Nsight
#: Compute's Python Report Interface: load_report -> IContext: num_ranges, range_by_idx ->
#: IRange: num_actions, action_by_idx -> IAction: name(base), metric_by_name -> IMetric:
#: value, unit); the "report" it loads is JSON: ranges of actions of {name, metrics}.
FAKE_MODULE = """
import json


class IMetric:
    def __init__(self, value, unit):
        self._value, self._unit = value, unit

    def value(self):
        return self._value

    def unit(self):
        return self._unit


class IAction:
    NameBase_FUNCTION = 0
    NameBase_DEMANGLED = 1

    def __init__(self, data):
        self._data = data

    def name(self, base=NameBase_FUNCTION):
        full = self._data["name"]
        return full if base == IAction.NameBase_DEMANGLED else full.split("<")[0]

    def metric_by_name(self, name):
        got = self._data["metrics"].get(name)
        return None if got is None else IMetric(*got)


class IRange:
    def __init__(self, actions):
        self._actions = actions

    def num_actions(self):
        return len(self._actions)

    def action_by_idx(self, i):
        return IAction(self._actions[i])


class IContext:
    def __init__(self, ranges):
        self._ranges = ranges

    def num_ranges(self):
        return len(self._ranges)

    def range_by_idx(self, i):
        return IRange(self._ranges[i])


def load_report(path):
    with open(path) as fh:
        return IContext(json.load(fh))
"""


def fake_install(root: Path) -> Path:
    """An Nsight Compute "install" whose extras/python holds the stand-in module."""
    folder = root / "nsight-compute" / "extras" / "python"
    folder.mkdir(parents=True)
    (folder / "ncu_report.py").write_text(FAKE_MODULE)
    return root / "nsight-compute"


def fake_report(path: Path, ranges: list[list[dict[str, Any]]]) -> Path:
    path.write_text(json.dumps(ranges))
    return path


def rep_action(name: str, grid: tuple[int, int, int], block: tuple[int, int, int], **m: Any) -> Any:
    """One action: its name and metrics as (value, unit), launch dimensions included."""
    dims = {
        **{f"launch__grid_dim_{a}": (v, "") for a, v in zip("xyz", grid, strict=True)},
        **{f"launch__block_dim_{a}": (v, "") for a, v in zip("xyz", block, strict=True)},
        "launch__device_id": (0, ""),
    }
    return {"name": name, "metrics": {**dims, **m}}


@pytest.fixture
def no_ncu_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """No `ncu_report` imported before, none on the path."""
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)


def test_a_report_through_ncu_report(tmp_path: Path, no_ncu_report: None) -> None:
    install = fake_install(tmp_path)
    gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    add = "void at::vectorized_elementwise_kernel<8, at::CUDAFunctorOnSelf_add<c10::BFloat16>>"
    report = fake_report(
        tmp_path / "k.ncu-rep",
        [
            [
                rep_action(
                    gemm,
                    (2, 66, 1),
                    (384, 1, 1),
                    **{
                        "gpu__time_duration.sum": (219.456, "usecond"),
                        "dram__bytes_read.sum": (67.1, "Mbyte"),
                        "dram__bytes_write.sum": (33554432, "byte"),
                        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": (
                            90.46,
                            "%",
                        ),
                        "launch__registers_per_thread": (168, "register/thread"),
                    },
                )
            ],
            [
                rep_action(
                    add, (16384, 1, 1), (128, 1, 1), **{"gpu__time_duration.sum": (16800, "ns")}
                )
            ],
        ],
    )
    export = read_ncu(report, install)
    k = export.kernels
    assert k["name"].to_list() == [gemm, add]  # the demangled names, not the function's
    assert k["grid"].to_list() == ["2,66,1", "16384,1,1"]
    assert k["ncu_duration_ns"].to_list() == [219_456, 16_800]
    assert k["dram_bytes"][0] == 67_100_000 + 33_554_432
    assert k["tensor_pipe_share"][0] == pytest.approx(0.9046)
    assert k["registers_per_thread"].to_list() == [168, None]
    assert k["launch"].to_list() == [0, 1]
    # the extras/python folder itself will do too
    assert read_ncu(report, install / "extras" / "python").kernels.height == 2


def test_a_report_without_the_module(tmp_path: Path, no_ncu_report: None) -> None:
    report = fake_report(tmp_path / "k.ncu-rep", [[]])
    with pytest.raises(ConfigError, match="ncu_report") as e:
        read_ncu(report)
    assert e.value.path == str(report)
    assert "--csv --page raw" in e.value.hint and "--ncu-path" in e.value.hint
    empty = tmp_path / "not-an-install"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no ncu_report module there") as e:
        read_ncu(report, empty)
    assert "ncu --import k.ncu-rep --csv --page raw > k.csv" in e.value.hint


def test_the_kernels_frame_has_the_declared_schema() -> None:
    from traceanalyzer.model.ncu import NCU_KERNEL_COLUMNS

    frame = read_ncu(SAMPLE).kernels
    assert frame.schema == pl.Schema(NCU_KERNEL_COLUMNS)
