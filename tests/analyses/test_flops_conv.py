"""Convolution FLOPs (analyses/gpu/flops.py) against plain formulas: forward and backward,
strides, padding, dilation, groups, transposed, 1-D to 3-D; counted once, for the operator
that launched the kernels; unknown (and said so) without Concrete Inputs."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import corpus
from traceanalyzer import api
from traceanalyzer.analyses import analyze
from traceanalyzer.readers import read
from traceanalyzer.rules.examples import cpu_op, kernel, launch, step, write_example

CORPUS = corpus()
BF16 = "c10::BFloat16"


def _out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _conv(
    x: list[int], w: list[int], stride: list[int], pad: list[int], dil: list[int]
) -> tuple[float, list[int]]:
    """FLOPs of a convolution and its output's spatial size, by the textbook formula:
    2 N C_out prod(out) (C_in / groups) prod(kernel), with w = [C_out, C_in / groups, k...]."""
    out = [
        _out(s, k, st, p, d) for s, k, st, p, d in zip(x[2:], w[2:], stride, pad, dil, strict=True)
    ]
    return 2.0 * x[0] * w[0] * math.prod(out) * w[1] * math.prod(w[2:]), out


def _conv_args(
    stride: list[int], pad: list[int], dil: list[int], transposed: bool, out_pad: list[int], g: int
) -> list[str]:
    """Concrete Inputs of aten::convolution(input, weight, bias, stride, padding, dilation,
    transposed, output_padding, groups), as torch.profiler writes them."""
    return ["", "", "", str(stride), str(pad), str(dil), str(transposed), str(out_pad), str(g)]


def _op(ts: float, name: str, ext: int, dims: list[list[int]], types: list[str], args: Any):
    fields: dict[str, Any] = {"External id": ext, "Input Dims": dims, "Input type": types}
    if args is not None:
        fields["Concrete Inputs"] = args
    return cpu_op(ts, 30, name, **fields)


def _trace(
    tmp_path: Path,
    ops: list[dict[str, Any]],
    kernel_name: str = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc",
    name: str = "conv",
) -> Path:
    """One step; the last of `ops` (nested in the ones before) launches one GEMM-class
    kernel."""
    launcher = ops[-1]["args"]["External id"]
    events = [
        step(1, 100, 400),
        *ops,
        launch(ops[-1]["ts"] + 1, 2, launcher),
        kernel(150, 50, kernel_name, corr=launcher),
    ]
    return write_example(events, tmp_path, name)


def _flops(path: Path) -> tuple[float | None, str | None]:
    m = analyze(read(path))
    rows = m.flops.devices.to_dicts()
    if not rows:
        return None, None
    return rows[0]["model_flops_per_step"], rows[0]["dtype"]


CASES = {
    # name: (input, weight, stride, padding, dilation, groups)
    "2-D, stride 2, padding 3 (a ResNet stem)": ([8, 3, 224, 224], [64, 3, 7, 7], 2, 3, 1, 1),
    "2-D, dilated": ([4, 32, 33, 33], [32, 32, 3, 3], 1, 2, 2, 1),
    "2-D, grouped, odd stride": ([2, 64, 31, 29], [128, 16, 3, 5], 3, 1, 1, 4),
    "2-D, depthwise": ([16, 96, 56, 56], [96, 1, 3, 3], 1, 1, 1, 96),
    "1-D": ([8, 32, 1000], [64, 32, 5], 2, 2, 1, 1),
    "3-D": ([2, 8, 16, 30, 30], [32, 8, 3, 3, 3], 2, 1, 1, 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_forward_convolution(tmp_path: Path, case: str) -> None:
    x, w, s, p, d, g = CASES[case]
    nd = len(x) - 2
    stride, pad, dil = [s] * nd, [p] * nd, [d] * nd
    expected, _ = _conv(x, w, stride, pad, dil)
    args = _conv_args(stride, pad, dil, False, [0] * nd, g)
    dims = [x, w, [], [], [], [], [], [], []]
    op = _op(105, "aten::convolution", 1, dims, [BF16, BF16, "", *["ScalarList"] * 6], args)
    got, dtype = _flops(_trace(tmp_path, [op]))
    assert got == expected and dtype == "bf16"


def test_cudnn_and_miopen_argument_order(tmp_path: Path) -> None:
    """aten::cudnn_convolution(self, weight, padding, stride, dilation, groups, ...) and
    aten::miopen_convolution(self, weight, bias, padding, stride, dilation, groups, ...) name
    padding before stride: a stride of 2 and padding of 3 read the wrong way round would
    give another output size (115 x 115, not 112 x 112)."""
    x, w = [8, 3, 224, 224], [64, 3, 7, 7]
    expected, out = _conv(x, w, [2, 2], [3, 3], [1, 1])
    assert out == [112, 112]
    cudnn = ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"]
    miopen = ["", "", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False"]
    for name, args in (("aten::cudnn_convolution", cudnn), ("aten::miopen_convolution", miopen)):
        dims = [x, w, *[[]] * (len(args) - 2)]
        op = _op(105, name, 1, dims, [BF16] * len(args), args)
        got, _ = _flops(_trace(tmp_path, [op], name=name.split("::")[1]))
        assert got == expected, name


def test_transposed_convolution(tmp_path: Path) -> None:
    """A transposed convolution does one multiply-add per weight element and per *input*
    position (its weight is [C_in, C_out / groups, k...]); its output size is
    (in - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1."""
    x, w, g = [4, 64, 16, 16], [64, 16, 4, 4], 2  # C_out = 16 x 2 = 32
    expected = 2.0 * 4 * 16 * 16 * math.prod(w)
    out = (16 - 1) * 2 - 2 * 1 + 1 * (4 - 1) + 1 + 1
    cudnn = ["", "", "[1, 1]", "[1, 1]", "[2, 2]", "[1, 1]", str(g), "False", "False", "True"]
    # aten::convolution(input, weight, bias, stride, padding, dilation, transposed, ...)
    generic = _conv_args([2, 2], [1, 1], [1, 1], True, [1, 1], g)
    for name, args in (
        ("aten::cudnn_convolution_transpose", cudnn),
        ("aten::convolution", generic),
    ):
        dims = [x, w, *[[]] * (len(args) - 2)]
        op = _op(105, name, 1, dims, [BF16] * len(args), args)
        m = analyze(read(_trace(tmp_path, [op], name=name.split("::")[1])))
        (row,) = m.flops.roofline.to_dicts()
        assert row["flops"] == expected, name
        assert row["shape"] == f"x4x64x16x16 w64x16x4x4 transposed o{out}x{out}"
        # bytes at 2 per element: input, weight, and the output of 32 channels
        assert row["bytes"] == 2 * (4 * 64 * 16 * 16 + math.prod(w) + 4 * 32 * out * out)


def _backward(x: list[int], w: list[int], out: list[int], mask: str) -> dict[str, Any]:
    nd = len(x) - 2
    args = ["", "", "", "[0]", str([2] * nd), str([1] * nd), str([1] * nd), "False"]
    args += [str([0] * nd), "1", mask]
    dims = [[x[0], w[0], *out], x, w, *[[]] * 8]
    types = [BF16, BF16, BF16, *["ScalarList"] * 4, "Scalar", "ScalarList", "Scalar", "ScalarList"]
    return _op(105, "aten::convolution_backward", 1, dims, types, args)


@pytest.mark.parametrize(
    ("mask", "passes"), [("[True, True, False]", 2), ("[False, True, True]", 1)]
)
def test_convolution_backward(tmp_path: Path, mask: str, passes: int) -> None:
    """The backward computes grad_input and grad_weight, each the forward's FLOPs, where
    output_mask asks for it (the first layer's input needs no gradient)."""
    x, w = [8, 64, 56, 56], [128, 64, 3, 3]
    forward, out = _conv(x, w, [2, 2], [1, 1], [1, 1])
    got, _ = _flops(_trace(tmp_path, [_backward(x, w, out, mask)]))
    assert got == passes * forward


def test_counted_once_for_the_launching_operator(tmp_path: Path) -> None:
    """aten::conv2d > aten::convolution > aten::_convolution > aten::cudnn_convolution, all
    with shapes and Concrete Inputs: only the one whose External id the launch carries
    counts."""
    x, w = [8, 3, 224, 224], [64, 3, 7, 7]
    expected, _ = _conv(x, w, [2, 2], [3, 3], [1, 1])
    conv = _conv_args([2, 2], [3, 3], [1, 1], False, [0, 0], 1)
    ops = [
        _op(102, "aten::conv2d", 1, [x, w, [], [], [], [], []], [BF16] * 7, [*conv[:6], "1"]),
        _op(103, "aten::convolution", 2, [x, w, *[[]] * 7], [BF16] * 9, conv),
        _op(104, "aten::_convolution", 3, [x, w, *[[]] * 11], [BF16] * 13, conv + ["False"] * 4),
        _op(
            105,
            "aten::cudnn_convolution",
            4,
            [x, w, *[[]] * 7],
            [BF16] * 9,
            ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"],
        ),
    ]
    got, _ = _flops(_trace(tmp_path, ops))
    assert got == expected


def test_fp32_convolution_precision(tmp_path: Path) -> None:
    """fp32 inputs count as tf32 where the kernel runs on Tensor Cores, else fp32."""
    x, w = [8, 64, 28, 28], [64, 64, 3, 3]
    args = _conv_args([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    op = _op(105, "aten::convolution", 1, [x, w, *[[]] * 7], ["float"] * 9, args)
    tc = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16"
    assert _flops(_trace(tmp_path, [op], tc, "tc"))[1] == "tf32"
    plain = "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, true>"
    assert _flops(_trace(tmp_path, [op], plain, "simt"))[1] == "fp32"


def test_without_concrete_inputs_the_flops_are_unknown_and_said(tmp_path: Path) -> None:
    """A trace without Concrete Inputs (torch before 2.1) records no stride or padding: the
    convolution's FLOPs are unknown, not guessed; the report says so in a note."""
    x, w = [8, 3, 224, 224], [64, 3, 7, 7]
    op = _op(105, "aten::cudnn_convolution", 1, [x, w, *[[]] * 7], [BF16] * 9, None)
    path = _trace(tmp_path, [op])
    m = analyze(read(path))
    assert m.flops.devices.height == 0
    (row,) = m.flops.unknown.to_dicts()
    assert row["op_name"] == "aten::cudnn_convolution" and row["calls"] == 1
    rep = api.report(path)
    assert all(d["flops"] is None for d in rep.devices)
    assert any("aten::cudnn_convolution" in n and "unknown" in n for n in rep.quality["notes"])


def _loop_conv_flops(path: Path) -> float:
    """Every convolution operator of the trace that launched a kernel, by the formulas, in
    plain Python: aten::miopen_convolution(self, weight, bias, padding, stride, dilation,
    ...) forward, aten::convolution_backward times the gradients its output_mask asks for."""
    with gzip.open(path) as f:
        events = [e for e in orjson.loads(f.read())["traceEvents"] if e.get("ph") == "X"]
    launched = {
        e["args"]["External id"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "External id" in e.get("args", {})
    }
    total = 0.0
    for e in events:
        a = e.get("args", {})
        if e.get("cat") != "cpu_op" or a.get("External id") not in launched:
            continue
        if e["name"] == "aten::miopen_convolution":
            x, w = a["Input Dims"][0], a["Input Dims"][1]
            pad, stride, dil = (json.loads(a["Concrete Inputs"][i]) for i in (3, 4, 5))
            out = [_out(*v) for v in zip(x[2:], w[2:], stride, pad, dil, strict=True)]
            total += 2 * x[0] * math.prod(out) * math.prod(w)
        elif e["name"] == "aten::convolution_backward":
            grad_out, x, w = a["Input Dims"][:3]
            mask = a["Concrete Inputs"][10]
            passes = mask.split(",")[0].count("True") + mask.split(",")[1].count("True")
            total += passes * 2 * x[0] * math.prod(grad_out[2:]) * math.prod(w)
    return total


@pytest.mark.skipif(CORPUS is None, reason="TRACEANALYZER_CORPUS not set")
def test_resnet18_on_mi300_against_a_loop() -> None:
    """ResNet-18 training on an MI300X (MIOpen convolutions, bf16, Concrete Inputs): the
    tool's convolution FLOPs equal a plain loop's over the trace's events; each operator
    runs below its roof; the counted operators now hold all the GEMM-class time."""
    path = CORPUS / "public/tracelens_rocm/mi300__ddp_resnet18_no_pool__train_resnet18.json.gz"  # type: ignore[operator]
    m = analyze(read(path))
    roof = m.flops.roofline
    convs = roof.filter(roof["op_name"].is_in(["aten::miopen_convolution", CONV_BACKWARD]))
    assert convs["flops"].sum() == pytest.approx(_loop_conv_flops(path), rel=1e-12)
    assert (roof["achieved_tflops"] <= roof["roof_tflops"]).all()
    (row,) = m.flops.devices.to_dicts()
    assert row["dtype"] == "bf16" and row["coverage"] > 0.99
    assert m.flops.unknown.height == 0


CONV_BACKWARD = "aten::convolution_backward"


def test_a_conv_net_on_an_h100_by_construction() -> None:
    """tests/data/gpu/startup_steps: a conv net trained in bf16 autocast on an H100 (cuDNN,
    torch 2.11; sample_traces/make/issue33.py): a 7x7 stride-2 stem on 64 x 3 x 128 x 128
    (its input needs no gradient: the backward computes grad_weight only), max-pool, six
    3x3 convolutions (64-64 at 32², 64-128 s2, 128-128 at 16², 128-256 s2, 256-256 at 8²,
    256-512 s2) and Linear(512, 100). FLOPs per step by the formulas: forward once, the
    backward twice (once for the stem), the head three times."""
    b = 64
    stem = 2 * b * 64 * 64 * 64 * 3 * 7 * 7
    convs = [(64, 64, 32), (64, 128, 16), (128, 128, 16), (128, 256, 8), (256, 256, 8)]
    body = sum(2 * b * o * o * co * ci * 9 for ci, co, o in [*convs, (256, 512, 4)])
    head = 2 * b * 100 * 512
    path = Path(__file__).parents[1] / "data" / "gpu" / "startup_steps.json.gz"
    (row,) = analyze(read(path)).flops.devices.to_dicts()
    assert row["model_flops_per_step"] == 2 * stem + 3 * body + 3 * head
    assert row["dtype"] == "bf16" and row["coverage"] == 1.0


def test_every_kind_of_convolution_on_an_h100_against_flop_counter() -> None:
    """tests/data/gpu/conv_train (sample_traces/make/issue26.py conv_train, an H100, torch
    2.11, cuDNN): a net of convolutions only, batch 32 of 3 x 224 x 224 in bf16 autocast: a
    7x7 stride-2 stem, a 3x3, a dilated depthwise 3x3 (groups 64), a 1x1, a stride-2 grouped
    3x3 (groups 4), a stride-2 transposed 4x4 and a 1x1 head. The tool's FLOPs per step equal
    the textbook formulas; the forward equals torch's own `FlopCounterMode` count, recorded
    on the machine (facts_issue26_conv.json). Its backward is larger than ours by exactly
    (groups - 1) x the grouped layers' weight gradients: `FlopCounterMode` leaves groups out
    of the weight gradient's formula (its count, not ours, is off there). The achieved
    TFLOP/s is the FLOPs over the step timed without the profiler, within 5 %."""
    b = 32

    def conv(c_in: int, c_out: int, k: int, out: int, groups: int = 1) -> int:
        return 2 * b * c_out * out * out * (c_in // groups) * k * k

    forward = {
        "stem": conv(3, 64, 7, 112),
        "conv": conv(64, 64, 3, 112),
        "depthwise": conv(64, 64, 3, 112, groups=64),
        "pointwise": conv(64, 128, 1, 112),
        "grouped": conv(128, 128, 3, 56, groups=4),
        # transposed: one multiply-add per weight element and per INPUT position (56 x 56)
        "up": 2 * b * 128 * 56 * 56 * 64 * 4 * 4,
        "head": conv(64, 16, 1, 112),
    }
    # the backward: every layer's weight gradient, and the input gradient of all but the
    # stem (the batch needs no gradient): each as many FLOPs as the forward
    backward = 2 * sum(forward.values()) - forward["stem"]
    gpu = Path(__file__).parents[1] / "data" / "gpu"
    facts = json.loads((gpu / "facts_issue26_conv.json").read_text(encoding="utf-8"))
    counted = facts["counts"]["flops_by_op_flop_counter"]
    assert sum(forward.values()) == counted["aten.convolution"]
    ungrouped = (64 - 1) * forward["depthwise"] + (4 - 1) * forward["grouped"]
    assert backward + ungrouped == counted["aten.convolution_backward"]
    (row,) = analyze(read(gpu / "conv_train.json.gz")).flops.devices.to_dicts()
    total = sum(forward.values()) + backward
    assert row["model_flops_per_step"] == total
    assert row["dtype"] == "bf16" and row["coverage"] == 1.0
    measured_s = facts["unprofiled"]["step_ms_mean"] / 1e3
    assert row["achieved_tflops"] == pytest.approx(total / measured_s / 1e12, rel=0.05)
