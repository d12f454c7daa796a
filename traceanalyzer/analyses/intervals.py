"""Interval algebra in polars expressions: unions and "busy time before t" look-ups.

All intervals are [start_ns, end_ns) in integer ns. No Python loop touches an event.
"""

from __future__ import annotations

import polars as pl


def union(intervals: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """Merge overlapping or touching intervals within each `by` group.

    Returns `by` + `start_ns`, `end_ns`, sorted by group and start, plus `busy_before_ns`: the
    summed length of the merged intervals that precede each one in its group.
    """
    reach = pl.col("end_ns").cum_max().shift(1).over(by)
    return (
        intervals.select([*by, "start_ns", "end_ns"])
        .sort([*by, "start_ns"])
        .with_columns(_new=reach.is_null() | (pl.col("start_ns") > reach))
        .with_columns(_run=pl.col("_new").cum_sum().over(by))
        .group_by([*by, "_run"])
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort([*by, "start_ns"])
        .with_columns(
            busy_before_ns=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().over(by)
            - (pl.col("end_ns") - pl.col("start_ns"))
        )
        .drop("_run")
    )


def busy_before(points: pl.LazyFrame, merged: pl.LazyFrame, by: list[str], at: str) -> pl.LazyFrame:
    """Add `<at>_busy_ns`: busy time of `merged` (from `union`) strictly before time `at`.

    Busy time inside [a, b) is then `b_busy_ns - a_busy_ns`, whatever the number of intervals.
    """
    out = f"{at}_busy_ns"
    right = merged.select(
        *by, _m_start=pl.col("start_ns"), _m_end=pl.col("end_ns"), _m_before="busy_before_ns"
    )
    joined = points.sort(at).join_asof(
        right.sort("_m_start"),
        left_on=at,
        right_on="_m_start",
        by=by,
        strategy="backward",
        check_sortedness=False,  # both sides are sorted by the key, globally
    )
    inside = (pl.col(at) - pl.col("_m_start")).clip(0, pl.col("_m_end") - pl.col("_m_start"))
    return joined.with_columns(
        pl.when(pl.col("_m_start").is_null())
        .then(pl.lit(0, pl.Int64))
        .otherwise(pl.col("_m_before") + inside)
        .alias(out)
    ).drop("_m_start", "_m_end", "_m_before")


def overlaps(start: str, end: str, lo: str, hi: str) -> pl.Expr:
    """True where [start, end) lies at least partly inside [lo, hi).

    A zero-length interval counts when lo <= start <= hi.
    """
    s, e, a, b = pl.col(start), pl.col(end), pl.col(lo), pl.col(hi)
    return ((s < b) & (e > a)) | ((s == e) & (s >= a) & (s <= b))


def clipped_ns(start: str, end: str, lo: str, hi: str) -> pl.Expr:
    """Length of [start, end) ∩ [lo, hi), never negative."""
    upper = pl.min_horizontal(pl.col(end), pl.col(hi))
    lower = pl.max_horizontal(pl.col(start), pl.col(lo))
    return (upper - lower).clip(lower_bound=0)
