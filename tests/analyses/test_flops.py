"""FLOPs per operator, MFU and the roofline (analyses/gpu/flops.py) against plain formulas."""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from tests.conftest import SAMPLES, corpus
from traceanalyzer import api
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.gpu.flops import peak_tflops
from traceanalyzer.readers import read

CORPUS = corpus()


def _loop_flops(path: Path) -> float:
    """Every matrix/attention operator that launched a kernel inside a ProfilerStep range
    (the healthy sample: one step marker per step, every step steady), by its formula."""
    with gzip.open(path) as f:
        events = [e for e in orjson.loads(f.read())["traceEvents"] if e.get("ph") == "X"]
    steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    launched: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "External id" in e.get("args", {}):
            launched[e["args"]["External id"]].append(e)
    total = 0.0
    for ext, op in ops.items():
        dims = op["args"].get("Input Dims")
        name = op["name"]
        if not dims or not launched.get(ext):
            continue
        if not any(a <= launched[ext][0]["ts"] < b for a, b in steps):
            continue
        if name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            total += 2 * m * n * k
        elif name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            total += 2 * m * n * k
        elif name == "aten::_cudnn_attention_forward":
            b, h, t, d = dims[0]
            total += 4 * b * h * t * dims[1][2] * d
        elif name == "aten::_cudnn_attention_backward":
            b, h, t, d = dims[1]
            total += 2.5 * 4 * b * h * t * dims[2][2] * d
    return total


def test_flops_of_the_healthy_sample_against_a_loop() -> None:
    path = SAMPLES / "train_bf16_healthy.json.gz"
    m = analyze(read(path))
    (row,) = m.flops.devices.iter_rows(named=True)
    got = row["model_flops_per_step"] * row["steps"]
    assert got == pytest.approx(_loop_flops(path), rel=1e-9)
    assert row["dtype"] == "bf16" and row["peak_tflops"] == 989.0
    assert row["mfu"] == pytest.approx(row["achieved_tflops"] / 989.0)
    # an operator's achieved rate never exceeds its roof
    roof = m.flops.roofline
    assert (roof["achieved_tflops"] <= roof["roof_tflops"] * 1.001).all()


@pytest.mark.skipif(CORPUS is None, reason="TRACEANALYZER_CORPUS not set")
def test_model_flops_of_a_gpt_step_match_6nt(tmp_path: Path) -> None:
    """The two-rank DDP job of h200x2 (252 M parameters, 12 x 1024 tokens per rank, 8
    layers of width 1536 with attention over 1024 tokens): its FLOPs per step are PaLM's
    6 N T plus 12 L d T per token of attention, within 5 %; its verdict carries the MFU."""
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        name = f"ddp_balanced_rank{rank}.json.gz"
        (job / name).symlink_to(CORPUS / "h200x2" / name)  # type: ignore[operator]
    rep = api.report(job, jobs=1)
    tokens = 12 * 1024
    expected = 6 * 252e6 * tokens + 12 * 8 * 1536 * 1024 * tokens
    for d in rep.devices:
        f = d["flops"]
        assert f is not None
        assert f["model_flops_per_step"] == pytest.approx(expected, rel=0.05)
    assert rep.verdict is not None and rep.verdict["mfu"] is not None
    assert 0.3 < rep.verdict["mfu"] < 0.5  # 375 of 989 TFLOP/s under the profiler
    assert "MFU" in rep.verdict["headline"]


def test_peaks_by_device_name() -> None:
    assert peak_tflops("NVIDIA H100 80GB HBM3") == pytest.approx(
        {"fp8": 1979.0, "bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}
    )
    pcie = peak_tflops("NVIDIA H100 PCIe")
    assert pcie is not None and pcie["bf16"] == 756.0
    h200 = peak_tflops("NVIDIA H200")
    assert h200 is not None and h200["bf16"] == 989.0
    a100 = peak_tflops("NVIDIA A100-SXM4-80GB")
    assert a100 is not None and a100["bf16"] == 312.0 and "fp8" not in a100
    l4 = peak_tflops("NVIDIA L4")
    assert l4 is not None and l4["bf16"] == 121.0
    mi = peak_tflops("AMD Instinct MI300X")
    assert mi is not None and mi["bf16"] == 1307.0
    assert peak_tflops("Some Future GPU") is None
    assert peak_tflops(None) is None


def test_no_shapes_no_flops() -> None:
    """A trace recorded without shapes (the tiny-kernels sample has none for matmuls) has
    no FLOPs: null, not 0."""
    rep = api.report(SAMPLES / "tiny_kernels.json.gz")
    assert all(d["flops"] is None for d in rep.devices)
    assert rep.verdict is not None and rep.verdict["mfu"] is None


def test_grouped_mm_flops(tmp_path: Path) -> None:
    """A mixture-of-experts product: 96 rows stacked over 4 experts of 64 x 128: 2 M N K."""
    from traceanalyzer.rules.examples import cpu_op, kernel, launch, step, write_example

    dims = [[96, 64], [4, 64, 128], [4]]
    events = [
        step(1, 100, 400),
        cpu_op(
            105,
            20,
            "aten::_grouped_mm",
            **{
                "External id": 1,
                "Input Dims": dims,
                "Input type": ["c10::BFloat16", "c10::BFloat16", "int"],
            },
        ),
        launch(106, 2, 1),
        kernel(120, 50, "sm90_xmma_gemm_bf16bf16_bf16f32_grouped", corr=1),
    ]
    m = analyze(read(write_example(events, tmp_path, "moe")))
    (row,) = m.flops.devices.iter_rows(named=True)
    assert row["model_flops_per_step"] == 2 * 96 * 128 * 64


@pytest.mark.skipif(CORPUS is None, reason="TRACEANALYZER_CORPUS not set")
def test_no_mfu_where_the_matrix_work_is_not_counted() -> None:
    """ResNet-50 in torch 1.8's schema: its GEMM-class time is convolutions recorded without
    Concrete Inputs (no stride, padding or dilation: their FLOPs are unknown); the counted
    fc layer holds 0.1 % of it: FLOPs given, MFU not (null, not 0.0002 %), and a note
    names the convolutions left out."""
    path = CORPUS / "public/kineto/resnet50_v1_schema/worker0.pt.trace.json.gz"  # type: ignore[operator]
    rep = api.report(path)
    flops = [d["flops"] for d in rep.devices if d["flops"]]
    assert flops and all(f["coverage"] < 0.5 and f["mfu"] is None for f in flops)
    assert rep.verdict is not None and rep.verdict["mfu"] is None
    assert "MFU" not in rep.verdict["headline"]
    (note,) = [n for n in rep.quality["notes"] if "convolution" in n]
    for name in ("cudnn_convolution,", "cudnn_convolution_backward_input", "_backward_weight"):
        assert name in note
