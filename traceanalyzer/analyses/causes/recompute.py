"""Activation recomputation: forward operators run again inside the backward pass.

Activation checkpointing (`torch.utils.checkpoint`) keeps a block's inputs instead of its
activations and runs the block's forward again when the backward needs them. The non-reentrant
kind (`use_reentrant=False`, the default advised) leaves no range of its own: its recompute
runs as ordinary forward operators (`aten::linear`, `aten::layer_norm`,
`aten::scaled_dot_product_attention`...) inside the autograd engine's backward functions,
where a plain backward runs only backward formulas (`aten::mm`, `*_backward`); the reentrant
kind runs them under `CheckpointFunctionBackward`, a backward function too. So an operator
of the forward-only family (`FORWARD_ONLY`) inside a backward function's range is recomputed.

Per device, over the steady steps: the recomputed operators, the kernels they launched
(by launch time inside their ranges, on their thread), those kernels' time and the part in
GEMM-class kernels, and (the kernels handed back) their FLOPs, which the FLOPs analysis
counts as hardware FLOPs but not as model FLOPs. A compiled backward fuses its recompute
(Inductor's min-cut rematerialisation) into kernels of its own: not seen here.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.causes.nesting import KEYS, inside
from traceanalyzer.analyses.timeline.intervals import in_ranges, union
from traceanalyzer.model import Kind, Timeline

#: Operators that run only in a forward pass: recomputed where found in a backward function.
FORWARD_ONLY = (
    r"^aten::(?:linear|layer_norm|group_norm|batch_norm|rms_norm|conv[123]d|embedding|gelu"
    r"|silu|dropout|softmax|scaled_dot_product_attention)$"
)

#: Per device (`Causes.recompute`).
RECOMPUTE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "ops": pl.Int64(),
    "kernels": pl.Int64(),
    "kernel_ns": pl.Int64(),
    "gemm_ns": pl.Int64(),
    "top_op": pl.String(),
}


def forward_in_backward(timeline: Timeline) -> pl.LazyFrame:
    """rank, pid, tid, start_ns, end_ns, name: the forward-only operators inside backward
    functions, anywhere in the trace."""
    ops = (
        timeline.events.lazy()
        .filter(pl.col("kind") == Kind.CPU_OP.value)
        .select(*KEYS, "start_ns", "end_ns", name=pl.col("name").cast(pl.String))
    )
    return inside(ops, sig.BACKWARD_FUNCTION, FORWARD_ONLY).drop("_o_start", "_o_name")


def recomputed_ops(timeline: Timeline, markers: pl.LazyFrame) -> pl.LazyFrame:
    """`forward_in_backward`'s operators inside the steady steps (`markers`), with `step`."""
    steps = markers.select("rank", "step", "start_ns", "end_ns")
    return in_ranges(forward_in_backward(timeline), steps, "rank")


def recomputed_kernels(
    timeline: Timeline, markers: pl.LazyFrame, linked: pl.DataFrame, kernels: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per device, kernels): the recompute's summary per device (RECOMPUTE_SCHEMA: the
    recomputed operators, the kernels they launched, their time and GEMM-class time, the
    operator with most of it), and those kernels (rows of `kernels`, for their FLOPs).
    `linked`: the GPU work with its launches (launch_ns, launch_pid, launch_tid);
    `kernels`: the classified kernels inside the windows."""
    ops = recomputed_ops(timeline, markers).collect()
    if ops.height == 0:
        return pl.DataFrame(schema=RECOMPUTE_SCHEMA), kernels.clear()
    mine = launched_in(ops, linked, kernels)
    key = ["rank", "device"]
    per_op = (
        mine.lazy()
        .group_by(*key, op=pl.col("op_name").cast(pl.String))
        .agg(pl.col("clipped_ns").sum())
        .sort("clipped_ns", "op", descending=[True, False])
        .group_by(key, maintain_order=True)
        .agg(top_op=pl.col("op").first())
    )
    n_ops = ops.lazy().group_by("rank").agg(ops=pl.len().cast(pl.Int64))
    summary = (
        mine.lazy()
        .group_by(key)
        .agg(
            kernels=pl.len().cast(pl.Int64),
            kernel_ns=pl.col("clipped_ns").sum(),
            gemm_ns=pl.col("clipped_ns")
            .filter(pl.col("kernel_class").cast(pl.String) == "gemm")
            .sum(),
        )
        .join(n_ops, on="rank", how="left")
        .join(per_op, on=key, how="left")
        .select(list(RECOMPUTE_SCHEMA))
        .sort(key)
        .collect()
        .cast(RECOMPUTE_SCHEMA)  # type: ignore[arg-type]
    )
    return summary, mine


def launched_in(ops: pl.DataFrame, linked: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """The rows of `kernels` launched inside one of the host operators `ops` (rank, pid,
    tid, start_ns, end_ns), by launch time on the launching thread (`linked`: the GPU work
    with launch_ns, launch_pid, launch_tid)."""
    if ops.height == 0:
        return kernels.clear()
    spans = union(ops.lazy(), KEYS).select(*KEYS, "start_ns", "end_ns")
    launches = linked.lazy().select(
        "rank", "correlation", _launch="launch_ns", _pid="launch_pid", _tid="launch_tid"
    )
    with_launch = kernels.lazy().join(launches, on=["rank", "correlation"], how="inner")
    # a kernel is the operators' where its launch falls inside one of their spans on the
    # launching thread (the spans are disjoint per thread)
    mine = (
        with_launch.sort("_launch")
        .join_asof(
            spans.sort("start_ns").select(*KEYS, _s_start="start_ns", _s_end="end_ns"),
            left_on="_launch",
            right_on="_s_start",
            by_left=["rank", "_pid", "_tid"],
            by_right=KEYS,
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_s_end").is_not_null() & (pl.col("_launch") < pl.col("_s_end")))
        .select(kernels.columns)
        .collect()
    )
    return mine
