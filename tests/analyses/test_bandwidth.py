"""Achieved bandwidth of memory-bound operators, from recorded shapes."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from tests import reference
from tests.builders import cpu_op, kernel, launch, step, write_trace
from tests.conftest import SAMPLES
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.gpu.bandwidth import DTYPE_BYTES, peak_bandwidth_gbps
from traceanalyzer.readers import read

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"


def test_peaks_of_known_gpus() -> None:
    assert peak_bandwidth_gbps("NVIDIA H100 80GB HBM3") == 3350.0
    assert peak_bandwidth_gbps("NVIDIA A100-SXM4-80GB") == 2039.0
    assert peak_bandwidth_gbps("NVIDIA A100-PG509-200") == 1555.0
    assert peak_bandwidth_gbps("Tesla V100-SXM2-32GB") == 900.0
    assert peak_bandwidth_gbps("NVIDIA B200") == 8000.0
    assert peak_bandwidth_gbps("Some Future GPU") is None
    assert peak_bandwidth_gbps(None) is None


def test_elementwise_add_bandwidth(tmp_path: Path) -> None:
    mb4 = [1024, 1024]
    events = [
        step(1, 100, 100),
        cpu_op(
            110,
            20,
            "aten::add",
            **{
                "External id": 7,
                "Input Dims": [mb4, mb4, []],
                "Input type": ["float", "float", "Scalar"],
            },
        ),
        launch(112, 3, corr=7),
        kernel(120, 10, ELEMENTWISE, corr=7),
        # a copy_: source and destination are both inputs, nothing extra is written
        cpu_op(
            140,
            20,
            "aten::copy_",
            **{
                "External id": 8,
                "Input Dims": [mb4, mb4, []],
                "Input type": ["c10::BFloat16", "float", "Scalar"],
            },
        ),
        launch(142, 3, corr=8),
        kernel(150, 4, "void at::native::bfloat16_copy_kernel_cuda", corr=8),
    ]
    m = analyze(read(write_trace(tmp_path / "t.json", events)))
    rows = {r["op_name"]: r for r in m.bandwidth.operators.iter_rows(named=True)}
    add = rows["aten::add"]
    assert add["bytes"] == 3 * 4 * 1024 * 1024  # two inputs read, one output written
    assert add["gbps"] == pytest.approx(3 * 4 * 1024 * 1024 / 10_000)
    assert add["share_of_peak"] == pytest.approx(add["gbps"] / 3350.0)
    assert rows["aten::copy_"]["bytes"] == (2 + 4) * 1024 * 1024


@pytest.mark.parametrize("op", ["aten::gelu", "aten::native_layer_norm", "aten::sum"])
def test_real_trace_against_a_plain_loop(op: str) -> None:
    path = SAMPLES / "train_bf16_healthy.json.gz"
    doc = reference.load(path)
    numbers = reference.device_numbers(doc)[(0, 0)]
    lo, hi = numbers["start_ns"], numbers["end_ns"]
    ops: dict[int, tuple[int, int, int]] = {}  # external id -> (start, end, bytes)
    launches: dict[int, tuple[int, int]] = {}  # correlation -> (external id, start)
    kernels: list[tuple[int, int, int, str]] = []
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X":
            continue
        args = ev.get("args") or {}
        start = reference.ns(ev["ts"])
        end = start + reference.ns(ev["dur"])
        if ev.get("cat") == "cpu_op" and ev["name"] == op and "Input Dims" in args:
            dims, types = args["Input Dims"], args["Input type"]
            sizes = []
            for d, t in zip(dims, types, strict=True):
                n = 1
                for x in d:
                    n *= x
                sizes.append(n * DTYPE_BYTES.get(t, 0))
            # a reduction reads its input and writes a result too small to count
            written = 0 if op == "aten::sum" else max(sizes)
            ops[args["External id"]] = (start, end, sum(sizes) + written)
        elif ev.get("cat") == "cuda_runtime" and "correlation" in args:
            launches[args["correlation"]] = (args.get("External id", -1), start)
        elif ev.get("cat") == "kernel":
            kernels.append((start, end, args["correlation"], ev["name"]))
    time_per_op: dict[int, int] = defaultdict(int)
    for start, end, corr, _name in kernels:
        if corr not in launches or not (start < hi and end > lo):
            continue
        ext, launched = launches[corr]
        if ext in ops and ops[ext][0] <= launched <= ops[ext][1]:
            time_per_op[ext] += min(end, hi) - max(start, lo)
    total_bytes = sum(ops[e][2] for e in time_per_op)
    total_ns = sum(time_per_op.values())
    got = analyze(read(path)).bandwidth.operators
    row = got.filter(got["op_name"] == op).row(0, named=True)
    assert (row["ops"], row["kernel_ns"], row["bytes"]) == (len(time_per_op), total_ns, total_bytes)
    assert json.dumps(row["gbps"]) == json.dumps(total_bytes / total_ns)
