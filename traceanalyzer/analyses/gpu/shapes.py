"""Matrix-multiply shapes from recorded operator inputs, and whether they suit Tensor Cores.

Tensor Cores work on tiles: cuBLAS reaches full speed when M, N and K are multiples of 8
for 16-bit types (16 for 8-bit types, 4 for TF32/fp32). Where the trace records input shapes
(`record_shapes=True`), each matmul operator's dimensions are read from them:

- `aten::mm(A[M,K], B[K,N])`, `aten::addmm(bias, A[M,K], B[K,N])`;
- `aten::bmm(A[b,M,K], B[b,K,N])`, `aten::baddbmm(C, A, B)`;
- `aten::linear(x[..., K], W[N, K], bias)`: M is the product of x's leading dimensions.

The GEMM-class kernels each operator launched (same rank and external id, launch inside the
operator) give its GPU time.

`shape_impact` prices padding the misaligned ones (TA006's impact model).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.operators import launch_ops, shaped_ops
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, StepCounts
from traceanalyzer.model import DeviceInfo, Timeline

#: The alignment each element type wants (elements), by the dtype names torch records.
ALIGN_BY_DTYPE: dict[str, int] = {
    "c10::Half": 8,
    "c10::BFloat16": 8,
    "c10::Float8_e4m3fn": 16,
    "c10::Float8_e5m2": 16,
    "signed char": 16,
    "float": 4,
}

_MATMULS = ["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear"]


def _dims() -> dict[str, pl.Expr]:
    """M, N, K expressions over `dims` (list of input shapes) and the operator name."""
    name = pl.col("op_name")
    d = pl.col("dims")
    # index of the first matrix operand: addmm/baddbmm have a bias/input first
    a = pl.when(name.is_in(["aten::addmm", "aten::baddbmm"])).then(1).otherwise(0)
    first = d.list.get(a, null_on_oob=True)
    second = d.list.get(a + 1, null_on_oob=True)
    is_linear = name == "aten::linear"
    m = (
        pl.when(is_linear)
        .then(first.list.head(first.list.len() - 1).list.eval(pl.element().product()).list.first())
        .otherwise(first.list.get(-2, null_on_oob=True))
    )
    k = first.list.get(-1, null_on_oob=True)
    n = (
        pl.when(is_linear)
        .then(second.list.get(0, null_on_oob=True))
        .otherwise(second.list.get(-1, null_on_oob=True))
    )
    return {"m": m, "n": n, "k": k}


def matmul_shapes(timeline: Timeline, kernels: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device, op_name, m, n, k, dtype): calls, kernel_ns, align (elements the dtype
    wants), misaligned (the dims that are not multiples of it, e.g. "N,K"); most time first.

    `kernels`: kernels inside the windows with kernel_class and clipped_ns.
    """
    ops = (
        # compared as categories: casting every event's name to text costs more than the rest
        shaped_ops(timeline.events.lazy().filter(pl.col("name").is_in(_MATMULS)))
        .with_columns(dtype=pl.col("types").list.get(0, null_on_oob=True))
        .with_columns(**_dims())
        .filter(pl.col("m").is_not_null() & pl.col("n").is_not_null() & pl.col("k").is_not_null())
    )
    launches = launch_ops(timeline)
    align = pl.col("dtype").replace_strict(ALIGN_BY_DTYPE, default=None, return_dtype=pl.Int64)
    off = [pl.when(pl.col(x) % pl.col("align") != 0).then(pl.lit(x.upper())) for x in "mnk"]
    return (
        kernels.lazy()
        .filter(pl.col("kernel_class").cast(pl.String) == "gemm")
        .select(*DEVICE_KEY, "correlation", "clipped_ns")
        .join(launches, on=["rank", "correlation"])
        .join(ops, left_on=["rank", "op_link"], right_on=["rank", "external_id"])
        .filter(pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end")))
        .group_by(*DEVICE_KEY, "op_name", "m", "n", "k", "dtype")
        .agg(
            calls=pl.col("op_link").n_unique().cast(pl.Int64),
            kernel_ns=pl.col("clipped_ns").sum(),
        )
        .with_columns(align=align)
        .with_columns(misaligned=pl.concat_str(off, separator=",", ignore_nulls=True))
        .with_columns(
            misaligned=pl.when(pl.col("align").is_null() | (pl.col("misaligned") == ""))
            .then(None)
            .otherwise(pl.col("misaligned"))
        )
        .sort(
            ["kernel_ns", "rank", "device", "op_name", "m", "n", "k", "dtype"],
            descending=[True, False, False, False, False, False, False, False],
            nulls_last=True,
        )
        .collect()
    )


def fewer_rows_ns(shapes: pl.DataFrame, rows: int) -> tuple[int, int]:
    """The kernel time of the matmul shapes with fewer than `rows` rows (M), and of all of
    them (`shapes`: Metrics.shapes.matmuls): products of a few rows are tokens being decoded."""
    total = int(shapes["kernel_ns"].sum() or 0)
    return int(shapes.filter(pl.col("m") < rows)["kernel_ns"].sum() or 0), total


def has_misaligned(shapes: pl.DataFrame, rank: int, device: int) -> bool:
    """Whether (rank, device) runs a misaligned matmul shape (`shapes`: Metrics.shapes.matmuls)."""
    mine = (pl.col("rank") == rank) & (pl.col("device") == device)
    return shapes.filter(mine & pl.col("misaligned").is_not_null()).height > 0


#: Dense 16-bit Tensor Core peak (FLOP/s) by device name; first match wins (field notes).
PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    (r"B200|B100", 2250e12),
    (r"H100|H200|H800|GH200", 990e12),
    (r"A100|A800", 312e12),
    (r"V100", 125e12),
    (r"MI300X", 1307e12),
    (r"MI250", 383e12),
)
#: The share of the peak a well-shaped large GEMM reaches (an 8192^3 bf16 matmul on an H100
#: runs at about 790 of 990 TFLOP/s).
ACHIEVABLE = 0.8
#: Operators whose M, N, K describe the whole product (bmm shapes leave the batch out).
FLOP_OPS = ["aten::mm", "aten::addmm", "aten::linear"]


@dataclass(frozen=True, slots=True)
class ShapeImpact:
    """What padding one device's misaligned matmul shapes saves (TA006's impact model,
    `shape_impact`).

    - `gemm_ns`, `kernel_ns`: the device's GEMM-class and all kernel time (Metrics.devices);
    - `misaligned`: its misaligned shapes (Metrics.shapes.matmuls' rows and order), matrix-
      vector products left out (only M misaligned, with fewer rows than the tile: M = 1
      while decoding one token at a time; padding M would do 8x the work in the same time);
      `misaligned_ns`: their kernel time;
    - `token_rows`: the rows of the device's linear layers' inputs (batch x tokens): a user
      cannot pad them the way they pad a weight;
    - `reference_flops`: the FLOP/s the shapes would run at aligned, `reference` what it is
      (this device's aligned GEMMs, or ACHIEVABLE of the GPU's peak; None, "unknown",
      where neither is known);
    - `excess_ns`: the misaligned time less its time at `reference_flops` (None without a
      reference); `impact_ns`: it per steady step (None without a reference or steps);
      `ceiling_ns`: `misaligned_ns` per steady step (None without steps).
    """

    rank: int
    device: int
    gemm_ns: int
    kernel_ns: int | None
    misaligned: pl.DataFrame
    misaligned_ns: int
    token_rows: frozenset[int]
    reference_flops: float | None
    reference: str
    excess_ns: int | None
    impact_ns: int | None
    ceiling_ns: int | None


def shape_impact(
    shapes: pl.DataFrame,
    devices: pl.DataFrame,
    infos: Sequence[DeviceInfo],
    counts: StepCounts,
) -> tuple[ShapeImpact, ...]:
    """Each device's ShapeImpact, in the order of `devices` (Metrics.devices.summary).

    The misaligned GEMMs' time minus their time at the throughput the device's aligned GEMMs
    reach (FLOPs of `aten::mm`/`addmm`/`linear` shapes over their kernel time, 16-bit ones
    where there are any), or, with no aligned GEMM, at ACHIEVABLE of the GPU's dense 16-bit
    peak (PEAK_FLOPS, by the device's name in `infos`). `bmm` shapes leave out their batch,
    so their excess is not counted.

    `shapes`: Metrics.shapes.matmuls; `counts`: the steps each device's window holds."""
    gemv = (pl.col("misaligned") == "M") & (pl.col("m") < pl.col("align"))
    odd_shapes = shapes.filter(pl.col("misaligned").is_not_null() & ~gemv)
    names = {(d.rank, d.device): d.name for d in infos}
    out = []
    for d in devices.iter_rows(named=True):
        rank, device = d["rank"], d["device"]
        mine = (pl.col("rank") == rank) & (pl.col("device") == device)
        here, odd = shapes.filter(mine), odd_shapes.filter(mine)
        odd_ns = int(odd["kernel_ns"].sum() or 0)
        tput, basis = _throughput(here, names.get((rank, device)))
        excess = _excess_ns(odd, tput) if tput else None
        out.append(
            ShapeImpact(
                rank=rank,
                device=device,
                gemm_ns=d["gemm_ns"] or 0,
                kernel_ns=d["kernel_ns"],
                misaligned=odd,
                misaligned_ns=odd_ns,
                token_rows=_token_rows(here),
                reference_flops=tput,
                reference=basis,
                excess_ns=excess,
                impact_ns=counts.per_step(excess, rank, device) if excess is not None else None,
                ceiling_ns=counts.per_step(odd_ns, rank, device),
            )
        )
    return tuple(out)


def _flops() -> pl.Expr:
    """2 M N K per call, times the calls."""
    return 2 * pl.col("m").cast(pl.Float64) * pl.col("n") * pl.col("k") * pl.col("calls")


def _throughput(shapes: pl.DataFrame, device_name: str | None) -> tuple[float | None, str]:
    """FLOP/s that this device's aligned GEMMs reach (16-bit where it has them), else the
    GPU's achievable peak; None when neither is known."""
    aligned = shapes.filter(
        pl.col("misaligned").is_null()
        & pl.col("align").is_not_null()
        & pl.col("op_name").is_in(FLOP_OPS)
        & (pl.col("kernel_ns") > 0)
    )
    half = aligned.filter(pl.col("align") >= 8)
    ref = half if half.height else aligned
    if ref.height:
        flops = float(ref.select(_flops().sum()).item() or 0.0)
        ns = float(ref["kernel_ns"].sum() or 0)
        if flops > 0 and ns > 0:
            return flops / ns * 1e9, "this trace's aligned GEMMs"
    for pattern, peak in PEAK_FLOPS:
        if device_name and re.search(pattern, device_name):
            return peak * ACHIEVABLE, f"{ACHIEVABLE:.0%} of the GPU's peak"
    return None, "unknown"


def _excess_ns(odd: pl.DataFrame, tput: float) -> int:
    """The misaligned GEMMs' time minus their time at `tput` FLOP/s (never negative)."""
    mine = odd.filter(pl.col("op_name").is_in(FLOP_OPS))
    if not mine.height:
        return 0
    ideal = mine.with_columns(ideal_ns=_flops() / tput * 1e9)
    return int(
        ideal.select((pl.col("kernel_ns") - pl.col("ideal_ns")).clip(lower_bound=0).sum()).item()
        or 0
    )


def _token_rows(shapes: pl.DataFrame) -> frozenset[int]:
    """Row counts of the linear layers' inputs (batch x tokens)."""
    rows = shapes.filter(pl.col("op_name").is_in(["aten::linear", "aten::addmm"]))["m"]
    return frozenset(int(v) for v in rows.drop_nulls().to_list())


@dataclass(frozen=True, slots=True)
class Shapes:
    """The matrix products' shapes (Metrics.shapes).

    - `matmuls`: rank, device, op_name, m, n, k, dtype, calls, kernel_ns, align,
      misaligned: per device, operator, shape and dtype, longest first (`matmul_shapes`).

    Its frame is checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "matmuls": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "op_name": pl.String,
            "m": pl.Int64,
            "n": pl.Int64,
            "k": pl.Int64,
            "dtype": pl.String,
            "calls": pl.Int64,
            "kernel_ns": pl.Int64,
            "align": pl.Int64,
            "misaligned": pl.String,
        }
    }

    matmuls: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.shapes", self.SCHEMAS)
