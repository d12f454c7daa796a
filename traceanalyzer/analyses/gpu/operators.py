"""The CPU operators behind GPU work: their recorded shapes, and the launches that link them.

Shared by the analyses that need an operator's inputs (bandwidth, matmul shapes). In Kineto
traces a launch call carries the `External id` of the operator that issued it.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.gpu.classify import launched_by_collective
from traceanalyzer.model import Kind, Timeline

#: The text columns a recorded shape is read from; equal texts decode to equal values.
SHAPE_TEXT = ("input_dims", "input_types")


def operator_rows(events: pl.LazyFrame) -> pl.LazyFrame:
    """CPU operators with recorded shapes, their shapes still as text: rank, external_id,
    op_start, op_end, op_name, input_dims, input_types."""
    return events.filter(
        (pl.col("kind") == Kind.CPU_OP.value)
        & pl.col("input_dims").is_not_null()
        & pl.col("external_id").is_not_null()
    ).select(
        "rank",
        "external_id",
        *SHAPE_TEXT,
        op_start="start_ns",
        op_end="end_ns",
        op_name=pl.col("name").cast(pl.String),
    )


def decoded_shapes(ops: pl.LazyFrame) -> pl.LazyFrame:
    """Each distinct shape text of `ops` (input_dims, input_types) once, with dims (a list of
    sizes per input) and types (the dtype name per input) decoded.

    A training trace records the same few shapes every step: decoding each distinct text once
    instead of every operator's cuts the JSON decoding a hundredfold. Tensor-list inputs
    (sizes nested one level deeper) are left out: one list per input."""
    return (
        ops.select(*SHAPE_TEXT)
        .unique()
        .filter(~pl.col("input_dims").str.slice(1).str.contains(r"\[\s*\["))
        .with_columns(
            dims=pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))),
            types=pl.col("input_types").str.json_decode(pl.List(pl.String)),
        )
    )


def with_shapes(ops: pl.LazyFrame, shapes: pl.LazyFrame) -> pl.LazyFrame:
    """`ops` (with the shape text columns) joined to `shapes` (keyed by the same texts), in
    `ops`' order; the text columns are dropped."""
    return ops.join(
        shapes, on=list(SHAPE_TEXT), how="inner", nulls_equal=True, maintain_order="left"
    ).drop(*SHAPE_TEXT)


def shaped_ops(events: pl.LazyFrame) -> pl.LazyFrame:
    """CPU operators with recorded shapes: rank, external_id, op_start, op_end, op_name,
    dims (a list of sizes per input) and types (the dtype name per input).

    Tensor-list inputs (sizes nested one level deeper) are left out: one list per input."""
    ops = operator_rows(events)
    return with_shapes(ops, decoded_shapes(ops)).select(
        "rank", "external_id", "op_start", "op_end", "op_name", "dims", "types"
    )


def list_product(lists: pl.Expr, longest: int) -> pl.Expr:
    """The product of each list's elements, for lists of at most `longest` elements: 1 for an
    empty list, null for a null one, null elements counted as 1 (as `list.eval(product)`
    gives, which is ten times slower here: 0.18 s against 0.015 s for 600 k shapes)."""
    product = pl.lit(1, pl.Int64)
    for i in range(longest):
        product = product * lists.list.get(i, null_on_oob=True).fill_null(1)
    return pl.when(lists.is_not_null()).then(product)


def launch_ops(timeline: Timeline) -> pl.LazyFrame:
    """rank, correlation, op_link (the launching operator's external id), launch_ns."""
    return (
        timeline.events.lazy()
        .filter(
            pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value])
            & pl.col("correlation").is_not_null()
            & pl.col("external_id").is_not_null()
        )
        .group_by("rank", "correlation")
        .agg(op_link=pl.col("external_id").first(), launch_ns=pl.col("start_ns").min())
    )


def collective_launches(timeline: Timeline) -> pl.LazyFrame:
    """rank, correlation, op_name, op_collective (the collective it recorded): the launches
    a collective operator made itself
    (`classify.COMM_OP_REGEX`: `record_param_comms`, `c10d::*`, ...), the launch call
    starting inside the operator. The few collective operators are found among the distinct
    operator names first; a trace without any gives no rows at once."""
    events = timeline.events.lazy()
    ops = events.filter(pl.col("kind") == Kind.CPU_OP.value)
    names = (
        ops.select(pl.col("name").unique()).filter(launched_by_collective(pl.col("name"))).collect()
    )
    if names.height == 0:
        return pl.LazyFrame(
            schema={
                "rank": pl.Int32(),
                "correlation": pl.Int64(),
                "op_name": pl.String(),
                "op_collective": pl.Categorical(),
            }
        )
    collective_ops = ops.join(names.lazy(), on="name", how="semi").select(
        "rank",
        "external_id",
        op_start="start_ns",
        op_end="end_ns",
        op_name=pl.col("name").cast(pl.String),
        op_collective="collective",
    )
    return (
        launch_ops(timeline)
        .join(collective_ops, left_on=["rank", "op_link"], right_on=["rank", "external_id"])
        .filter(pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end")))
        .group_by("rank", "correlation")
        .agg(pl.col("op_name").first(), pl.col("op_collective").first())
    )
