"""GEMM-class kernels that do not run on Tensor Cores, and the evidence for each verdict.

Analyses stage. `tensor_cores.tensor_core_summary` says how much GEMM time ran off Tensor
Cores; this summary says which kernels it was and why the tool thinks so (the name evidence,
e.g. "name: sgemm (SIMT)", or "op dtype fp32, no TF32 token"), with the precision of the
operator that launched them, so a diagnosis can tell FP32-without-TF32 from 16-bit GEMMs that
fell off the fast path.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.windows import DEVICE_KEY

#: How many kernels per device the summary keeps.
DEFAULT_TOP_NON_TC = 5


def non_tensor_core_gemms(kernels: pl.DataFrame, top_n: int = DEFAULT_TOP_NON_TC) -> pl.DataFrame:
    """Per (rank, device, name, evidence, op_dtype) of GEMM-class kernels with verdict "no":
    count and total_ns (time inside the window); the `top_n` by time per device, most time
    first.

    `kernels`: kernels inside the windows with kernel_class, verdict, evidence, op_dtype and
    clipped_ns (as `analyze` classifies them).
    """
    return (
        kernels.lazy()
        .filter(
            (pl.col("kernel_class").cast(pl.String) == "gemm")
            & (pl.col("verdict").cast(pl.String) == "no")
        )
        .group_by(
            *DEVICE_KEY,
            name=pl.col("name").cast(pl.String),
            evidence=pl.col("evidence").cast(pl.String),
            op_dtype=pl.col("op_dtype").cast(pl.String),
        )
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("clipped_ns").sum().cast(pl.Int64))
        .sort(*DEVICE_KEY, "total_ns", "name", descending=[False, False, True, False])
        .group_by(DEVICE_KEY, maintain_order=True)
        .head(top_n)
        .collect()
    )
