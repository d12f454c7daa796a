"""FLOPs and bytes of the matrix and attention operators, achieved TFLOP/s, MFU and a roofline.

Rank stage (`op_flops`, from recorded shapes: `record_shapes=True`) and job stage
(`device_flops`, per device and steady step). See docs/flops.md for the formulas, the peaks'
sources and the limits.

FLOPs of one call, from its inputs' shapes (a multiply-add is two FLOPs):

- `aten::mm(A[M,K], B[K,N])`, `aten::addmm(bias, A, B)`, `aten::_scaled_mm(A, B)` (FP8):
  2·M·N·K; `aten::bmm(A[b,M,K], B[b,K,N])`, `aten::baddbmm(C, A, B)`: 2·b·M·N·K;
  `aten::_grouped_mm(A[M,K], B[G,K,N])` (the groups' rows stacked in A): 2·M·N·K, and with a
  3-D A as bmm;
  `aten::linear(x[..., K], W[N, K])`: 2·M·N·K with M the product of x's leading dimensions;
- fused attention, forward (`aten::_cudnn_attention_forward`, `_flash_attention_forward`,
  `_efficient_attention_forward`, `_scaled_dot_product_{flash,efficient,cudnn}_attention`):
  4·B·H·T·S·D (Q·Kᵀ and P·V over the whole T × S score matrix, causal or not, as PaLM's MFU
  counts attention); backward (`..._backward`): 2.5 times that (five products of that size);
  Q is [B, H, T, D] for the cuDNN and `_scaled_dot_product_*` operators, [B, T, H, D] for
  the flash and efficient ones, the first input of a forward, the second of a backward.
- convolutions (`aten::cudnn_convolution`, `aten::miopen_convolution`, `aten::convolution`,
  ... : `_CONV_OPS`), 1-D to 3-D, x[N, C_in, ...] by w[C_out, C_in / groups, k...]:
  2·N·prod(output positions)·prod(w), the output positions from stride, padding and
  dilation in the event's Concrete Inputs; transposed (w[C_in, C_out / groups, k...]):
  2·N·prod(input positions)·prod(w); `aten::convolution_backward`: the forward's FLOPs for
  each of grad_input and grad_weight its output_mask asks for. Without Concrete Inputs
  (torch before 2.1) a convolution's FLOPs are unknown: null, listed in `Flops.unknown`.

Only the operator that launched the kernels counts (the one whose `External id` the launch
carries: `aten::linear` that calls `aten::addmm` is counted once, as `addmm`), and only for
GEMM-class kernels inside the windows. Bytes (for the roofline): each operand read once and
the output written once (A, B and C of a product; Q, K, V and O of attention; a
convolution's input, weight and output, the positions a kernel must touch only), at the
operands' element size. Precision: the first matrix operand's dtype (`bf16`, `fp16`,
`fp8`), `fp32` inputs as `tf32` where their kernels run on Tensor Cores, else `fp32`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.gpu.bandwidth import peak_bandwidth_gbps
from traceanalyzer.analyses.gpu.operators import launch_ops, shaped_ops
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY
from traceanalyzer.model import DeviceInfo, Kind, Timeline

#: Dense (no sparsity) peak TFLOP/s per precision, by device-name pattern; first match wins.
#: From the vendors' datasheets (docs/flops.md lists each): the sparse figures halved.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"B200", {"fp8": 4500.0, "bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp32": 80.0}),
    (r"H100.*PCIe", {"fp8": 1513.0, "bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    (
        r"H100 NVL|H200 NVL",
        {"fp8": 1670.0, "bf16": 835.0, "fp16": 835.0, "tf32": 418.0, "fp32": 60.0},
    ),
    (
        r"H100|H200|H800|GH200",
        {"fp8": 1979.0, "bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0},
    ),
    (r"A100|A800", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"L40S", {"fp8": 733.0, "bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    (r"L4\b", {"fp8": 242.0, "bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    (r"A10\b", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    (r"A40\b", {"bf16": 149.7, "fp16": 149.7, "tf32": 74.8, "fp32": 37.4}),
    (r"V100", {"fp16": 125.0, "fp32": 15.7}),
    (r"T4\b", {"fp16": 65.0, "fp32": 8.1}),
    (r"RTX 4090", {"fp8": 330.3, "bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    (r"MI300X", {"fp8": 2615.0, "bf16": 1307.0, "fp16": 1307.0, "tf32": 654.0, "fp32": 163.4}),
    (r"MI250", {"bf16": 383.0, "fp16": 383.0, "fp32": 95.7}),
)

#: Precisions by the dtype names torch records.
PRECISION_OF_DTYPE: dict[str, str] = {
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "float": "fp32",
}
_ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4, "tf32": 4}

_GEMM_OPS = {
    "aten::mm": (0, "mm"),
    "aten::addmm": (1, "mm"),
    "aten::_scaled_mm": (0, "mm"),
    "aten::bmm": (0, "bmm"),
    "aten::baddbmm": (1, "bmm"),
    "aten::linear": (0, "linear"),
    "aten::_grouped_mm": (0, "grouped"),
}
#: Attention operators: (index of Q among the inputs, layout, FLOPs factor over 4·B·H·T·S·D).
_ATTENTION_OPS = {
    "aten::_cudnn_attention_forward": (0, "bhtd", 1.0),
    "aten::_scaled_dot_product_cudnn_attention": (0, "bhtd", 1.0),
    "aten::_scaled_dot_product_flash_attention": (0, "bhtd", 1.0),
    "aten::_scaled_dot_product_efficient_attention": (0, "bhtd", 1.0),
    "aten::_flash_attention_forward": (0, "bthd", 1.0),
    "aten::_efficient_attention_forward": (0, "bthd", 1.0),
    "aten::_cudnn_attention_backward": (1, "bhtd", 2.5),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, "bhtd", 2.5),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "bhtd", 2.5),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, "bhtd", 2.5),
    "aten::_flash_attention_backward": (1, "bthd", 2.5),
    "aten::_efficient_attention_backward": (1, "bthd", 2.5),
}
#: Convolution operators, forward: the places among their inputs of (input, weight, stride,
#: padding, dilation, transposed, output_padding, groups); `NO` where the operator has no
#: such argument (not transposed, no output padding, one group), `YES` where it is
#: transposed by name.
#: From ATen's native_functions.yaml; stride, padding and dilation are read from the
#: event's `Concrete Inputs` (`["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", ...]`).
NO, YES = -1, -2
_CONV_OPS: dict[str, tuple[int, int, int, int, int, int, int, int]] = {
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    "aten::convolution": (0, 1, 3, 4, 5, 6, 7, 8),
    "aten::_convolution": (0, 1, 3, 4, 5, 6, 7, 8),
    # (self, weight, padding, stride, dilation, groups, ...)
    "aten::cudnn_convolution": (0, 1, 3, 2, 4, NO, NO, 5),
    # (self, weight, padding, output_padding, stride, dilation, groups, ...)
    "aten::cudnn_convolution_transpose": (0, 1, 4, 2, 5, YES, 3, 6),
    # (self, weight, bias, padding, stride, dilation, groups, ...)
    "aten::miopen_convolution": (0, 1, 4, 3, 5, NO, NO, 6),
    "aten::miopen_depthwise_convolution": (0, 1, 4, 3, 5, NO, NO, 6),
    # (self, weight, bias, padding, output_padding, stride, dilation, groups, ...)
    "aten::miopen_convolution_transpose": (0, 1, 5, 3, 6, YES, 4, 7),
    # (self, weight, kernel_size, bias, stride, padding, dilation): never transposed
    "aten::_conv_depthwise2d": (0, 1, 4, 5, 6, NO, NO, NO),
    "aten::conv_depthwise3d": (0, 1, 4, 5, 6, NO, NO, NO),
}
#: The backward of every convolution (torch 1.11 and later):
#: (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
#: output_padding, groups, output_mask): grad_input where output_mask[0], grad_weight where
#: output_mask[1] (grad_bias, a reduction, is not counted).
CONV_BACKWARD = "aten::convolution_backward"
_CONV_BACKWARD_AT = {"transposed": 7, "mask": 10}
#: The backward operators of torch 1.10 and before, which predate Concrete Inputs (torch
#: 2.1): their FLOPs are unknown (a weight gradient's operator records no weight shape).
_LEGACY_CONV_BACKWARD = [
    f"aten::{lib}_convolution{kind}_backward{part}"
    for lib in ("cudnn", "miopen")
    for kind in ("", "_transpose")
    for part in ("", "_input", "_weight")
] + [
    "aten::miopen_depthwise_convolution_backward_input",
    "aten::miopen_depthwise_convolution_backward_weight",
]
CONV_OPS = [*_CONV_OPS, CONV_BACKWARD, *_LEGACY_CONV_BACKWARD]
FLOP_OPS = [*_GEMM_OPS, *_ATTENTION_OPS, *CONV_OPS]
#: The most spatial dimensions of a convolution (3-D).
_SPATIAL = 3
#: The list arguments of `_CONV_OPS`' tuples read from Concrete Inputs, by place in them.
_CONV_PARAMS = {"stride": 2, "padding": 3, "dilation": 4, "output_padding": 6, "groups": 7}


def peak_tflops(device_name: str | None) -> dict[str, float] | None:
    """The dense peak TFLOP/s per precision of a known GPU; None when unknown."""
    if not device_name:
        return None
    for pattern, peaks in PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return peaks
    return None


def _all_or_null(column: str) -> pl.Expr:
    """The sum of `column` where no row's is null, else null (a figure all rows have)."""
    return pl.when(pl.col(column).null_count() == 0).then(pl.col(column).sum())


def _f(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Float64)


def _product_stages() -> list[dict[str, pl.Expr]]:
    """flops, elems (elements read and written) and shape of a matrix product (`_GEMM_OPS`)
    or a fused attention call (`_ATTENTION_OPS`), in stages of small expressions (as one
    tree, with each operand spelled out in every formula, polars took 70 ms to run them on a
    few hundred rows, whatever the cores: longer than all the rest of the FLOPs). Stage
    columns start with `_`.

    A product: M N K (and the batch) from its first two matrices; `aten::linear` multiplies
    by a transposed weight and flattens its input's leading dimensions into M. Attention:
    batch, heads, T (queries), S (keys) and the head size from Q and K, laid out B H T D, or
    B T H D for the flash/efficient kernels' own operators (`bthd`); the backward does the
    work `factor` times."""
    name, d = pl.col("op_name"), pl.col("dims")
    gemm_at = {k: v[0] for k, v in _GEMM_OPS.items()}
    spec = dict(_ATTENTION_OPS)
    at = name.replace_strict(
        {**gemm_at, **{k: v[0] for k, v in spec.items()}}, default=None, return_dtype=pl.Int64
    )
    first, second = pl.col("_first"), pl.col("_second")
    linear = name == "aten::linear"
    # a grouped product of a 2-D A (the groups' rows stacked) by a 3-D B is 2 M N K in all;
    # of a 3-D A, one product per group, as bmm
    batched = name.is_in(["aten::bmm", "aten::baddbmm"]) | (
        (name == "aten::_grouped_mm") & (first.list.len() == 3)
    )
    lead = first.list.head(first.list.len() - 1).list.eval(pl.element().product()).list.first()
    bthd = pl.col("_bthd")
    m, n, k, b = pl.col("_m"), pl.col("_n"), pl.col("_k"), pl.col("_b")
    h, t, s, dd = pl.col("_h"), pl.col("_t"), pl.col("_s"), pl.col("_d")
    factor, gemm = pl.col("_factor"), pl.col("gemm")
    return [
        {
            "_first": d.list.get(at, null_on_oob=True),
            "_second": d.list.get(at + 1, null_on_oob=True),
            "_bthd": name.is_in([k for k, v in spec.items() if v[1] == "bthd"]),
            "_factor": name.replace_strict(
                {k: v[2] for k, v in spec.items()}, default=None, return_dtype=pl.Float64
            ),
        },
        {  # a product's M N K and batch; attention's B H T S D (Q is `first`, K `second`)
            "_m": pl.when(linear).then(lead).otherwise(first.list.get(-2, null_on_oob=True)),
            "_k": first.list.get(-1, null_on_oob=True),
            "_n": pl.when(linear)
            .then(second.list.get(0, null_on_oob=True))
            .otherwise(second.list.get(-1, null_on_oob=True)),
            "_b": pl.when(gemm)
            .then(pl.when(batched).then(first.list.get(0, null_on_oob=True)).otherwise(1))
            .otherwise(first.list.get(0, null_on_oob=True)),
            "_h": first.list.get(pl.when(bthd).then(2).otherwise(1), null_on_oob=True),
            "_t": first.list.get(pl.when(bthd).then(1).otherwise(2), null_on_oob=True),
            "_s": second.list.get(pl.when(bthd).then(1).otherwise(2), null_on_oob=True),
            "_d": first.list.get(3, null_on_oob=True),
        },
        {
            "flops": pl.when(gemm)
            .then(2 * _f(b) * _f(m) * _f(n) * _f(k))
            .otherwise(4 * factor * _f(b) * _f(h) * _f(t) * _f(s) * _f(dd)),
            "elems": pl.when(gemm)
            .then(_f(b) * (_f(m) * _f(k) + _f(k) * _f(n) + _f(m) * _f(n)))
            # Q, K, V read and O written (the backward reads and writes as many again)
            .otherwise(factor * _f(b) * _f(h) * (2 * _f(t) + 2 * _f(s)) * _f(dd)),
            "shape": pl.when(gemm)
            .then(
                pl.when(b == 1)
                .then(pl.format("M{} N{} K{}", m, n, k))
                .otherwise(pl.format("b{} M{} N{} K{}", b, m, n, k))
            )
            .otherwise(pl.format("B{} H{} T{} S{} D{}", b, h, t, s, dd)),
        },
    ]


def _at(k: int) -> pl.Expr:
    """The place of argument `k` of `_CONV_OPS`' tuples for each row's operator (null for
    the backward; NO or YES where the operator has no such argument)."""
    return pl.col("op_name").replace_strict(
        {op: spec[k] for op, spec in _CONV_OPS.items()}, default=None, return_dtype=pl.Int64
    )


def _values(at: pl.Expr) -> pl.Expr:
    """The integers of the Concrete Inputs' argument at `at` (`"[2, 2]"`, `"1"`)."""
    text = pl.col("args").list.get(at, null_on_oob=True)
    return text.str.extract_all(r"-?\d+").cast(pl.List(pl.Int64))


def _spatial_value(values: str, at: pl.Expr, i: int, default: int) -> pl.Expr:
    """The `i`-th spatial value of a list argument (a one-element list applies to every
    dimension); `default` where the operator has no such argument."""
    v = pl.col(values)
    last = v.list.len().cast(pl.Int64) - 1
    got = v.list.get(pl.min_horizontal(last, i), null_on_oob=True)
    return pl.when(at < 0).then(pl.lit(default, pl.Int64)).otherwise(got)


def _conv_stages() -> list[dict[str, pl.Expr]]:
    """flops, elems and shape of a convolution, forward or backward (see the module
    docstring); null where its Concrete Inputs are not recorded. Columns added in stages,
    each expression small (one expression tree of all would take polars a third of a
    second to plan, on any trace)."""
    name, d = pl.col("op_name"), pl.col("dims")
    backward = pl.col("_backward")
    x, w, grad_out = pl.col("_x"), pl.col("_w"), pl.col("_grad_out")
    transposed, spatial = pl.col("_transposed"), pl.col("_spatial")
    at_t = _at(5)
    first = {
        "_backward": name == CONV_BACKWARD,
        # the backward's grad_output has the forward's output size, its input the forward's
        "_x": pl.when(name == CONV_BACKWARD)
        .then(d.list.get(1, null_on_oob=True))
        .otherwise(d.list.get(_at(0), null_on_oob=True)),
        "_w": pl.when(name == CONV_BACKWARD)
        .then(d.list.get(2, null_on_oob=True))
        .otherwise(d.list.get(_at(1), null_on_oob=True)),
        "_grad_out": d.list.get(0, null_on_oob=True),
        "_transposed": pl.when(name == CONV_BACKWARD)
        .then(pl.col("args").list.get(_CONV_BACKWARD_AT["transposed"], null_on_oob=True))
        .when(at_t == YES)
        .then(pl.lit("True"))
        .when(at_t == NO)
        .then(pl.lit("False"))
        .otherwise(pl.col("args").list.get(at_t, null_on_oob=True))
        .str.to_lowercase()
        .replace_strict({"true": True, "false": False}, default=None, return_dtype=pl.Boolean),
        "_mask": pl.col("args")
        .list.get(_CONV_BACKWARD_AT["mask"], null_on_oob=True)
        .str.extract_all(r"True|False"),
        **{f"_{k}": _values(_at(i)) for k, i in _CONV_PARAMS.items()},
    }
    # each spatial dimension's values, once (spelled out in every formula below, they made
    # the formulas' stage take 30 ms on 30 convolutions)
    values: dict[str, pl.Expr] = {
        f"_{k}{i}": _spatial_value(f"_{k}", _at(_CONV_PARAMS[k]), i, default)
        for k, default in (("stride", 1), ("padding", 0), ("dilation", 1), ("output_padding", 0))
        for i in range(_SPATIAL)
    }
    values["_groups0"] = _spatial_value("_groups", _at(7), 0, 1)
    second: dict[str, pl.Expr] = {
        "_spatial": w.list.len().cast(pl.Int64) - 2,
        "_n": x.list.get(0, null_on_oob=True),
        "_c_in": x.list.get(1, null_on_oob=True),
        # channels of the output: C_out of the weight, C_out / groups x groups of a
        # transposed one
        "_c_out": pl.when(backward)
        .then(grad_out.list.get(1, null_on_oob=True))
        .when(transposed)
        .then(w.list.get(1, null_on_oob=True) * pl.col("_groups0"))
        .otherwise(w.list.get(0, null_on_oob=True)),
        "_weight": w.list.eval(pl.element().cast(pl.Float64).product()).list.first(),
        "_passes": pl.when(backward)
        .then(
            (pl.col("_mask").list.get(0, null_on_oob=True) == "True").cast(pl.Float64)
            + (pl.col("_mask").list.get(1, null_on_oob=True) == "True").cast(pl.Float64)
        )
        .otherwise(1.0),
    }
    per_dim: dict[str, pl.Expr] = {}
    for i in range(_SPATIAL):
        size = x.list.get(2 + i, null_on_oob=True)
        k = w.list.get(2 + i, null_on_oob=True)
        stride, pad = pl.col(f"_stride{i}"), pl.col(f"_padding{i}")
        span = pl.col(f"_dilation{i}") * (k - 1)
        out = (
            pl.when(backward)
            .then(grad_out.list.get(2 + i, null_on_oob=True))
            .when(transposed)
            .then((size - 1) * stride - 2 * pad + span + pl.col(f"_output_padding{i}") + 1)
            .otherwise((size + 2 * pad - span - 1) // stride + 1)
        )
        inside = pl.lit(i) < spatial
        per_dim[f"_out{i}"] = pl.when(inside).then(out)
        per_dim[f"_in{i}"] = pl.when(inside).then(size)
        per_dim[f"_k{i}"] = pl.when(inside).then(k)

    def product(prefix: str) -> pl.Expr:
        p0, p1, p2 = (pl.col(f"{prefix}{i}").cast(pl.Float64).fill_null(1.0) for i in range(3))
        return p0 * p1 * p2

    # the positions a kernel must touch: a stride above the kernel's size skips input
    # positions (a transposed one leaves output positions out)
    touched = {
        **{
            f"_in_touched{i}": pl.min_horizontal(
                pl.col(f"_in{i}"), pl.col(f"_out{i}") * pl.col(f"_k{i}")
            )
            for i in range(_SPATIAL)
        },
        **{
            f"_out_touched{i}": pl.min_horizontal(
                pl.col(f"_out{i}"), pl.col(f"_in{i}") * pl.col(f"_k{i}")
            )
            for i in range(_SPATIAL)
        },
    }
    n = pl.col("_n").cast(pl.Float64)
    # one multiply-add per weight element and per output position (input position, for a
    # transposed convolution, whose weight is [C_in, C_out / groups, k...])
    positions = pl.when(transposed).then(product("_in")).otherwise(product("_out"))
    ok = (
        (x.list.len() == w.list.len())
        & spatial.is_between(1, _SPATIAL)
        & pl.col("args").is_not_null()
        & transposed.is_not_null()
    )
    inputs = n * pl.col("_c_in").cast(pl.Float64) * product("_in_touched")
    outputs = n * pl.col("_c_out").cast(pl.Float64) * product("_out_touched")
    last = {
        "flops": pl.when(ok).then(2 * n * positions * pl.col("_weight") * pl.col("_passes")),
        # input, weight and output each read or written once per pass, the positions a
        # kernel must touch only
        "elems": pl.when(ok).then((inputs + pl.col("_weight") + outputs) * pl.col("_passes")),
        # `x64x3x224x224 w64x3x7x7 o112x112`: input, weight, output positions
        "shape": pl.format(
            "x{} w{} {}{}",
            x.cast(pl.List(pl.String)).list.join("x"),
            w.cast(pl.List(pl.String)).list.join("x"),
            pl.when(transposed).then(pl.lit("transposed o")).otherwise(pl.lit("o")),
            pl.concat_str(
                [pl.col(f"_out{i}").cast(pl.String) for i in range(_SPATIAL)],
                separator="x",
                ignore_nulls=True,
            ),
        ),
    }
    return [first, values, second, per_dim, touched, last]


def _conv_ops(events: pl.LazyFrame) -> pl.LazyFrame:
    """The convolution operators of `events` with recorded shapes, as `shaped_ops` gives
    them plus args (their Concrete Inputs, a list of texts; null where not recorded): a few
    per layer and step, decoded row by row."""
    return events.filter(
        (pl.col("kind") == Kind.CPU_OP.value)
        & pl.col("name").is_in(CONV_OPS)
        & pl.col("input_dims").is_not_null()
        & pl.col("external_id").is_not_null()
    ).select(
        "rank",
        "external_id",
        op_start="start_ns",
        op_end="end_ns",
        op_name=pl.col("name").cast(pl.String),
        dims=pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))),
        types=pl.col("input_types").str.json_decode(pl.List(pl.String)),
        args=pl.col("concrete_inputs").str.json_decode(pl.List(pl.String)),
    )


def op_flops(
    timeline: Timeline, kernels: pl.DataFrame, measured: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Per (rank, device, step, op_name, precision, shape) of the operators in FLOP_OPS that
    launched GEMM-class kernels inside the windows: calls, flops, bytes, kernel_ns (their
    kernels' time inside the windows), measured_bytes (Nsight Compute's DRAM bytes of their
    kernels where every call's were measured, else null). No rows without recorded shapes.

    `kernels`: kernels inside the windows with kernel_class, verdict, clipped_ns and step;
    `measured`: rank, device, correlation, dram_bytes (`ncu_join.Matched.measured_bytes`;
    None without `--ncu`)."""
    # the few operators of these names, once: products and convolutions are read from them
    named = timeline.events.filter(pl.col("name").is_in(FLOP_OPS)).lazy()
    columns = ["rank", "external_id", "op_start", "op_end", "op_name"]
    products = shaped_ops(named.filter(~pl.col("name").is_in(CONV_OPS))).with_columns(
        gemm=pl.col("op_name").is_in(list(_GEMM_OPS)),
    )
    for stage in _product_stages():
        products = products.with_columns(**stage)
    products = (
        products.with_columns(
            dtype=pl.when(pl.col("gemm"))
            .then(
                pl.col("types").list.get(
                    pl.col("op_name").replace_strict(
                        {k: v[0] for k, v in _GEMM_OPS.items()},
                        default=0,
                        return_dtype=pl.Int64,
                    ),
                    null_on_oob=True,
                )
            )
            .otherwise(
                pl.col("types").list.get(
                    pl.col("op_name").replace_strict(
                        {k: v[0] for k, v in _ATTENTION_OPS.items()},
                        default=0,
                        return_dtype=pl.Int64,
                    ),
                    null_on_oob=True,
                )
            ),
        )
        .filter(pl.col("flops").is_not_null() & (pl.col("flops") > 0))
        .select(*columns, "flops", "elems", "shape", "dtype")
    )
    ops = products
    convs = _conv_ops(named).collect()
    if convs.height:
        # a convolution whose FLOPs are unknown (no Concrete Inputs) is kept, with null
        # FLOPs: its calls and kernel time are told apart (`unknown` in device_flops)
        conv_flops = convs.lazy()
        for stage in _conv_stages():
            conv_flops = conv_flops.with_columns(**stage)
        ops = pl.concat(
            [
                products,
                conv_flops.with_columns(dtype=pl.col("types").list.get(0, null_on_oob=True))
                .filter(pl.col("flops").is_null() | (pl.col("flops") > 0))
                .select(*columns, "flops", "elems", "shape", "dtype"),
            ]
        )
    gemms = (
        kernels.lazy()
        .filter(pl.col("kernel_class").cast(pl.String) == "gemm")
        .select(*DEVICE_KEY, "correlation", "clipped_ns", "step", tc=pl.col("verdict") == "tc")
    )
    gemms = (
        gemms.join(measured.lazy(), on=[*DEVICE_KEY, "correlation"], how="left")
        if measured is not None
        else gemms.with_columns(dram_bytes=pl.lit(None, pl.Int64))
    )
    per_call = (
        gemms.join(launch_ops(timeline), on=["rank", "correlation"])
        .join(ops, left_on=["rank", "op_link"], right_on=["rank", "external_id"])
        .filter(pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end")))
        .group_by(*DEVICE_KEY, "op_link")
        .agg(
            pl.col("step", "op_name", "flops", "elems", "shape", "dtype").first(),
            kernel_ns=pl.col("clipped_ns").sum(),
            tc=pl.col("tc").any(),
            measured_bytes=pl.when(pl.col("dram_bytes").null_count() == 0).then(
                pl.col("dram_bytes").sum().cast(pl.Float64)
            ),
        )
    )
    precision = (
        pl.col("dtype")
        .replace_strict(PRECISION_OF_DTYPE, default=None, return_dtype=pl.String)
        .fill_null("other")
    )
    return (
        per_call.with_columns(
            precision=pl.when((precision == "fp32") & pl.col("tc"))
            .then(pl.lit("tf32"))
            .otherwise(precision)
        )
        .with_columns(
            bytes=pl.col("elems")
            * pl.col("precision").replace_strict(_ELEMENT_BYTES, default=4, return_dtype=pl.Float64)
        )
        .group_by(*DEVICE_KEY, "step", "op_name", "precision", "shape")
        .agg(
            calls=pl.len().cast(pl.Int64),
            # null for convolutions whose FLOPs are unknown (no Concrete Inputs)
            flops=pl.when(pl.col("flops").null_count() == 0).then(pl.col("flops").sum()),
            bytes=pl.when(pl.col("bytes").null_count() == 0).then(pl.col("bytes").sum()),
            kernel_ns=pl.col("kernel_ns").sum(),
            measured_bytes=_all_or_null("measured_bytes"),
        )
        .sort(*DEVICE_KEY, "step", "op_name", "precision", "shape", nulls_last=True)
        .collect()
    )


@dataclass(frozen=True, slots=True)
class Flops:
    """FLOPs of a job's devices (see the module docstring).

    - `devices`: rank, device, steps, model_flops_per_step, step_ns (the mean steady step of
      the device), achieved_tflops (FLOPs per step over the step), gemm_ns (the kernel time
      of the counted operators), gemm_tflops (their FLOPs over their kernel time), dtype (the
      precision that carries most FLOPs), peak_tflops (the GPU's dense peak at it, null where
      the GPU is unknown), peak_gbps (its memory bandwidth), coverage (the counted
      operators' kernel time over every GEMM-class kernel's on the device), mfu (achieved
      over peak; null where coverage is under MIN_COVERAGE), gemm_efficiency (gemm_tflops
      over peak), hardware_flops_per_step and hfu (every FLOP the GPU ran, the forwards that
      activation checkpointing recomputes too, and their rate over the peak: `with_hardware`;
      equal to the model's figures where nothing is recomputed).
    - `roofline`: per (rank, device, op_name, precision, shape): calls, flops, bytes,
      kernel_ns, intensity (FLOPs per byte), achieved_tflops, roof_tflops (min(peak,
      intensity x peak bandwidth)), share_of_roof, source ("ncu": `bytes` are Nsight
      Compute's DRAM bytes, every call measured; "shapes": estimated from the shapes) and
      estimated_bytes (the shapes' estimate); most kernel time first.
    - `unknown`: per (rank, device, op_name): calls and kernel_ns (in the steady steps) of
      the convolutions that launched GEMM-class kernels but whose FLOPs are unknown (the
      trace records no `Concrete Inputs`: their stride, padding, dilation, which gradients
      a backward computes); they are in no figure above. Empty where there are none.
    """

    devices: pl.DataFrame
    roofline: pl.DataFrame
    unknown: pl.DataFrame


#: The roofline's columns, in order.
ROOFLINE_COLUMNS = (
    "rank",
    "device",
    "op_name",
    "precision",
    "shape",
    "calls",
    "flops",
    "bytes",
    "kernel_ns",
    "intensity",
    "achieved_tflops",
    "roof_tflops",
    "share_of_roof",
    "source",
    "estimated_bytes",
)

#: The keys of `op_flops`' rows, and the columns that add up.
_OP_KEYS = ["rank", "device", "step", "op_name", "precision", "shape"]
_OP_SUMS = ["calls", "flops", "bytes", "kernel_ns"]


def less(ops: pl.DataFrame, taken: pl.DataFrame) -> pl.DataFrame:
    """`op_flops` rows less the rows `taken` (op_flops of a subset of the same kernels: the
    recomputed forward, causes/recompute.py), key by key: the model's FLOPs, each forward
    once. Rows left with no call are dropped."""
    if taken.height == 0:
        return ops
    minus = taken.select(
        *_OP_KEYS, *[pl.col(c).alias(f"_{c}") for c in _OP_SUMS], _measured="measured_bytes"
    )
    return (
        ops.join(minus, on=_OP_KEYS, how="left", nulls_equal=True)
        .with_columns((pl.col(c) - pl.col(f"_{c}").fill_null(0)).alias(c) for c in _OP_SUMS)
        # ncu's bytes less the taken calls' where these were measured too; else unknown
        .with_columns(
            measured_bytes=pl.when(pl.col("_calls").is_null())
            .then("measured_bytes")
            .otherwise(pl.col("measured_bytes") - pl.col("_measured"))
        )
        .with_columns(pl.col("calls").cast(pl.Int64), pl.col("kernel_ns").cast(pl.Int64))
        .drop([f"_{c}" for c in _OP_SUMS], "_measured")
        .filter(pl.col("calls") > 0)
    )


def with_hardware(model: Flops, hardware: Flops) -> Flops:
    """`model`'s figures (each forward counted once) with the hardware's beside them:
    `hardware_flops_per_step` (every FLOP the GPU ran, recomputed forwards too) and `hfu`
    (hardware FLOPs utilisation: their rate over the peak), per device."""
    hw = hardware.devices.select(
        *DEVICE_KEY, hardware_flops_per_step="model_flops_per_step", hfu="mfu"
    )
    return Flops(
        devices=model.devices.join(hw, on=DEVICE_KEY, how="left"),
        roofline=model.roofline,
        unknown=model.unknown,
    )


#: MFU is given only where the counted operators' kernels hold at least this share of the
#: device's GEMM-class kernel time: a network whose matrix work runs elsewhere (convolutions,
#: custom kernels: not counted) would get an MFU of a fraction of its work.
MIN_COVERAGE = 0.5


def device_flops(
    ops: pl.DataFrame,
    steps: pl.DataFrame,
    windows: pl.DataFrame,
    devices: Sequence[DeviceInfo],
    gemm_time: pl.DataFrame | None = None,
) -> Flops:
    """The job's FLOPs per device and steady step. `ops`: every rank's `op_flops`; `steps`:
    Metrics.steps.steady (device steps; empty without step markers: the window is one step);
    `windows`: Metrics.steps.windows; `gemm_time`: rank, device, gemm_ns (every GEMM-class
    kernel's time in the window: Metrics.devices.summary), for `coverage`."""
    if steps.height:
        timing = steps.group_by(DEVICE_KEY).agg(
            steps=pl.len().cast(pl.Int64), span_ns=(pl.col("end_ns") - pl.col("start_ns")).sum()
        )
        counted = ops.join(steps.select(*DEVICE_KEY, "step"), on=[*DEVICE_KEY, "step"], how="semi")
    else:
        timing = windows.select(
            *DEVICE_KEY, steps=pl.lit(1, pl.Int64), span_ns=pl.col("end_ns") - pl.col("start_ns")
        )
        counted = ops
    unknown = (
        counted.filter(pl.col("flops").is_null())
        .group_by(*DEVICE_KEY, "op_name")
        .agg(pl.col("calls", "kernel_ns").sum())
        .sort(*DEVICE_KEY, "op_name")
    )
    counted = counted.filter(pl.col("flops").is_not_null())
    by_precision = counted.group_by(*DEVICE_KEY, "precision").agg(pl.col("flops").sum())
    top = (
        by_precision.sort("flops", "precision", descending=[True, False])
        .group_by(DEVICE_KEY, maintain_order=True)
        .first()
        .select(*DEVICE_KEY, dtype="precision")
    )
    totals = counted.group_by(DEVICE_KEY).agg(
        flops=pl.col("flops").sum(), gemm_ns=pl.col("kernel_ns").sum()
    )
    peaks = {(d.rank, d.device): peak_tflops(d.name) for d in devices}
    bandwidth = {(d.rank, d.device): peak_bandwidth_gbps(d.name, d.memory_bytes) for d in devices}
    rows = totals.join(timing, on=DEVICE_KEY).join(top, on=DEVICE_KEY, how="left")
    peak = [
        (peaks.get((r, d)) or {}).get(dt) if dt else None
        for r, d, dt in rows.select(*DEVICE_KEY, "dtype").iter_rows()
    ]
    bw = [bandwidth.get((r, d)) for r, d in rows.select(DEVICE_KEY).iter_rows()]
    dev = (
        rows.with_columns(
            peak_tflops=pl.Series(peak, dtype=pl.Float64), peak_gbps=pl.Series(bw, dtype=pl.Float64)
        )
        .select(
            *DEVICE_KEY,
            "steps",
            model_flops_per_step=pl.col("flops") / pl.col("steps"),
            step_ns=pl.col("span_ns") // pl.col("steps"),
            achieved_tflops=pl.col("flops") / pl.col("span_ns") / 1e3,
            gemm_ns="gemm_ns",
            gemm_tflops=pl.when(pl.col("gemm_ns") > 0).then(
                pl.col("flops") / pl.col("gemm_ns") / 1e3
            ),
            dtype="dtype",
            peak_tflops="peak_tflops",
            peak_gbps="peak_gbps",
        )
        .join(
            gemm_time.select(*DEVICE_KEY, _all_gemm="gemm_ns")
            if gemm_time is not None
            else rows.select(DEVICE_KEY).with_columns(_all_gemm=pl.lit(None, pl.Int64)),
            on=DEVICE_KEY,
            how="left",
        )
        .with_columns(
            coverage=pl.when(pl.col("_all_gemm") > 0).then(
                (pl.col("gemm_ns") / pl.col("_all_gemm")).clip(upper_bound=1.0)
            )
        )
        .drop("_all_gemm")
        .with_columns(
            mfu=pl.when(pl.col("coverage").is_null() | (pl.col("coverage") >= MIN_COVERAGE)).then(
                pl.col("achieved_tflops") / pl.col("peak_tflops")
            ),
            gemm_efficiency=pl.col("gemm_tflops") / pl.col("peak_tflops"),
        )
        .sort(DEVICE_KEY)
    )
    roof = (
        counted.group_by(*DEVICE_KEY, "op_name", "precision", "shape")
        .agg(
            pl.col("calls", "flops", "bytes", "kernel_ns").sum(),
            _ncu=_all_or_null("measured_bytes"),
        )
        # ncu's DRAM bytes where every call of the row was measured, else the shapes'
        .with_columns(
            source=pl.when(pl.col("_ncu").is_not_null())
            .then(pl.lit("ncu"))
            .otherwise(pl.lit("shapes")),
            estimated_bytes="bytes",
            bytes=pl.coalesce("_ncu", "bytes"),
        )
        .drop("_ncu")
    )
    peak_of = [
        (peaks.get((r, d)) or {}).get(p)
        for r, d, p in roof.select(*DEVICE_KEY, "precision").iter_rows()
    ]
    bw_of = [bandwidth.get((r, d)) for r, d in roof.select(DEVICE_KEY).iter_rows()]
    intensity = pl.col("flops") / pl.col("bytes")
    roofline = (
        roof.with_columns(
            _peak=pl.Series(peak_of, dtype=pl.Float64), _bw=pl.Series(bw_of, dtype=pl.Float64)
        )
        .with_columns(
            intensity=intensity,
            achieved_tflops=pl.when(pl.col("kernel_ns") > 0).then(
                pl.col("flops") / pl.col("kernel_ns") / 1e3
            ),
            # GB/s x FLOP/B = GFLOP/s; / 1e3 = TFLOP/s
            roof_tflops=pl.min_horizontal(pl.col("_peak"), intensity * pl.col("_bw") / 1e3),
        )
        .with_columns(share_of_roof=pl.col("achieved_tflops") / pl.col("roof_tflops"))
        .drop("_peak", "_bw")
        .select(*ROOFLINE_COLUMNS)
        .sort(
            ["kernel_ns", "rank", "device", "op_name", "shape"],
            descending=[True, False, False, False, False],
        )
    )
    return Flops(devices=dev, roofline=roofline, unknown=unknown)
