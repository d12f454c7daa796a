"""Where each finding sits on the timeline: the time spans it is about.

For `annotate` (one Perfetto track per finding, with a slice over each span) and any view
that links a finding to its place: the idle gaps of the finding's cause (starvation, launch
overhead, host syncs), the collectives of its device (communication not overlapped, rank
imbalance), the pageable copies, the GEMMs off the Tensor Cores, the cast kernels; else the
finding's scope window. Computed from the analyses' own frames (gaps, classes), no new
analysis. At most `MAX_SPANS` per finding, the longest first.
"""

from __future__ import annotations

import polars as pl

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
