"""Kernel duration histogram and the top kernels by time, inside the windows."""

from __future__ import annotations

import polars as pl

_MANTISSAS = (1, 2, 5)


def histogram_edges(max_ns: int) -> list[int]:
    """Log-spaced bin edges in ns: 0, 1 µs, 2 µs, 5 µs, 10 µs, ... up to just past `max_ns`."""
    edges = [0]
    decade = 1_000
    while True:
        for m in _MANTISSAS:
            edge = m * decade
            edges.append(edge)
            if edge > max_ns:
                return edges
        decade *= 10


def duration_histogram(kernels: pl.DataFrame) -> pl.DataFrame:
    """lo_ns, hi_ns, count, total_ns per bin of kernel duration (raw duration picks the bin,
    total_ns sums the time inside the window, so the bins add up to the kernels' total)."""
    dur = pl.col("end_ns") - pl.col("start_ns")
    max_ns = int(kernels.select(dur.max()).item() or 0)
    edges = histogram_edges(max_ns)
    bins = pl.DataFrame(
        {"lo_ns": edges[:-1], "hi_ns": edges[1:]}, schema={"lo_ns": pl.Int64, "hi_ns": pl.Int64}
    )
    counted = (
        kernels.lazy()
        .select(lo_ns=dur, clipped_ns="clipped_ns")
        .sort("lo_ns")
        .join_asof(bins.lazy().sort("lo_ns"), on="lo_ns", strategy="backward")
        .group_by("hi_ns")
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("clipped_ns").sum())
    )
    return (
        bins.lazy()
        .join(counted, on="hi_ns", how="left")
        .with_columns(pl.col("count").fill_null(0), pl.col("total_ns").fill_null(0))
        .sort("lo_ns")
        .collect()
    )


def top_kernels(kernels: pl.DataFrame, n: int) -> pl.DataFrame:
    """name, count, total_ns, share (of all kernel time in the windows), top `n` by time."""
    total = int(kernels["clipped_ns"].sum() or 0)
    return (
        kernels.lazy()
        .group_by("name")
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("clipped_ns").sum())
        .with_columns(
            name=pl.col("name").cast(pl.String),
            share=(pl.col("total_ns") / total) if total else pl.lit(None, pl.Float64),
        )
        .sort(["total_ns", "name"], descending=[True, False])
        .head(n)
        .collect()
    )
