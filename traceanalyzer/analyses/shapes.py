"""Matrix-multiply shapes from recorded operator inputs, and whether they suit Tensor Cores.

Tensor Cores work on tiles: cuBLAS reaches full speed when M, N and K are multiples of 8
for 16-bit types (16 for 8-bit types, 4 for TF32/fp32). Where the trace records input shapes
(`record_shapes=True`), each matmul operator's dimensions are read from them:

- `aten::mm(A[M,K], B[K,N])`, `aten::addmm(bias, A[M,K], B[K,N])`;
- `aten::bmm(A[b,M,K], B[b,K,N])`, `aten::baddbmm(C, A, B)`;
- `aten::linear(x[..., K], W[N, K], bias)`: M is the product of x's leading dimensions.

The GEMM-class kernels each operator launched (same rank and external id, launch inside the
operator) give its GPU time.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.operators import launch_ops, shaped_ops
from traceanalyzer.analyses.windows import DEVICE_KEY
from traceanalyzer.model import Timeline

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
