"""Anomaly mode's forward cost: the traceback it records for every autograd node.

With `torch.autograd.set_detect_anomaly(True)` every forward operator that creates an autograd
node captures the Python stack for it (so that a NaN in the backward can name the forward
line), inside the operator's own range: on an H200, `aten::view` took 109 µs on the forward
thread against 3 µs on the backward thread of the same trace, and 2 µs with the mode off
(tests/data/gpu/README.md, `anomaly_detection_on`). The backward thread creates no nodes,
so the same operator's time there is its time without the capture.

Per rank whose backward functions ran anomaly mode's check: the cost of one capture is the
median time of a node-creating operator that runs on both threads (`REFERENCE_OPS`, the one
with most calls on the rarer side) on the forward threads less its median on the backward
threads (never below 0), and the forward pays it once per autograd node: the backward
functions the engine evaluates per step.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.timeline.intervals import in_ranges
from traceanalyzer.model import Kind, Timeline

#: Cheap operators that create an autograd node in the forward and run in the backward too.
REFERENCE_OPS = (
    r"^aten::(?:view|_unsafe_view|reshape|transpose|t|permute|expand|unsqueeze|squeeze"
    r"|select|slice|to|_to_copy|contiguous|clone)$"
)

#: Per rank (`Causes.anomaly`).
ANOMALY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "nodes": pl.Int64(),
    "reference_op": pl.String(),
    "forward_median_ns": pl.Int64(),
    "backward_median_ns": pl.Int64(),
    "capture_ns": pl.Int64(),
}


def forward_capture(timeline: Timeline, markers: pl.LazyFrame, ranks: list[int]) -> pl.DataFrame:
    """Per rank of `ranks` (those whose backward ran anomaly checks; ANOMALY_SCHEMA): the
    backward functions evaluated in the steady steps (`nodes`), the reference operator, its
    median time on the forward and backward threads, and one capture's cost (`capture_ns`;
    0 where no operator runs on both kinds of thread). `markers`: the steady steps."""
    if not ranks:
        return pl.DataFrame(schema=ANOMALY_SCHEMA)
    steps = markers.select("rank", "step", "start_ns", "end_ns").filter(pl.col("rank").is_in(ranks))
    ops = in_ranges(
        timeline.events.lazy()
        .filter((pl.col("kind") == Kind.CPU_OP.value) & pl.col("rank").is_in(ranks))
        .select("rank", "pid", "tid", "start_ns", "end_ns", name=pl.col("name").cast(pl.String)),
        steps,
        "rank",
    )
    functions = ops.filter(pl.col("name").str.contains(sig.BACKWARD_FUNCTION))
    backward_threads = functions.select("rank", "pid", "tid").unique()
    nodes = functions.group_by("rank").agg(nodes=pl.len().cast(pl.Int64))
    dur = pl.col("end_ns") - pl.col("start_ns")
    ref = (
        ops.filter(pl.col("name").str.contains(REFERENCE_OPS))
        .join(
            backward_threads.with_columns(backward=pl.lit(True)),
            on=["rank", "pid", "tid"],
            how="left",
        )
        .with_columns(pl.col("backward").fill_null(False))
        .group_by("rank", "name")
        .agg(
            fwd_n=(~pl.col("backward")).sum(),
            bwd_n=pl.col("backward").sum(),
            forward_median_ns=dur.filter(~pl.col("backward")).median(),
            backward_median_ns=dur.filter(pl.col("backward")).median(),
        )
        .filter((pl.col("fwd_n") > 0) & (pl.col("bwd_n") > 0))
        .with_columns(calls=pl.min_horizontal("fwd_n", "bwd_n"))
        .sort(["rank", "calls", "name"], descending=[False, True, False])
        .group_by("rank", maintain_order=True)
        .first()
    )
    out = (
        nodes.join(ref, on="rank", how="left")
        .with_columns(
            reference_op=pl.col("name"),
            forward_median_ns=pl.col("forward_median_ns").round().cast(pl.Int64),
            backward_median_ns=pl.col("backward_median_ns").round().cast(pl.Int64),
        )
        .with_columns(
            capture_ns=(pl.col("forward_median_ns") - pl.col("backward_median_ns"))
            .clip(lower_bound=0)
            .fill_null(0)
        )
        .select(list(ANOMALY_SCHEMA))
        .sort("rank")
    )
    return out.collect().cast(ANOMALY_SCHEMA)  # type: ignore[arg-type]
