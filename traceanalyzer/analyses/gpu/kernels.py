"""Kernel duration histogram and the top kernels by time, inside the windows (the job's
`Kernels`); what cutting the copy and cast kernels saves (`cast_impact`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.classify import class_of
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.windows import StepCounts

_TOTALS = {"count": pl.Int64, "total_ns": pl.Int64, "share": pl.Float64}


@dataclass(frozen=True, slots=True)
class Kernels:
    """The job's kernels inside the windows, every device together (Metrics.kernels).

    - `histogram`: lo_ns, hi_ns, count, total_ns (log-spaced duration bins).
    - `launch_size_histogram`: lo_threads, hi_threads, count, total_ns.
    - `top`: name, count, total_ns, share: the top kernels by time; `classes`:
      kernel_class, count, total_ns, share; `names`: every kernel name's (name, count,
      total_ns, share).
    - `count`, `total_ns`: the kernels' count and time inside the windows.
    - `small_count_share`, `small_time_share`: the share of the kernels' count and time
      that kernels shorter than SMALL_KERNEL_NS hold (`small_totals`; None without kernels).

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "histogram": {
            "lo_ns": pl.Int64,
            "hi_ns": pl.Int64,
            "count": pl.Int64,
            "total_ns": pl.Int64,
        },
        "launch_size_histogram": {
            "lo_threads": pl.Int64,
            "hi_threads": pl.Int64,
            "count": pl.Int64,
            "total_ns": pl.Int64,
        },
        "top": {"name": pl.String, **_TOTALS},
        "classes": {"kernel_class": pl.String, **_TOTALS},
        "names": {"name": pl.String, **_TOTALS},
    }

    histogram: pl.DataFrame
    launch_size_histogram: pl.DataFrame
    top: pl.DataFrame
    classes: pl.DataFrame
    names: pl.DataFrame
    count: int
    total_ns: int
    small_count_share: float | None
    small_time_share: float | None

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.kernels", self.SCHEMAS)


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


def name_totals(kernels: pl.DataFrame) -> pl.DataFrame:
    """name (text), count, total_ns of every kernel name: what `top_of` ranks (the totals of
    several ranks add up)."""
    return (
        kernels.lazy()
        .group_by("name")
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("clipped_ns").sum())
        .with_columns(name=pl.col("name").cast(pl.String))
        .collect()
    )


def top_of(totals: pl.DataFrame, n: int) -> pl.DataFrame:
    """The top `n` of name totals (`name_totals`, or several ranks' concatenated) by time."""
    summed = (
        totals.group_by("name").agg(pl.col("count", "total_ns").sum())
        if totals["name"].is_duplicated().any()
        else totals
    )
    total = int(summed["total_ns"].sum() or 0)
    # shares computed once the rows are in order: polars divides some rows of a chunk by a
    # number as a product with its reciprocal (a last digit apart from the exact quotient),
    # and which rows depends on where they sit
    return (
        summed.sort(["total_ns", "name"], descending=[True, False])
        .head(n)
        .rechunk()
        .with_columns(share=(pl.col("total_ns") / total) if total else pl.lit(None, pl.Float64))
    )


#: Kernels shorter than this cannot be kept fed one launch at a time (a launch costs 5-10 µs).
SMALL_KERNEL_NS = 10_000


def threads(grid: str = "grid", block: str = "block") -> pl.Expr:
    """Threads launched: grid x*y*z times block x*y*z (null where not recorded)."""

    def volume(col: str) -> pl.Expr:
        c = pl.col(col)
        return (
            c.list.get(0, null_on_oob=True).cast(pl.Int64)
            * c.list.get(1, null_on_oob=True).fill_null(1).cast(pl.Int64)
            * c.list.get(2, null_on_oob=True).fill_null(1).cast(pl.Int64)
        )

    return volume(grid) * volume(block)


def launch_size_histogram(kernels: pl.DataFrame) -> pl.DataFrame:
    """lo_threads, hi_threads, count, total_ns: kernels by threads launched, bins x4 from a
    warp (0, 32, 128, 512, ...); kernels without grid/block are left out."""
    sized = (
        kernels.lazy()
        .select(lo=threads(), clipped_ns="clipped_ns")
        .filter(pl.col("lo").is_not_null())
        .collect()
    )
    top = int(sized["lo"].max() or 0)  # type: ignore[arg-type]
    edges = [0, 32]
    while edges[-1] <= top:
        edges.append(edges[-1] * 4)
    bins = pl.DataFrame(
        {"lo_threads": edges[:-1], "hi_threads": edges[1:]},
        schema={"lo_threads": pl.Int64, "hi_threads": pl.Int64},
    )
    counted = (
        sized.lazy()
        .sort("lo")
        .join_asof(bins.lazy().sort("lo_threads"), left_on="lo", right_on="lo_threads")
        .group_by("hi_threads")
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("clipped_ns").sum())
    )
    return (
        bins.lazy()
        .join(counted, on="hi_threads", how="left")
        .with_columns(pl.col("count").fill_null(0), pl.col("total_ns").fill_null(0))
        .sort("lo_threads")
        .collect()
    )


def small_totals(kernels: pl.DataFrame, limit_ns: int = SMALL_KERNEL_NS) -> tuple[int, int]:
    """How many kernels are shorter than `limit_ns`, and their time in the windows (a
    job's shares of small kernels are these summed over its ranks, over the ranks' totals)."""
    dur = pl.col("end_ns") - pl.col("start_ns")
    row = kernels.select(
        small=(dur < limit_ns).sum(),
        small_ns=pl.col("clipped_ns").filter(dur < limit_ns).sum(),
    ).row(0)
    return int(row[0] or 0), int(row[1] or 0)


def class_totals(kernels: pl.DataFrame) -> pl.DataFrame:
    """kernel_class (text), count, total_ns: what `classes_of` shares out (they add up)."""
    return (
        kernels.lazy()
        .group_by(pl.col("kernel_class").cast(pl.String))
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("clipped_ns").sum())
        .collect()
    )


def classes_of(totals: pl.DataFrame) -> pl.DataFrame:
    """The class breakdown of class totals (`class_totals`, or several ranks' concatenated)."""
    summed = totals.group_by("kernel_class").agg(pl.col("count", "total_ns").sum())
    total = int(summed["total_ns"].sum() or 0)
    return (  # shares once in order: see top_of
        summed.sort(["total_ns", "kernel_class"], descending=[True, False], nulls_last=True)
        .rechunk()
        .with_columns(share=(pl.col("total_ns") / total) if total else pl.lit(None, pl.Float64))
    )


@dataclass(frozen=True, slots=True)
class CastImpact:
    """What cutting the job's copy and dtype-cast kernels saves (TA010's impact model,
    `cast_impact`).

    - `copy_cast_ns`, `copy_cast_count`: the copy/cast kernels' time and count in the
      windows, all devices together; `compute_ns`: every non-communication kernel's time;
    - `top_kernels`: the top kernels (Metrics.kernels.top) that are copies or casts (name,
      count, total_ns), most time first;
    - `impact_ns`: the copy/cast time on the critical path per sampled step, of the rank with
      the most (all of it without step markers: the window is one step), under the ceiling;
      None with steps but no critical path;
    - `ceiling_ns`: the copy/cast time per steady step (an upper bound for each rank's; the
      whole window's without step markers): a fix removes at most all of it. None without
      steps.
    """

    copy_cast_ns: int
    copy_cast_count: int
    compute_ns: int
    top_kernels: tuple[dict[str, Any], ...]
    impact_ns: int | None
    ceiling_ns: int | None


def cast_impact(
    kernel_classes: pl.DataFrame,
    top_kernels: pl.DataFrame,
    critical_steps: pl.DataFrame,
    counts: StepCounts,
) -> CastImpact:
    """The job's CastImpact. `kernel_classes`, `top_kernels`: Metrics.kernels' `classes` and
    `top`; `critical_steps`: Metrics.critical_path.steps; `counts`: the steps each device's
    window holds (the ceiling divides by the most steps any device holds)."""
    classes = {r["kernel_class"]: r for r in kernel_classes.to_dicts()}
    compute = sum(r["total_ns"] for c, r in classes.items() if c != "comm")
    casts = classes.get("copy_cast", {"total_ns": 0, "count": 0})
    total = casts["total_ns"]
    top = top_kernels.filter(class_of(pl.col("name")) == "copy_cast")
    impact = total if not counts.by_steps else None  # the window is one step
    if critical_steps.height:
        by_rank = critical_steps.group_by("rank").agg(pl.col("gpu_copy_cast_ns").mean())
        impact = round(float(by_rank["gpu_copy_cast_ns"].max() or 0))  # type: ignore[arg-type]
    if not counts.by_steps:
        ceiling: int | None = total
    else:
        n = counts.most_on()
        ceiling = round(total / n) if n else None
    if impact is not None and ceiling is not None:
        impact = min(impact, ceiling)  # the sampled steps' path, never above all casts
    return CastImpact(
        copy_cast_ns=total,
        copy_cast_count=casts["count"],
        compute_ns=compute,
        top_kernels=tuple(top.select("name", "count", "total_ns").to_dicts()),
        impact_ns=impact,
        ceiling_ns=ceiling,
    )
