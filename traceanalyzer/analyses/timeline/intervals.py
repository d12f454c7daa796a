"""Interval algebra in polars expressions: unions and "busy time before t" look-ups.

All intervals are [start_ns, end_ns) in integer ns. No Python loop touches an event.
"""

from __future__ import annotations

import polars as pl


def sort_stable(frame: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """`frame` in the order of `frame.sort(keys, maintain_order=True)`, as one stable
    single-column sort per key (last key first): a multi-column sort encodes every row and
    is several times slower on large frames."""
    for key in reversed(keys):
        frame = frame.sort(key, maintain_order=True)
    return frame


def union(intervals: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """Merge overlapping or touching intervals within each `by` group.

    Returns `by` + `start_ns`, `end_ns`, sorted by group and start, plus `busy_before_ns`: the
    summed length of the merged intervals that precede each one in its group.
    """
    # sorted by group and start, a merged interval starts at a row that starts after every
    # earlier end of its group (`_new`) and ends at the running maximum of the ends on the
    # last row before the next such start: no group-by, no second sort. The previous and
    # next rows' values are read where the neighbour is in the same group (the frame is
    # sorted by it), not through window functions that hash every row into its group
    reach = pl.col("_reach")
    ordered = sort_stable(intervals.select([*by, "start_ns", "end_ns"]), [*by, "start_ns"])
    before = reach.shift(1)
    flagged = (
        ordered.with_columns(_reach=pl.col("end_ns").cum_max().over(by))
        .with_columns(_before=pl.when(_same_group(by, 1)).then(before))
        .with_columns(_new=pl.col("_before").is_null() | (pl.col("start_ns") > pl.col("_before")))
        .with_columns(
            _last=pl.when(_same_group(by, -1)).then(pl.col("_new").shift(-1)).fill_null(True)
        )
    )
    starts = flagged.filter(pl.col("_new")).select([*by, "start_ns"])
    ends = flagged.filter(pl.col("_last")).select(end_ns="_reach")
    length = pl.col("end_ns") - pl.col("start_ns")
    return pl.concat([starts, ends], how="horizontal").with_columns(
        busy_before_ns=length.cum_sum().over(by) - length
    )


def minus(a: pl.LazyFrame, b: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """The time inside `a`'s intervals and outside every one of `b`'s, within each `by`
    group: `by` + `start_ns`, `end_ns`, disjoint, sorted by group and start (a sweep over
    both unions' edges: a segment counts where `a` covers it and `b` does not)."""
    ua, ub = union(a, by), union(b, by)
    edges = pl.concat(
        [
            ua.select(*by, t="start_ns", da=pl.lit(1), db=pl.lit(0)),
            ua.select(*by, t="end_ns", da=pl.lit(-1), db=pl.lit(0)),
            ub.select(*by, t="start_ns", da=pl.lit(0), db=pl.lit(1)),
            ub.select(*by, t="end_ns", da=pl.lit(0), db=pl.lit(-1)),
        ]
    )
    # after the last edge at a time, the running sums say what covers the segment to the
    # next edge (edges at one time in any order: their zero-length segments are dropped)
    swept = sort_stable(edges, [*by, "t"]).with_columns(
        _a=pl.col("da").cum_sum().over(by),
        _b=pl.col("db").cum_sum().over(by),
        _next=pl.col("t").shift(-1).over(by),
    )
    segments = swept.filter(
        (pl.col("_a") > 0) & (pl.col("_b") == 0) & (pl.col("_next") > pl.col("t"))
    ).select(*by, start_ns="t", end_ns="_next")
    return union(segments, by).drop("busy_before_ns")


def _same_group(by: list[str], offset: int) -> pl.Expr:
    """Whether the row `offset` rows away has the same `by` values (nulls equal to nulls, as
    in a group-by). At the frame's edge the answer does not matter: the shifted value read
    there is null either way."""
    return pl.all_horizontal(pl.col(k).eq_missing(pl.col(k).shift(offset)) for k in by)


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


def in_ranges(
    frame: pl.LazyFrame, ranges: pl.LazyFrame, by: list[str] | str, at: str = "start_ns"
) -> pl.LazyFrame:
    """The rows of `frame` whose time `at` falls inside one of `ranges` (columns `by`,
    `step`, `start_ns`, `end_ns`; disjoint within a `by` group), with that range's `step`:
    the latest range starting at or before `at`, where `at` is before its end. Rows outside
    every range are dropped. (A step's events, from its marker or device step ranges.)"""
    keys = [by] if isinstance(by, str) else list(by)
    starts = ranges.select(*keys, "step", _r_start="start_ns", _r_end="end_ns").sort("_r_start")
    return (
        frame.sort(at)
        .join_asof(
            starts,
            left_on=at,
            right_on="_r_start",
            by=by,
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col(at) < pl.col("_r_end"))
        .drop("_r_start", "_r_end")
    )
