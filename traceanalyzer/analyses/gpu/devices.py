"""Per-device busy and idle time inside the window, and the same per step."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.timeline.intervals import (
    busy_before,
    clipped_ns,
    in_ranges,
    overlaps,
    union,
)
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY
from traceanalyzer.model import Kind


def busy_in_spans(work: pl.LazyFrame, spans: pl.LazyFrame) -> pl.LazyFrame:
    """Add `busy_ns` to each span (rank, device, start_ns, end_ns, ...): the length of the
    union of GPU work inside it."""
    merged = union(work, DEVICE_KEY)
    lo = busy_before(spans, merged, DEVICE_KEY, "start_ns")
    both = busy_before(lo, merged, DEVICE_KEY, "end_ns")
    return both.with_columns(busy_ns=pl.col("end_ns_busy_ns") - pl.col("start_ns_busy_ns")).drop(
        "start_ns_busy_ns", "end_ns_busy_ns"
    )


def kernels_in_windows(work: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Kernels overlapping their device's window, with `clipped_ns`: their time inside it."""
    return (
        work.filter(pl.col("kind") == Kind.KERNEL.value)
        .join(windows.rename({"start_ns": "w_start", "end_ns": "w_end"}), on=DEVICE_KEY)
        .filter(overlaps("start_ns", "end_ns", "w_start", "w_end"))
        .with_columns(clipped_ns=clipped_ns("start_ns", "end_ns", "w_start", "w_end"))
        .drop("w_start", "w_end")
    )


def device_summary(
    work: pl.LazyFrame, windows: pl.LazyFrame, kernels: pl.LazyFrame
) -> pl.LazyFrame:
    """rank, device, window_ns, busy_ns, idle_ns, idle_share, kernel_count, kernel_ns."""
    counts = kernels.group_by(DEVICE_KEY).agg(
        kernel_count=pl.len().cast(pl.Int64), kernel_ns=pl.col("clipped_ns").sum()
    )
    return (
        busy_in_spans(work, windows)
        .join(counts, on=DEVICE_KEY, how="left")
        .select(
            *DEVICE_KEY,
            "start_ns",
            "end_ns",
            window_ns=pl.col("end_ns") - pl.col("start_ns"),
            busy_ns="busy_ns",
            idle_ns=pl.col("end_ns") - pl.col("start_ns") - pl.col("busy_ns"),
            kernel_count=pl.col("kernel_count").fill_null(0),
            kernel_ns=pl.col("kernel_ns").fill_null(0),
        )
        .with_columns(idle_share=share(pl.col("idle_ns"), pl.col("window_ns")))
        .sort(DEVICE_KEY)
    )


def step_summary(work: pl.LazyFrame, steps: pl.LazyFrame, kernels: pl.LazyFrame) -> pl.LazyFrame:
    """rank, device, step, name, start_ns, end_ns, busy_ns, idle_share, kernel_count per
    device step (a kernel counts in the step during which it starts)."""
    counts = (
        in_ranges(kernels.select(*DEVICE_KEY, "start_ns"), steps, DEVICE_KEY)
        .group_by(*DEVICE_KEY, "step")
        .agg(kernel_count=pl.len().cast(pl.Int64))
    )
    return (
        busy_in_spans(work, steps)
        .with_columns(
            idle_share=share(
                pl.col("end_ns") - pl.col("start_ns") - pl.col("busy_ns"),
                pl.col("end_ns") - pl.col("start_ns"),
            )
        )
        .join(counts, on=[*DEVICE_KEY, "step"], how="left")
        .with_columns(pl.col("kernel_count").fill_null(0))
        .select(
            "rank",
            "device",
            "step",
            "name",
            "start_ns",
            "end_ns",
            "busy_ns",
            "idle_share",
            "kernel_count",
        )
        .sort("rank", "device", "start_ns")
    )


def share(part: pl.Expr, whole: pl.Expr) -> pl.Expr:
    """part / whole, null (never NaN) where whole is 0."""
    return pl.when(whole > 0).then(part / whole).otherwise(pl.lit(None, pl.Float64))
