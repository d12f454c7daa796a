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

Only the operator that launched the kernels counts (the one whose `External id` the launch
carries: `aten::linear` that calls `aten::addmm` is counted once, as `addmm`), and only for
GEMM-class kernels inside the windows. Bytes (for the roofline): each operand read once and
the output written once (A, B and C of a product; Q, K, V and O of attention), at the
operands' element size. Precision: the first matrix operand's dtype (`bf16`, `fp16`,
`fp8`), `fp32` inputs as `tf32` where their kernels run on Tensor Cores, else `fp32`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.bandwidth import peak_bandwidth_gbps
from traceanalyzer.analyses.operators import launch_ops, shaped_ops
from traceanalyzer.analyses.windows import DEVICE_KEY
from traceanalyzer.model import DeviceInfo, Timeline

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
FLOP_OPS = [*_GEMM_OPS, *_ATTENTION_OPS]


def peak_tflops(device_name: str | None) -> dict[str, float] | None:
    """The dense peak TFLOP/s per precision of a known GPU; None when unknown."""
    if not device_name:
        return None
    for pattern, peaks in PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return peaks
    return None


def _f(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Float64)


def _gemm_columns() -> dict[str, pl.Expr]:
    """flops, bytes_elems (elements read and written) and shape of a matrix product."""
    name, d = pl.col("op_name"), pl.col("dims")
    a_at = pl.col("op_name").replace_strict(
        {k: v[0] for k, v in _GEMM_OPS.items()}, default=None, return_dtype=pl.Int64
    )
    first = d.list.get(a_at, null_on_oob=True)
    second = d.list.get(a_at + 1, null_on_oob=True)
    linear = name == "aten::linear"
    # a grouped product of a 2-D A (the groups' rows stacked) by a 3-D B is 2 M N K in all;
    # of a 3-D A, one product per group, as bmm
    batched = name.is_in(["aten::bmm", "aten::baddbmm"]) | (
        (name == "aten::_grouped_mm") & (first.list.len() == 3)
    )
    lead = first.list.head(first.list.len() - 1).list.eval(pl.element().product()).list.first()
    m = pl.when(linear).then(lead).otherwise(first.list.get(-2, null_on_oob=True))
    k = first.list.get(-1, null_on_oob=True)
    n = (
        pl.when(linear)
        .then(second.list.get(0, null_on_oob=True))
        .otherwise(second.list.get(-1, null_on_oob=True))
    )
    b = pl.when(batched).then(first.list.get(0, null_on_oob=True)).otherwise(1)
    return {
        "flops": 2 * _f(b) * _f(m) * _f(n) * _f(k),
        "elems": _f(b) * (_f(m) * _f(k) + _f(k) * _f(n) + _f(m) * _f(n)),
        "shape": pl.when(b == 1)
        .then(pl.format("M{} N{} K{}", m, n, k))
        .otherwise(pl.format("b{} M{} N{} K{}", b, m, n, k)),
    }


def _attention_columns() -> dict[str, pl.Expr]:
    """flops, elems and shape of a fused attention call."""
    spec = {k: v for k, v in _ATTENTION_OPS.items()}
    q_at = pl.col("op_name").replace_strict(
        {k: v[0] for k, v in spec.items()}, default=None, return_dtype=pl.Int64
    )
    bthd = pl.col("op_name").is_in([k for k, v in spec.items() if v[1] == "bthd"])
    factor = pl.col("op_name").replace_strict(
        {k: v[2] for k, v in spec.items()}, default=None, return_dtype=pl.Float64
    )
    q = pl.col("dims").list.get(q_at, null_on_oob=True)
    kk = pl.col("dims").list.get(q_at + 1, null_on_oob=True)
    b = q.list.get(0, null_on_oob=True)
    h = (
        pl.when(bthd)
        .then(q.list.get(2, null_on_oob=True))
        .otherwise(q.list.get(1, null_on_oob=True))
    )
    t = (
        pl.when(bthd)
        .then(q.list.get(1, null_on_oob=True))
        .otherwise(q.list.get(2, null_on_oob=True))
    )
    s = (
        pl.when(bthd)
        .then(kk.list.get(1, null_on_oob=True))
        .otherwise(kk.list.get(2, null_on_oob=True))
    )
    dd = q.list.get(3, null_on_oob=True)
    return {
        "flops": 4 * factor * _f(b) * _f(h) * _f(t) * _f(s) * _f(dd),
        # Q, K, V read and O written (the backward reads and writes as many again)
        "elems": factor * _f(b) * _f(h) * (2 * _f(t) + 2 * _f(s)) * _f(dd),
        "shape": pl.format("B{} H{} T{} S{} D{}", b, h, t, s, dd),
    }


def op_flops(timeline: Timeline, kernels: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device, step, op_name, precision, shape) of the operators in FLOP_OPS that
    launched GEMM-class kernels inside the windows: calls, flops, bytes, kernel_ns (their
    kernels' time inside the windows). No rows without recorded shapes.

    `kernels`: kernels inside the windows with kernel_class, verdict, clipped_ns and step."""
    ops = (
        shaped_ops(timeline.events.lazy().filter(pl.col("name").is_in(FLOP_OPS)))
        .with_columns(
            gemm=pl.col("op_name").is_in(list(_GEMM_OPS)),
        )
        .with_columns(
            **{
                c: pl.when(pl.col("gemm")).then(g).otherwise(a)
                for (c, g), a in zip(
                    _gemm_columns().items(), _attention_columns().values(), strict=True
                )
            },
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
        .select(
            "rank",
            "external_id",
            "op_start",
            "op_end",
            "op_name",
            "flops",
            "elems",
            "shape",
            "dtype",
        )
    )
    per_call = (
        kernels.lazy()
        .filter(pl.col("kernel_class").cast(pl.String) == "gemm")
        .select(*DEVICE_KEY, "correlation", "clipped_ns", "step", tc=pl.col("verdict") == "tc")
        .join(launch_ops(timeline), on=["rank", "correlation"])
        .join(ops, left_on=["rank", "op_link"], right_on=["rank", "external_id"])
        .filter(pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end")))
        .group_by(*DEVICE_KEY, "op_link")
        .agg(
            pl.col("step", "op_name", "flops", "elems", "shape", "dtype").first(),
            kernel_ns=pl.col("clipped_ns").sum(),
            tc=pl.col("tc").any(),
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
            flops=pl.col("flops").sum(),
            bytes=pl.col("bytes").sum(),
            kernel_ns=pl.col("kernel_ns").sum(),
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
      over peak).
    - `roofline`: per (rank, device, op_name, precision, shape): calls, flops, bytes,
      kernel_ns, intensity (FLOPs per byte), achieved_tflops, roof_tflops (min(peak,
      intensity x peak bandwidth)), share_of_roof; most kernel time first.
    """

    devices: pl.DataFrame
    roofline: pl.DataFrame


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
    Metrics.steps (device steps; empty without step markers: the window is one step);
    `windows`: Metrics.windows; `gemm_time`: rank, device, gemm_ns (every GEMM-class
    kernel's time in the window: Metrics.devices), for `coverage`."""
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
    roof = counted.group_by(*DEVICE_KEY, "op_name", "precision", "shape").agg(
        pl.col("calls", "flops", "bytes", "kernel_ns").sum()
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
        .sort(
            ["kernel_ns", "rank", "device", "op_name", "shape"],
            descending=[True, False, False, False, False],
        )
    )
    return Flops(devices=dev, roofline=roofline)
