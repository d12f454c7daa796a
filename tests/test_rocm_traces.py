"""ROCm traces: every analysis runs on AMD GPUs' Kineto traces as on CUDA ones.

The public ROCm traces (`public/tracelens_rocm/`: MI300X ResNet-18 DDP training, MI300X VF
BERT inference, an MI300X normalisation test; `public/hta/amd_mi250_minitoy`: MI250,
ROCm 6.2) are checked against plain loops over their raw JSON events: kernels, idle time,
communication overlap, the Matrix Core share and the critical path. `test_real_traces.py`
checks window, busy time and idle causes on them too, as on every corpus trace.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests import reference
from tests.conftest import corpus
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.timeline.iterations import repeated_calls
from traceanalyzer.readers import read

ROCM = (
    "public/tracelens_rocm/mi300__ddp_resnet18_no_pool__train_resnet18.json.gz",
    "public/tracelens_rocm/mi300__gaunernst_bert-small-uncased__1016001.json.gz",
    "public/tracelens_rocm/perf_model__normalization__normalization_layer_test.json.gz",
    "public/hta/amd_mi250_minitoy/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
)

#: Matrix-core kernels by name, written independently of the tool's tables: rocBLAS/Tensile
#: MFMA tiles (`_MI16x16x1_`), Composable Kernel XDL kernels, MIOpen's 16-bit implicit GEMM.
_MATRIX_CORE = re.compile(r"_MI\d+x\d+x\d+|mfma|_xdl_|xdlops|^igemm_\w*_(?:bf16|fp16)_")


def _path(rel: str) -> Path:
    root = corpus()
    if root is None:
        pytest.skip("TRACEANALYZER_CORPUS is not set")
    path = root / rel
    if not path.exists():
        pytest.skip(f"{rel} is not in the corpus")
    return path


def _kernels(doc: dict[str, Any]) -> list[tuple[int, int, int, str]]:
    """(device, start_ns, end_ns, name) of every kernel event, a plain loop."""
    out = []
    for ev in doc["traceEvents"]:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or ev.get("cat") != "kernel":
            continue
        args = ev.get("args") or {}
        start = reference.ns(ev["ts"])
        out.append(
            (int(args.get("device", ev["pid"])), start, start + reference.ns(ev["dur"]), ev["name"])
        )
    return out


@pytest.mark.parametrize("rel", ROCM, ids=lambda r: Path(r).name[:40])
def test_rocm_trace_analyses_match_plain_loops(rel: str) -> None:
    path = _path(rel)
    doc = reference.load(path)
    metrics = analyze(read(path))
    iterations = None
    if metrics.basis == "iterations":  # no step markers: over the calls that repeat
        found, _ = repeated_calls(read(path))
        iterations = {r["step"]: (r["start_ns"], r["end_ns"]) for r in found.iter_rows(named=True)}
    numbers = reference.device_numbers(doc, iterations=iterations)
    meta = read(path).meta
    kernels = _kernels(doc)
    assert kernels
    devices = {r["device"]: r for r in metrics.devices.rows()}
    assert set(devices) == {d for d, *_ in kernels}
    for dev, row in devices.items():
        lo, hi = numbers[(0, dev)]["start_ns"], numbers[(0, dev)]["end_ns"]
        inside = [(max(s, lo), min(e, hi), n) for d, s, e, n in kernels if d == dev]
        inside = [(s, e, n) for s, e, n in inside if e > s]
        # kernels and idle
        assert row["kernel_count"] == len(inside) > 0
        busy = reference.union_length([(s, e) for s, e, _ in inside])
        assert row["busy_ns"] == numbers[(0, dev)]["busy_ns"] >= busy > 0
        assert 0 < row["idle_share"] < 1
        # no RCCL kernel in these traces: no communication, and nothing overlapped
        assert not any(reference.COMM.search(n) for _, _, n in inside)
        assert (row["comm_ns"], row["overlapped_comm_ns"], row["overlap_share"]) == (0, 0, None)
        # Matrix Core share: tc_ns is the time of the matrix-core kernels
        tc = sum(e - s for s, e, n in inside if _MATRIX_CORE.search(n))
        assert row["tc_ns"] == tc
        # the GPU is named (an MI300X virtual function lists another device id)
        named = {d.device: d.name for d in meta.devices}
        assert named[dev] is not None and ("AMD" in named[dev])
    # the critical path: one per steady host step (ProfilerStep#N; warm-up steps left out),
    # adding up to the step, which lasts at least its marker (until its GPU work drains)
    markers = {
        ev["name"]: reference.ns(ev["dur"])
        for ev in doc["traceEvents"]
        if isinstance(ev, dict)
        and ev.get("ph") == "X"
        and reference.STEP_RE.match(str(ev.get("name", "")))
    }
    if iterations:
        markers = {f"iteration {n}": hi - lo for n, (lo, hi) in iterations.items()}
    paths = metrics.critical_path.steps
    assert (0 < paths.height <= len(markers)) if metrics.steps.steady.height else paths.height == 0
    kinds = ("gpu_compute_ns", "comm_ns", "copy_ns", "cpu_ns", "sync_wait_ns", "idle_ns")
    for p in paths.iter_rows(named=True):
        assert p["path_ns"] == p["step_ns"] >= markers[p["name"]] > 0
        assert sum(p[k] for k in kinds) == p["path_ns"]


def test_rocm_traces_with_matrix_core_gemms_report_a_share() -> None:
    path = _path(ROCM[0])  # ResNet-18 training on MI300X: bf16 convolutions on MFMA
    metrics = analyze(read(path))
    row = metrics.devices.summary.row(0, named=True)
    assert row["tc_ns"] > 0 and row["tc_ns"] == row["gemm_ns"]
