"""Where each finding sits on the timeline: the time spans it is about.

For `annotate` (one Perfetto track per finding, with a slice over each span) and any view
that links a finding to its place: the idle gaps of the finding's cause (starvation, launch
overhead, host syncs), the collectives of its device (communication not overlapped, rank
imbalance), the pageable copies, the GEMMs off the Tensor Cores, the cast kernels; a cause's
own work (the compile phases, allocator calls, anomaly checks, recomputed operators, zero
fills, host-built batches, cuDNN set-up and compiled regions' glue on the host; cuDNN's
layout transposes on the GPU); else the finding's scope window. Computed from the analyses'
own frames and functions (gaps, classes, the causes' calls), no new analysis. At most
`MAX_SPANS` per finding, the longest first.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.causes import host_work
from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.gpu import classify
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.model import Timeline
from traceanalyzer.rules.base import Finding

#: The most slices one finding's track gets (the longest spans; a trace viewer stays fast).
MAX_SPANS = 500
#: Finding category -> the idle cause of the gaps it is about.
GAP_CAUSE = {
    "gpu_starvation": "host_wait",
    "launch_overhead": "launch_overhead",
    "host_sync": "sync",
}
#: Finding category -> the kernel class of the kernels it is about.
KERNEL_CLASS = {
    "comm_not_overlapped": "comm",
    "rank_imbalance": "comm",
    "memory_bound": "memory_bound",
    "dtype_casts": "copy_cast",
    "no_tensor_cores": "gemm",
    "odd_shapes": "gemm",
}
#: Finding category -> the host-side cause whose calls it is about (analyses/causes).
HOST_CAUSE = {
    "recompilation": "compilation",
    "allocator_churn": "allocator",
    "anomaly_detection": "anomaly_checks",
    "activation_recompute": "recompute",
    "zero_grad_fill": "zero_grad_fill",
    "host_built_batch": "host_batch",
    "library_setup": "library_setup",
    "graph_breaks": "graph_breaks",
}
SPAN_SCHEMA = pl.Schema({"start_ns": pl.Int64(), "end_ns": pl.Int64(), "what": pl.String()})


def finding_spans(f: Finding, metrics: Metrics, timeline: Timeline) -> pl.DataFrame:
    """The spans (start_ns, end_ns, what) finding `f` is about, in time order."""
    scope = f.scope
    where = pl.lit(True)
    if scope.rank is not None:
        where = where & (pl.col("rank") == scope.rank)
    if scope.device is not None:
        where = where & (pl.col("device") == scope.device)
    windows = metrics.steps.windows.filter(where).select("rank", "device", "start_ns", "end_ns")
    inside = windows.rename({"start_ns": "w_start", "end_ns": "w_end"})
    if f.category in GAP_CAUSE:
        spans = metrics.idle.gaps.filter(where & (pl.col("cause") == GAP_CAUSE[f.category])).select(
            "start_ns", "end_ns", what=pl.lit(f"idle ({GAP_CAUSE[f.category]})")
        )
    elif f.category in HOST_CAUSE:
        calls = host_work.cause_calls(timeline).filter(
            (pl.col("cause").cast(pl.String) == HOST_CAUSE[f.category])
            & ((pl.col("rank") == scope.rank) if scope.rank is not None else pl.lit(True))
        )
        spans = (
            calls.join(_host_steps(metrics, timeline, inside).lazy(), on="rank")
            .filter((pl.col("end_ns") > pl.col("w_start")) & (pl.col("start_ns") < pl.col("w_end")))
            .select("start_ns", "end_ns", what=pl.col("name"))
            .unique(["start_ns", "end_ns", "what"])
            .collect()
        )
    elif f.category == "layout_conversion":
        spans = (
            timeline.gpu_work()
            .filter(where & pl.col("name").cast(pl.String).str.contains(sig.LAYOUT_KERNEL))
            .join(inside.lazy(), on=["rank", "device"])
            .filter((pl.col("end_ns") > pl.col("w_start")) & (pl.col("start_ns") < pl.col("w_end")))
            .select("start_ns", "end_ns", what=pl.col("name").cast(pl.String))
            .collect()
        )
    elif f.category in KERNEL_CLASS or f.category == "pageable_memcpy":
        gpu = timeline.gpu_work().filter(where)
        if f.category == "pageable_memcpy":
            gpu = gpu.filter(
                (pl.col("kind") == "memcpy")
                & pl.any_horizontal(
                    pl.col("src_memory").cast(pl.String) == "pageable",
                    pl.col("dst_memory").cast(pl.String) == "pageable",
                )
            )
        else:
            gpu = gpu.filter(pl.col("kind") == "kernel").filter(
                classify.kernel_class(pl.col("name").cast(pl.String)) == KERNEL_CLASS[f.category]
            )
        spans = (
            gpu.join(inside.lazy(), on=["rank", "device"])
            .filter((pl.col("end_ns") > pl.col("w_start")) & (pl.col("start_ns") < pl.col("w_end")))
            .select("start_ns", "end_ns", what=pl.col("name").cast(pl.String))
            .collect()
        )
    else:
        spans = pl.DataFrame(schema=SPAN_SCHEMA)
    if spans.height == 0:  # a job-wide or memory finding: its scope window, else the window
        if scope.window is not None:
            lo, hi = scope.window
            return pl.DataFrame(
                {"start_ns": [lo], "end_ns": [hi], "what": ["scope"]}, schema=SPAN_SCHEMA
            )
        return windows.select("start_ns", "end_ns", what=pl.lit("window")).cast(
            dict(SPAN_SCHEMA)  # type: ignore[arg-type]
        )
    return (
        spans.cast(dict(SPAN_SCHEMA))  # type: ignore[arg-type]
        .sort(pl.col("end_ns") - pl.col("start_ns"), descending=True)
        .head(MAX_SPANS)
        .sort("start_ns")
    )


def _host_steps(metrics: Metrics, timeline: Timeline, windows: pl.DataFrame) -> pl.DataFrame:
    """rank, w_start, w_end: the host ranges of the steady steps (the step markers named
    like the devices' steady steps), where the causes' calls were counted; without steps,
    the devices' windows."""
    steady = metrics.steps.steady.select("rank", pl.col("name").cast(pl.String)).unique()
    if steady.height == 0:
        return windows.select("rank", "w_start", "w_end").unique()
    markers = (
        timeline.events.lazy()
        .filter(pl.col("kind") == "annotation")
        .select("rank", name=pl.col("name").cast(pl.String), w_start="start_ns", w_end="end_ns")
        .join(steady.lazy(), on=["rank", "name"], how="semi")
        .select("rank", "w_start", "w_end")
        .collect()
    )
    return markers if markers.height else windows.select("rank", "w_start", "w_end").unique()
