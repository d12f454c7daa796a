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
counts as hardware FLOPs but not as model FLOPs.

**A compiled backward** (`CompiledFunctionBackward`) runs its recompute inside its own graph:
no forward operator shows. Its GEMMs still show as operators with shapes (`aten::mm`,
`aten::addmm` under the graph's call), so the recompute is read from the FLOPs: a backward
runs twice the forward's GEMM FLOPs (the gradients of inputs and of weights), and a
recompute adds the recomputed part once more. Where the backward's GEMM FLOPs are at least
`RATIO_MIN` times the forward's, the recomputed FLOPs are `backward - 2 x forward`
(`compiled_recompute`); their kernels' time is taken as that share of the forward's
kernels (the recompute runs those kernels again), their FLOPs leave the model FLOPs as
a share of the backward's operators', and their host side is the recomputed share of the
compiled backward's host time (host_work's `compiled_backward`, priced in impact.py).
"""

from __future__ import annotations

from collections.abc import Callable

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

#: Per device (`Causes.recompute`). `flops_ratio`: the backward's GEMM FLOPs over the
#: forward's, where the recompute was read from them (a compiled backward), else null.
RECOMPUTE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "ops": pl.Int64(),
    "kernels": pl.Int64(),
    "kernel_ns": pl.Int64(),
    "gemm_ns": pl.Int64(),
    "top_op": pl.String(),
    "flops_ratio": pl.Float64(),
}
#: A backward running this many times the forward's GEMM FLOPs recomputes (a plain one: 2).
RATIO_MIN = 2.25
#: The optimizer's ranges: neither forward nor backward.
OPTIMIZER_RANGE = r"^Optimizer\.(?:step|zero_grad)#"


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
        .with_columns(flops_ratio=pl.lit(None, pl.Float64))
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


def compiled_recompute(
    timeline: Timeline,
    markers: pl.LazyFrame,
    linked: pl.DataFrame,
    kernels: pl.DataFrame,
    op_flops: Callable[[Timeline, pl.DataFrame], pl.DataFrame],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per device, FLOPs to take out): the recompute read from the GEMM FLOPs (the module
    docstring) on the devices whose backward runs at least RATIO_MIN times the forward's;
    empty elsewhere. `op_flops`: flops.op_flops (passed in: this room does not import the
    GPU room's FLOPs)."""
    empty = (pl.DataFrame(schema=RECOMPUTE_SCHEMA), op_flops(timeline, kernels.clear()))
    steps = markers.select("rank", "step", "start_ns", "end_ns")
    ranges = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in([Kind.CPU_OP.value, Kind.ANNOTATION.value]))
        .select(*KEYS, "start_ns", "end_ns", name=pl.col("name").cast(pl.String))
    )
    backward = in_ranges(
        ranges.filter(pl.col("name").str.contains(sig.BACKWARD_FUNCTION)), steps, "rank"
    ).collect()
    if backward.height == 0:
        return empty
    optimizer = in_ranges(
        ranges.filter(pl.col("name").str.contains(OPTIMIZER_RANGE)), steps, "rank"
    ).collect()
    back = launched_in(backward, linked, kernels)
    other = launched_in(optimizer, linked, kernels) if optimizer.height else kernels.clear()
    key = ["rank", "correlation"]
    forward = kernels.join(back.select(key), on=key, how="anti").join(
        other.select(key), on=key, how="anti"
    )
    fb, ff = op_flops(timeline, back), op_flops(timeline, forward)
    dev = ["rank", "device"]
    sums = (
        fb.group_by(dev)
        .agg(bwd=pl.col("flops").sum())
        .join(ff.group_by(dev).agg(fwd=pl.col("flops").sum()), on=dev)
        .join(forward.group_by(dev).agg(fwd_ns=pl.col("clipped_ns").sum()), on=dev, how="left")
        .join(
            back.filter(pl.col("kernel_class").cast(pl.String) == "gemm")
            .group_by(dev)
            .agg(bwd_gemm_ns=pl.col("clipped_ns").sum(), bwd_gemms=pl.len()),
            on=dev,
            how="left",
        )
        .filter((pl.col("fwd") > 0) & (pl.col("bwd") >= RATIO_MIN * pl.col("fwd")))
    )
    if sums.height == 0:
        return empty
    share = (pl.col("bwd") - 2 * pl.col("fwd")) / pl.col("fwd")  # of the forward, recomputed
    summary = (
        sums.with_columns(_share=share)
        .select(
            *dev,
            ops=pl.lit(0, pl.Int64),
            kernels=(pl.col("bwd_gemms").fill_null(0) * (1 - 2 / (pl.col("bwd") / pl.col("fwd"))))
            .round()
            .cast(pl.Int64),
            kernel_ns=(pl.col("fwd_ns").fill_null(0) * pl.col("_share")).round().cast(pl.Int64),
            gemm_ns=(pl.col("bwd_gemm_ns").fill_null(0) * (1 - 2 * pl.col("fwd") / pl.col("bwd")))
            .round()
            .cast(pl.Int64),
            top_op=pl.lit("the compiled backward (CompiledFunctionBackward)"),
            flops_ratio=pl.col("bwd") / pl.col("fwd"),
        )
        .sort(dev)
        .cast(RECOMPUTE_SCHEMA)  # type: ignore[arg-type]
    )
    # the recomputed FLOPs as a share of each backward operator's: what leaves the model's
    taken = fb.join(
        sums.select(*dev, _f=(pl.col("bwd") - 2 * pl.col("fwd")) / pl.col("bwd")), on=dev
    ).with_columns(
        # a share of each operator's work, not of its calls: the operators stay counted
        calls=pl.lit(0),
        flops=(pl.col("flops") * pl.col("_f")).round(),
        bytes=(pl.col("bytes") * pl.col("_f")).round(),
        kernel_ns=(pl.col("kernel_ns") * pl.col("_f")).round().cast(pl.Int64),
    )
    return summary, taken.select(fb.columns).cast(fb.schema)
