"""Nsight Compute's kernels joined to a trace's (analyses/counters/ncu_join.py): matched by
name, launch shape and launch order, the trace's durations kept, ncu's DRAM bytes in the
bandwidth table and the roofline, its Tensor Core pipe in the Tensor Core section.

The traces are hand-made Kineto traces of the script the shared ncu sample profiled
(`a = randn(4096, 4096, bf16)`, then `b = a @ a; c = (b * 2 + 1).relu()` per step), with
the kernel names CUPTI writes; the exports are that sample (tests/readers/test_ncu.py) and
small hand-made CSVs.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import HEADER, cpu_op, kernel, launch, step, write_trace
from tests.readers.test_ncu import SAMPLE, kernel_row, ncu_csv
from traceanalyzer import api
from traceanalyzer.analyses.counters.ncu_join import (
    MIN_NAME_OVERLAP_SHARE,
    MismatchedExportError,
    name_keys,
)

#: The kernels as CUPTI (Kineto) names them; ncu's demangler writes them otherwise.
FILL = (
    "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, "
    "4, at::native::templates::cuda::normal_and_transform<c10::BFloat16, float, "
    "at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>"
    "(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()()"
    " const::{lambda()#4}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, "
    "at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>"
    "(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()()"
    " const::{lambda()#4}::operator()() const::{lambda(float)#1})::"
    "{lambda(curandStatePhilox4_32_10*)#2}>(long, at::PhiloxCudaState, float, float)"
)
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
MUL = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16,"
    " c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
    "std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctorOnSelf_add<"
    "c10::BFloat16>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<"
    "c10::BFloat16>, std::array<char*, 2ul>)"
)
RELU = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::"
    "clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}::"
    "operator()() const::{lambda()#14}::operator()() const::{lambda(c10::BFloat16)#1}, "
    "std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::"
    "clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}::"
    "operator()() const::{lambda()#14}::operator()() const::{lambda(c10::BFloat16)#1}, "
    "std::array<char*, 2ul>)"
)
H200: dict[str, Any] = {
    **HEADER,
    "deviceProperties": [
        {
            **HEADER["deviceProperties"][0],
            "name": "NVIDIA H200",
            "totalGlobalMem": 150_110_011_392,
        }
    ],
}
M = [4096, 4096]
BF16 = "c10::BFloat16"
ELEMENTWISE = ([16384, 1, 1], [128, 1, 1])
#: (operator, kernel, µs, input dims, input types, grid and block) of one step.
STEP: list[tuple[str, str, float, list[Any], list[str], tuple[list[int], list[int]]]] = [
    ("aten::mm", GEMM, 200, [M, M], [BF16, BF16], ([2, 66, 1], [384, 1, 1])),
    ("aten::mul", MUL, 16, [M, []], [BF16, "Scalar"], ELEMENTWISE),
    ("aten::add", ADD, 16, [M, [], []], [BF16, "Scalar", "Scalar"], ELEMENTWISE),
    ("aten::relu", RELU, 16, [M], [BF16], ELEMENTWISE),
]
FILL_OP = (
    "aten::normal_",
    FILL,
    56,
    [M, [], []],
    [BF16, "Scalar", "Scalar"],
    ([1056, 1, 1], [256, 1, 1]),
)


def matmul_trace(
    path: Path,
    *,
    steps: int = 3,
    markers: bool = True,
    fill: bool = True,
    ops: list[Any] | None = None,
) -> Path:
    """The script's trace: the random fill, then `steps` iterations of `ops` (STEP), each a
    `ProfilerStep#N` where `markers`."""
    events: list[dict[str, Any]] = []
    corr = 1

    def op(ts: float, spec: Any) -> None:
        nonlocal corr
        name, k, dur, dims, types, (grid, block) = spec
        args = {"External id": corr, "Input Dims": dims, "Input type": types}
        events.append(cpu_op(ts, 30, name, **args))
        events.append(launch(ts + 2, 3, corr=corr))
        events.append(kernel(ts + 10, dur, k, corr=corr, grid=grid, block=block))
        corr += 1

    if fill:
        op(10, FILL_OP)
    for s in range(steps):
        t0 = 100 + 400 * s
        if markers:
            events.append(step(s + 1, t0, 390))
        for j, spec in enumerate(ops or STEP):
            op(t0 + 5 + 60 * j + (150 if j else 0), spec)
    return write_trace(path, events, header=H200)


def sample_bytes() -> list[int]:
    """The DRAM bytes of each kernel of the shared sample, by a plain loop over its rows: the
    DRAM throughput share x the peak (memory clock x bus width x 2, double data rate) x ncu's
    duration (the export has no dram__bytes counters)."""
    text = gzip.decompress(SAMPLE.read_bytes()).decode()
    rows = list(csv.DictReader(io.StringIO(text)))[1:]  # the units row

    def num(text: str) -> float:
        return float(text.replace(",", ""))

    out = []
    for r in rows:
        peak = num(r["device__attribute_memory_clock_rate"]) * 1e3
        peak *= num(r["device__attribute_global_memory_bus_width"]) / 8 * 2
        share = num(r["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]) / 100
        out.append(round(share * peak * num(r["gpu__time_duration.sum"]) * 1e-9))
    return out


def test_ncu_and_cupti_names_share_a_key() -> None:
    """ncu writes `at::vectorized_elementwise_kernel<..., std::array<char *, 2>>(int, T2,
    T3)` where CUPTI writes `at::native::...std::array<char*, 2ul> >(int, ...)`; a lambda's
    kernel differs beyond repair and falls back on its function's bare name."""
    ncu = pl.read_csv(SAMPLE, infer_schema=False)["Kernel Name"][1:]
    keys = name_keys(pl.concat([ncu, pl.Series([FILL, GEMM, MUL, ADD])]))
    full = dict(zip(keys["name"], keys["full"], strict=True))
    base = dict(zip(keys["name"], keys["base"], strict=True))
    assert full[ncu[2]] == full[MUL] and full[ncu[3]] == full[ADD]
    assert full[ncu[2]] != full[ncu[3]]
    assert full[ncu[1]] == full[GEMM] == GEMM
    assert full[ncu[0]] != full[FILL]
    assert base[ncu[0]] == base[FILL] == "distribution_elementwise_grid_stride_kernel"


def test_each_step_against_the_profiled_kernels(tmp_path: Path) -> None:
    """ncu's k-th launch of a kernel is the k-th in every steady step: the GEMM, the multiply
    and the add of each of the 3 steps; the fill ran before the first step (out of the
    window). Measured bytes replace the estimate where every call was measured."""
    done = api.analyze_path(matmul_trace(tmp_path / "t.json"), ncu=[SAMPLE])
    ncu = done.metrics.ncu
    (f,) = ncu.files.iter_rows(named=True)
    assert (f["ncu_kernels"], f["matched_ncu_kernels"], f["matched_trace_kernels"]) == (4, 3, 9)
    assert f["alignment"] == "steps" and f["name_overlap_share"] == 1.0
    assert (f["rank"], f["device"], f["process"], f["ncu_device"]) == (0, 0, 1167, 0)
    assert f["kernel_ns"] == 3 * 248_000 and f["covered_ns"] == 3 * 232_000
    assert f["covered_share"] == pytest.approx(232 / 248)
    fill, gemm, mul, add = sample_bytes()
    bw = {r["op_name"]: r for r in done.metrics.bandwidth.operators.iter_rows(named=True)}
    assert bw["aten::mul"]["source"] == "ncu" and bw["aten::mul"]["bytes"] == 3 * mul
    assert bw["aten::add"]["source"] == "ncu" and bw["aten::add"]["bytes"] == 3 * add
    assert bw["aten::mul"]["gbps"] == pytest.approx(3 * mul / 48_000)  # the trace's 16 µs
    assert bw["aten::mul"]["estimated_bytes"] == 3 * 2 * 4096 * 4096 * 2  # read + write
    assert bw["aten::relu"]["source"] == "shapes"  # not profiled: stays estimated
    (roof,) = done.metrics.flops.roofline.iter_rows(named=True)
    assert roof["source"] == "ncu" and roof["bytes"] == 3 * gemm
    assert roof["estimated_bytes"] == 3 * 3 * 4096 * 4096 * 2
    assert roof["intensity"] == pytest.approx(roof["flops"] / (3 * gemm))
    (dev,) = ncu.devices.iter_rows(named=True)
    assert dev["gemm_ns"] == dev["tc_ns"] == 600_000
    assert dev["tensor_pipe_share"] == pytest.approx(0.9046)
    k = {r["name"]: r for r in ncu.kernels.iter_rows(named=True)}
    assert k[GEMM]["registers_per_thread"] == 168 and k[GEMM]["trace_kernels"] == 3
    assert k[GEMM]["achieved_occupancy_share"] == pytest.approx(0.1464)
    assert k[GEMM]["ncu_mean_ns"] == 219_456 and k[GEMM]["trace_mean_ns"] == 200_000
    assert k[MUL]["dram_bytes"] == 3 * mul and k[MUL]["dram_source"] == "throughput"
    tc = done.report.to_json_dict()["devices"][0]["tensor_core"]["measured"]
    assert tc["tensor_pipe_share"] == pytest.approx(0.9046) and tc["tc_ns"] == 600_000
    assert fill > 0


def test_the_report_section(tmp_path: Path) -> None:
    doc = api.report(matmul_trace(tmp_path / "t.json"), ncu=[SAMPLE]).to_json_dict()
    n = doc["ncu"]
    assert (n["matched_kernels"], n["unmatched_kernels"], n["matched_trace_kernels"]) == (3, 1, 9)
    assert n["covered_share"] == pytest.approx(232 / 248)
    assert n["min_name_overlap_share"] == MIN_NAME_OVERLAP_SHARE
    (f,) = n["files"]
    assert f["counters"]["missing"] == ["dram__bytes_read.sum", "dram__bytes_write.sum"]
    assert f["unmatched_ncu_kernels"] == 1 and f["dram_source"] == "throughput"
    notes = "\n".join(n["notes"])
    assert notes.count("counters missing") == 1 and "derived from the DRAM throughput" in notes
    assert not any("Nsight" in x for x in doc["data_quality"]["notes"])  # said once, here
    without = api.report(matmul_trace(tmp_path / "t.json")).to_json_dict()
    assert without["ncu"] is None
    assert without["devices"][0]["tensor_core"]["measured"] is None
    assert {b["source"] for b in without["memory_bandwidth"]} == {"shapes"}


def test_launch_order_without_steps(tmp_path: Path) -> None:
    """`-c 4` profiled the first four kernels of the process; a trace without step markers
    from the process's start pairs them with its first four, not the later iterations'."""
    done = api.analyze_path(matmul_trace(tmp_path / "t.json", markers=False), ncu=[SAMPLE])
    (f,) = done.metrics.ncu.files.iter_rows(named=True)
    assert f["alignment"] == "launch order"
    assert (f["matched_ncu_kernels"], f["matched_trace_kernels"]) == (4, 4)
    assert f["covered_ns"] == (56 + 200 + 16 + 16) * 1000
    bw = {r["op_name"]: r for r in done.metrics.bandwidth.operators.iter_rows(named=True)}
    assert bw["aten::normal_"]["source"] == "ncu"  # one call, measured
    assert bw["aten::mul"]["source"] == "shapes"  # 1 of its 3 calls measured: estimated


def test_the_anchor_where_the_trace_starts_later(tmp_path: Path) -> None:
    """ncu's sequence (GEMM, multiply, add) against a trace that starts inside an iteration
    (an add and a relu first): the anchor is the first GEMM, so ncu's add is the one after
    it, not the trace's first."""
    export = ncu_csv(
        tmp_path / "k.csv",
        [
            kernel_row(GEMM, grid="(2, 66, 1)", block="(384, 1, 1)", **_counted(100)),
            kernel_row(MUL, **_counted(10)),
            kernel_row(ADD, **_counted(20)),
        ],
    )
    early_add = (*STEP[2][:2], 30, *STEP[2][3:])  # 30 µs: told apart from the later adds
    ops = [early_add, STEP[3], *STEP, *STEP]
    path = matmul_trace(tmp_path / "t.json", steps=1, markers=False, fill=False, ops=ops)
    done = api.analyze_path(path, ncu=[export])
    (f,) = done.metrics.ncu.files.iter_rows(named=True)
    assert (f["matched_ncu_kernels"], f["matched_trace_kernels"]) == (3, 3)
    bytes_of = {r["name"]: r["dram_bytes"] for r in done.metrics.ncu.kernels.iter_rows(named=True)}
    assert bytes_of == {GEMM: 100, MUL: 10, ADD: 20}
    # the pair is the add after the GEMM (16 µs), not the trace's first (30 µs)
    time_of = {r["name"]: r["kernel_ns"] for r in done.metrics.ncu.kernels.iter_rows(named=True)}
    assert time_of[ADD] == 16_000
    bw = {r["op_name"]: r for r in done.metrics.bandwidth.operators.iter_rows(named=True)}
    assert bw["aten::add"]["source"] == "shapes"  # 1 of 3 add calls measured


def _counted(n: int, **more: str) -> dict[str, str]:
    """Metrics of a kernel with counted DRAM bytes (n read, none written)."""
    return {
        "gpu__time_duration.sum": "1,000",
        "dram__bytes_read.sum": str(n),
        "dram__bytes_write.sum": "0",
        **more,
    }


def test_a_filtered_subset_in_every_step(tmp_path: Path) -> None:
    """`-k regex:nvjet`: ncu holds the GEMM only; each step's GEMM is matched, the rest stays
    estimated."""
    export = ncu_csv(
        tmp_path / "gemm.csv",
        [kernel_row(GEMM, grid="(2, 66, 1)", block="(384, 1, 1)", **_counted(5_000_000))],
    )
    done = api.analyze_path(matmul_trace(tmp_path / "t.json"), ncu=[export])
    (f,) = done.metrics.ncu.files.iter_rows(named=True)
    assert (f["matched_ncu_kernels"], f["matched_trace_kernels"]) == (1, 3)
    assert f["dram_source"] == "counters"
    assert {r["source"] for r in done.metrics.bandwidth.operators.iter_rows(named=True)} == {
        "shapes"
    }
    (roof,) = done.metrics.flops.roofline.iter_rows(named=True)
    assert roof["source"] == "ncu" and roof["bytes"] == 15_000_000


def test_launch_shapes_tell_kernels_apart(tmp_path: Path) -> None:
    """The same kernel on two grid sizes in a step: ncu profiled the second shape only, and
    it is that launch that is paired."""
    small = ("aten::mul", MUL, 4, [[1024, 1024], []], [BF16, "Scalar"], ([1024, 1, 1], [128, 1, 1]))
    ops = [small, STEP[1]]
    export = ncu_csv(tmp_path / "k.csv", [kernel_row(MUL, **_counted(77))])
    path = matmul_trace(tmp_path / "t.json", fill=False, ops=ops)
    done = api.analyze_path(path, ncu=[export])
    (k,) = done.metrics.ncu.kernels.iter_rows(named=True)
    assert k["grid"] == "16384,1,1" and k["trace_kernels"] == 3 and k["dram_bytes"] == 3 * 77


def test_an_export_of_another_program_is_refused(tmp_path: Path) -> None:
    export = ncu_csv(
        tmp_path / "other.csv",
        [kernel_row("ampere_sgemm_128x64_nn", **_counted(1)), kernel_row(GEMM, **_counted(1))],
    )
    with pytest.raises(MismatchedExportError) as e:
        api.analyze_path(matmul_trace(tmp_path / "t.json"), ncu=[export])
    assert e.value.path == str(export)
    assert "0 of the 2 kernels" in e.value.problem  # the GEMM's grid differs too
    assert "at least 50%" in e.value.problem and "ampere_sgemm_128x64_nn" in e.value.problem


def test_a_process_of_another_program_is_left_out(tmp_path: Path) -> None:
    """`--target-processes all` profiled a helper process too: the export's kernels match
    (3 of 4), the helper's one kernel does not; it is left out, with a note. Were the helper
    most of the export, the export would be refused."""
    gemm = kernel_row(GEMM, grid="(2, 66, 1)", block="(384, 1, 1)", **_counted(1))
    rows = [gemm, kernel_row(MUL, **_counted(2)), kernel_row(ADD, **_counted(3))]
    helper = kernel_row("ampere_sgemm_128x64_nn", process=77, **_counted(9))
    done = api.analyze_path(
        matmul_trace(tmp_path / "t.json"), ncu=[ncu_csv(tmp_path / "k.csv", [*rows, helper])]
    )
    (f,) = done.metrics.ncu.files.iter_rows(named=True)
    assert (f["process"], f["ncu_kernels"], f["matched_ncu_kernels"]) == (4242, 3, 3)
    assert (
        "process 77 device 0: only 0% of its 1 kernels match the trace's; left out" in (f["notes"])
    )
    helpers = [helper] * 4
    with pytest.raises(MismatchedExportError, match=r"only 3 of the 7 kernels.*ampere_sgemm"):
        api.analyze_path(
            matmul_trace(tmp_path / "t.json"),
            ncu=[ncu_csv(tmp_path / "h.csv", [*rows, *helpers])],
        )


def test_missing_counters_keep_the_estimates(tmp_path: Path) -> None:
    """An export of durations only: matched, said, and no figure from it; one with the
    throughput share but no memory clock gets its bytes at the trace's GPU peak."""
    rows = [
        kernel_row(
            GEMM, grid="(2, 66, 1)", block="(384, 1, 1)", **{"gpu__time_duration.sum": "1,000"}
        ),
        kernel_row(MUL, **{"gpu__time_duration.sum": "1,000"}),
    ]
    done = api.analyze_path(
        matmul_trace(tmp_path / "t.json"), ncu=[ncu_csv(tmp_path / "d.csv", rows)]
    )
    (f,) = done.metrics.ncu.files.iter_rows(named=True)
    assert f["matched_trace_kernels"] == 6 and f["dram_source"] is None
    assert {r["source"] for r in done.metrics.bandwidth.operators.iter_rows(named=True)} == {
        "shapes"
    }
    assert done.metrics.flops.roofline["source"].to_list() == ["shapes"]
    assert done.metrics.ncu.devices["tensor_pipe_share"].to_list() == [None]
    assert "no DRAM bytes" in "\n".join(f["notes"])

    share = {"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "50"}
    rows = [kernel_row(MUL, **{"gpu__time_duration.sum": "10,000", **share})]
    done = api.analyze_path(
        matmul_trace(tmp_path / "t.json"), ncu=[ncu_csv(tmp_path / "s.csv", rows)]
    )
    bw = {r["op_name"]: r for r in done.metrics.bandwidth.operators.iter_rows(named=True)}
    # 50 % of the H200's 4800 GB/s over ncu's 10 µs, per call
    assert bw["aten::mul"]["source"] == "ncu" and bw["aten::mul"]["bytes"] == 3 * 24_000_000


def test_the_device_ncu_matches(tmp_path: Path) -> None:
    """A trace with two GPUs: the export is paired with the one whose kernels it shares."""
    events = [
        step(1, 100, 300),
        launch(110, 2, corr=1),
        kernel(120, 50, "ampere_sgemm_128x64_nn", corr=1, grid=[8, 8, 1], block=[128, 1, 1]),
        launch(115, 2, corr=2),
        kernel(120, 50, GEMM, corr=2, device=1, grid=[2, 66, 1], block=[384, 1, 1]),
    ]
    header = {
        **H200,
        "deviceProperties": [{**H200["deviceProperties"][0], "id": i} for i in (0, 1)],
    }
    path = write_trace(tmp_path / "two.json", events, header=header)
    export = ncu_csv(
        tmp_path / "k.csv",
        [kernel_row(GEMM, grid="(2, 66, 1)", block="(384, 1, 1)", device=0, **_counted(9))],
    )
    (f,) = api.analyze_path(path, ncu=[export]).metrics.ncu.files.iter_rows(named=True)
    assert (f["rank"], f["device"], f["ncu_device"], f["matched_trace_kernels"]) == (0, 1, 0, 1)


def test_two_exports_of_one_device(tmp_path: Path) -> None:
    """A kernel two exports both measure keeps the first's figures."""
    first = ncu_csv(tmp_path / "a.csv", [kernel_row(MUL, **_counted(1))])
    second = ncu_csv(
        tmp_path / "b.csv", [kernel_row(MUL, **_counted(2)), kernel_row(ADD, **_counted(3))]
    )
    done = api.analyze_path(matmul_trace(tmp_path / "t.json"), ncu=[first, second])
    assert done.metrics.ncu.files["path"].to_list() == [str(first), str(second)]
    k = {r["name"]: r["dram_bytes"] for r in done.metrics.ncu.kernels.iter_rows(named=True)}
    assert k == {MUL: 3 * 1, ADD: 3 * 3}


def test_the_thread_an_nvtx_range_selects(tmp_path: Path) -> None:
    """Each step: the main thread's GEMM and add, the backward thread's add (40 µs), the
    main thread's optimizer add (24 µs). ncu's push/pop range saw the main thread's three;
    its second add is the optimizer's, not the backward's."""
    events: list[dict[str, Any]] = []
    corr = 1
    grid, block = ELEMENTWISE
    for s in range(3):
        t0 = 100 + 400 * s
        events.append(step(s + 1, t0, 390))
        for ts, name, dur, tid in [
            (t0 + 5, GEMM, 100, 100),
            (t0 + 120, ADD, 16, 100),
            (t0 + 150, ADD, 40, 200),
            (t0 + 250, ADD, 24, 100),
        ]:
            events.append(launch(ts, 2, corr=corr, tid=tid))
            g, b = ([2, 66, 1], [384, 1, 1]) if name == GEMM else (grid, block)
            events.append(kernel(ts + 10, dur, name, corr=corr, grid=g, block=b))
            corr += 1
    path = write_trace(tmp_path / "threads.json", events, header=H200)
    export = ncu_csv(
        tmp_path / "main.csv",
        [
            kernel_row(GEMM, grid="(2, 66, 1)", block="(384, 1, 1)", **_counted(1)),
            kernel_row(ADD, **_counted(2)),
            kernel_row(ADD, **_counted(3)),
        ],
    )
    done = api.analyze_path(path, ncu=[export])
    (f,) = done.metrics.ncu.files.iter_rows(named=True)
    assert f["launch_thread"] == 100 and f["matched_trace_kernels"] == 9
    add = done.metrics.ncu.kernels.filter(pl.col("name") == ADD).row(0, named=True)
    assert add["kernel_ns"] == 3 * (16 + 24) * 1000 and add["dram_bytes"] == 3 * (2 + 3)


# --- the real capture: a small GPT's step_1 under ncu, and a Kineto trace of the same loop

COUNTERS = Path(__file__).resolve().parent.parent / "data" / "counters"
KINETO = COUNTERS / "ncu_train_step_kineto.json.gz"


def _csv_rows(path: Path) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The kernels of an ncu raw CSV and its units row, read with the csv module."""
    text = gzip.decompress(path.read_bytes()).decode()
    rows = list(csv.DictReader(io.StringIO(text[text.index('"ID"') :])))
    return rows[1:], rows[0]


def _loop_dram_bytes(path: Path) -> int:
    """The DRAM bytes of every kernel of the export, read + write, by a plain loop over its
    rows (Mbyte is 10^6 bytes; the units row says which)."""
    rows, units = _csv_rows(path)
    scale = {"byte": 1, "Kbyte": 10**3, "Mbyte": 10**6, "Gbyte": 10**9}
    total = 0
    for r in rows:
        moved = 0.0
        for m in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
            moved += float(r[m].replace(",", "")) * scale[units[m]]
        total += round(moved)
    return total


def test_the_whole_step_capture() -> None:
    """`ncu_train_step_full.csv.gz`: step_1 of the GPT loop, all 142 kernels (a start/end
    NVTX range); the Kineto twin has ProfilerStep#1..#3 of 142 kernels each."""
    export = COUNTERS / "ncu_train_step_full.csv.gz"
    rows, _ = _csv_rows(export)
    assert len(rows) == 142
    done = api.analyze_path(KINETO, ncu=[export])
    (f,) = done.metrics.ncu.files.iter_rows(named=True)
    assert (f["ncu_kernels"], f["matched_ncu_kernels"]) == (142, 142)
    assert (f["trace_kernels"], f["matched_trace_kernels"]) == (426, 426)
    assert f["alignment"] == "steps" and f["launch_thread"] is None
    assert f["covered_ns"] == f["kernel_ns"] == 2_027_441 and f["covered_share"] == 1.0
    assert f["dram_source"] == "counters" and f["missing"] == []
    measured = done.metrics.ncu.kernels["dram_bytes"].sum()
    assert measured == 3 * _loop_dram_bytes(export)  # each of the 3 steps' kernels
    bw = done.metrics.bandwidth.operators
    assert set(bw["source"]) == {"ncu"}  # every memory-bound operator measured
    adamw = bw.filter(pl.col("op_name") == "aten::_fused_adamw_").row(0, named=True)
    assert adamw["estimated_bytes"] is None  # a foreach operator: no shape estimate
    assert adamw["bytes"] == 412_703_232 and adamw["ops"] == 3
    assert set(done.metrics.flops.roofline["source"]) == {"ncu"}


def test_the_main_thread_capture() -> None:
    """`ncu_train_step.csv.gz`: the NVTX push/pop range `step_1/` is the main thread's, so
    ncu profiled its 54 kernels and none of the 88 the backward thread launched; the join
    takes the main thread's launches as the candidates and leaves the backward's
    estimated (not profiled), rather than pairing ncu's optimizer kernels with backward
    kernels of the same name."""
    export = COUNTERS / "ncu_train_step.csv.gz"
    done = api.analyze_path(KINETO, ncu=[export])
    (f,) = done.metrics.ncu.files.iter_rows(named=True)
    assert (f["ncu_kernels"], f["matched_ncu_kernels"], f["matched_trace_kernels"]) == (54, 54, 162)
    steps = done.timeline.events.filter(pl.col("name").cast(pl.String) == "ProfilerStep#1")
    assert f["launch_thread"] in steps["tid"].to_list()  # the thread that marks the steps
    assert f["covered_ns"] == 845_241 and f["covered_share"] == pytest.approx(0.4169, abs=1e-4)
    assert done.metrics.ncu.kernels["dram_bytes"].sum() == 3 * _loop_dram_bytes(export)
    bw = {r["op_name"]: r["source"] for r in done.metrics.bandwidth.operators.iter_rows(named=True)}
    assert bw["aten::_fused_adamw_"] == "ncu"  # the optimizer: the main thread's
    assert bw["aten::gelu_backward"] == "shapes"  # the backward thread's: not profiled
