"""Host ranges nested in others: the one join every host-side signature of this room needs."""

from __future__ import annotations

import polars as pl

KEYS = ["rank", "pid", "tid"]


def inside(ranges: pl.LazyFrame, outer: str, inner: str) -> pl.LazyFrame:
    """The ranges named like `inner` (a regular expression) that lie inside one named like
    `outer` on the same thread: the latest such range starting at or before them, which they
    end within. `ranges`: rank, pid, tid, name (as text), start_ns, end_ns. Returns the inner
    ranges' columns plus `_o_start` and `_o_name`, the outer range's start and name."""
    around = (
        ranges.filter(pl.col("name").str.contains(outer))
        .select(*KEYS, _o_start="start_ns", _o_end="end_ns", _o_name="name")
        .sort("_o_start")
    )
    return (
        ranges.filter(pl.col("name").str.contains(inner))
        .sort("start_ns")
        .join_asof(
            around,
            left_on="start_ns",
            right_on="_o_start",
            by=KEYS,
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_o_end").is_not_null() & (pl.col("end_ns") <= pl.col("_o_end")))
        .drop("_o_end")
    )


def outermost(ranges: pl.LazyFrame, name: str = "_outer") -> pl.LazyFrame:
    """`ranges` (with KEYS, start_ns, end_ns) sorted by thread and start, the enclosing one
    first where two start together, with a column `name`: true where no earlier range on
    the thread reaches its end (it is not nested in another of them)."""
    reach = pl.col("end_ns").cum_max().shift(1).over(KEYS)
    return ranges.sort(*KEYS, "start_ns", "end_ns", descending=[False] * 4 + [True]).with_columns(
        (reach.is_null() | (reach < pl.col("end_ns"))).alias(name)
    )
