"""Layouts no profiler writes but users hand over: a name of megabytes, arrays nested in
arrays, a device for a file. Each is read at a bounded cost or refused with one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceanalyzer import api
from traceanalyzer.errors import TraceFormatError, UnsupportedTraceError
from traceanalyzer.readers import read
from traceanalyzer.readers.chrome_trace import MAX_NAME_BYTES

KERNEL = {
    "ph": "X",
    "cat": "kernel",
    "name": "k",
    "pid": 0,
    "tid": 7,
    "ts": 10,
    "dur": 2,
    "args": {"device": 0, "stream": 7},
}


def test_a_name_of_megabytes_is_cut(tmp_path: Path) -> None:
    """An operator whose name is 8 MB of text (a tensor printed into a range's name): cut to
    MAX_NAME_BYTES and said once; the rest of the trace is read as usual, and the rules do not
    read the 8 MB again (they took 27 s on an 80 MB name)."""
    big = {"ph": "X", "cat": "cpu_op", "name": "x" * (8 << 20), "pid": 1, "tid": 1}
    big.update(ts=5, dur=20, args={})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [big, KERNEL]}))
    t = read(path)
    names = t.events["name"].cast(str).to_list()
    assert max(len(n) for n in names) == MAX_NAME_BYTES + 1
    assert any("cut to that length" in n for n in t.meta.quality.notes)
    rep = api.report(path)
    assert rep.kernels["count"] == 1


def test_arrays_nested_in_arrays_are_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "nested.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(UnsupportedTraceError, match="array of arrays"):
        read(path)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_device_is_not_a_file() -> None:
    with pytest.raises(TraceFormatError, match="not a regular file"):
        read(Path("/dev/zero"))


@pytest.mark.parametrize(
    ("names", "cc"),
    [
        (["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "sm80_xmma_gemm_f32"], "9.0"),
        (["ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4>"], "8.0"),
        (["volta_sgemm_128x64_nn"], "7.0"),
        (["void cutlass::Kernel<cutlass::arch::Sm80>"], "8.0"),
        (["void at::native::reduce_kernel<512, 1>", "triton_poi_fused_add_0"], None),
    ],
)
def test_the_architecture_from_kernel_names(names: list[str], cc: str | None) -> None:
    """A trace without device properties: the highest SM its kernels are built for."""
    from traceanalyzer.readers.device_match import architecture_from_names

    assert architecture_from_names(names) == cc


def test_a_gpu_described_by_its_kernels(tmp_path: Path) -> None:
    kernel = {**KERNEL, "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [kernel]}))
    (d,) = read(path).meta.devices
    assert (d.name, d.compute_capability) == ("Hopper GPU (sm_90)", "9.0")
