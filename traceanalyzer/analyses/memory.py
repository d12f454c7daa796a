"""Allocated GPU memory step over step (traces recorded with profile_memory=True).

Within a step, allocated memory should rise and fall back (a sawtooth: activations freed
after backward). If the peak of each step is higher than the last, something is kept alive
from step to step: a leak (tensors appended to a list, a graph kept by a stored loss).
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.intervals import in_ranges
from traceanalyzer.model import Kind, Timeline


def step_peaks(timeline: Timeline, markers: pl.LazyFrame) -> pl.DataFrame:
    """rank, device, step, peak_bytes, end_bytes: the highest total allocated during each host
    step and the total left allocated at its last memory event. Empty without memory events."""
    memory = (
        timeline.events.lazy()
        .filter((pl.col("kind") == Kind.MEMORY.value) & pl.col("device").is_not_null())
        .select("rank", "device", "start_ns", "bytes")
        .sort("start_ns")
    )
    return (
        in_ranges(memory, markers, "rank")
        .group_by("rank", "device", "step")
        .agg(
            peak_bytes=pl.col("bytes").max(),
            end_bytes=pl.col("bytes").sort_by("start_ns").last(),
            first_ns=pl.col("start_ns").min(),
        )
        .sort("rank", "device", "first_ns")
        .drop("first_ns")
        .collect()
    )


def growth(peaks: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device): steps, first_peak_bytes, last_peak_bytes, growth_bytes
    (last - first), per_step_bytes (least-squares slope of the peaks), rising_share (share of
    step-to-step changes where the peak rose)."""
    key = ["rank", "device"]
    x = pl.int_range(pl.len()).cast(pl.Float64)
    y = pl.col("peak_bytes").cast(pl.Float64)
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    return (
        peaks.lazy()
        .group_by(key, maintain_order=True)
        .agg(
            steps=pl.len().cast(pl.Int64),
            first_peak_bytes=pl.col("peak_bytes").first(),
            last_peak_bytes=pl.col("peak_bytes").last(),
            per_step_bytes=pl.when(pl.len() > 1).then(slope),
            rising_share=pl.when(pl.len() > 1).then(
                (pl.col("peak_bytes").diff() > 0).sum() / (pl.len() - 1)
            ),
        )
        .with_columns(growth_bytes=pl.col("last_peak_bytes") - pl.col("first_peak_bytes"))
        .sort(key)
        .collect()
    )
