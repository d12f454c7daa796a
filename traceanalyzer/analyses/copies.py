"""Memory copies: volume, time and achieved bandwidth by direction and memory kind."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.intervals import overlaps
from traceanalyzer.analyses.windows import DEVICE_KEY
from traceanalyzer.model import Kind


def memcpy_summary(work: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, device, copy_kind, src_memory, dst_memory) inside the window: count,
    bytes, time_ns (summed durations) and gbps (bytes / time, decimal GB/s; null without
    bytes or time)."""
    wins = windows.select(*DEVICE_KEY, w_start="start_ns", w_end="end_ns")
    copies = (
        work.filter(pl.col("kind") == Kind.MEMCPY.value)
        .join(wins, on=DEVICE_KEY)
        .filter(overlaps("start_ns", "end_ns", "w_start", "w_end"))
    )
    keys = [*DEVICE_KEY, "copy_kind", "src_memory", "dst_memory"]
    return (
        copies.group_by(keys)
        .agg(
            count=pl.len().cast(pl.Int64),
            bytes=pl.col("bytes").sum(),
            time_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
        )
        .with_columns(
            gbps=pl.when((pl.col("time_ns") > 0) & (pl.col("bytes") > 0)).then(
                pl.col("bytes") / pl.col("time_ns")
            ),
            copy_kind=pl.col("copy_kind").cast(pl.String),
            src_memory=pl.col("src_memory").cast(pl.String),
            dst_memory=pl.col("dst_memory").cast(pl.String),
        )
        .sort(  # ties in a fixed order: the report is diffed
            [*DEVICE_KEY, "time_ns", "copy_kind", "src_memory", "dst_memory"],
            descending=[False, False, True, False, False, False],
            nulls_last=True,
        )
    )
