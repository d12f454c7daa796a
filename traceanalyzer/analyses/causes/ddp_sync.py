"""DDP's gradient all-reduce after every micro-batch of an accumulation: `no_sync` missing.

With gradient accumulation, DistributedDataParallel all-reduces the gradients after each
backward unless the micro-batches before the last run under `model.no_sync()`. The trace
shows the reducer's work (`c10d::allreduce_` with its `nccl:all_reduce`, the reducer's
`mul_out` and `copy_bucket_to_grad`) after the backward of each micro-batch: a micro-batch is
the `DistributedDataParallel.forward` range before it, and an accumulation cycle the
micro-batches between two `Optimizer.step#` ranges. Only the last micro-batch's all-reduce
of a cycle is needed: the reducer's work after an earlier one (`extra_rounds`) is what
`no_sync` removes. Without optimizer ranges the cycles are not known and nothing is read.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.causes.nesting import KEYS


def extra_rounds(ranges: pl.LazyFrame) -> pl.LazyFrame:
    """rank, name, start_ns, end_ns, syncs: the reducer's operators after a micro-batch that
    is not the last of its accumulation cycle (the module docstring). `ranges`: the host
    ranges (rank, pid, tid, name as text, start_ns, end_ns)."""

    def numbered(pattern: str, column: str) -> pl.LazyFrame:
        """The ranges named like `pattern`, numbered in time order per rank."""
        return (
            ranges.filter(pl.col("name").str.contains(pattern))
            .select("rank", _t="start_ns")
            .sort("rank", "_t")
            .with_columns(pl.col("_t").cum_count().over("rank").alias(column))
            .rename({"_t": f"_t_{column}"})
        )

    forwards = numbered(sig.DDP_FORWARD, "_round")
    cycles = numbered(sig.OPTIMIZER_STEP, "_cycle")
    calls = ranges.filter(pl.col("name").str.contains(sig.REDUCER_OP)).select(
        *KEYS, "name", "start_ns", "end_ns"
    )
    placed = (
        calls.sort("start_ns")
        .join_asof(
            forwards.sort("_t__round"),
            left_on="start_ns",
            right_on="_t__round",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .join_asof(
            cycles.sort("_t__cycle"),
            left_on="start_ns",
            right_on="_t__cycle",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_round").is_not_null())
        # the cycle a call is in: the one the next optimizer step closes (numbered from 0)
        .with_columns(_cycle=(pl.col("_cycle") + 1).fill_null(0))
        # a cycle no optimizer step closes (the trace ends first) is not known to be whole
        .join(cycles.select("rank", "_cycle"), on=["rank", "_cycle"], how="semi")
    )
    last = pl.col("_round").max().over("rank", "_cycle")
    return placed.filter(pl.col("_round") < last).select(
        "rank", "name", "start_ns", "end_ns", syncs=pl.lit(False)
    )
