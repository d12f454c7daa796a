"""Inputs built on the host every step: tensors made from Python data, copied in from pageable
memory.

A step that builds its batch with `torch.tensor(list)` (or `torch.as_tensor` of a sequence)
and moves it with `.cuda()` / `.to(device)` does two things the GPU waits for:

- **the constructor**: walking the Python objects takes host time under no operator; the
  profiler records only the constructor's own operators, `aten::empty` at its start and
  `aten::lift_fresh` at its end. A constructor's work is taken as the op-less host time
  before its `lift_fresh`: from the end of the last other operator on the thread (one that
  is not the constructor's `aten::empty`/`aten::to`) to the end of `lift_fresh`;
- **the copy**: a host-to-device copy from pageable memory is staged through a driver
  buffer and returns once the data is on the device, so the host waits for the GPU work
  queued before it and queues nothing meanwhile (a synchronising call: the refill after it
  is counted as for any sync). Its work is the `aten::copy_` operator that launched the
  memcpy (the runtime call itself where no operator is recorded).

Either alone is something else: a small `torch.tensor(0.5)` without a copy is not a batch,
and pageable copies of tensors that were not built in the step are TA009's. So the cause
holds only the steps (of a rank) that have both: `paired` keeps those.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.causes.nesting import KEYS
from traceanalyzer.model import Kind, Timeline

#: The names the cause's work is listed under (`Causes.names`).
CONSTRUCTOR = "torch.tensor(<Python data>)"
COPY = "aten::copy_ (host-to-device, pageable)"


def batch_work(timeline: Timeline, ranges: pl.LazyFrame) -> pl.LazyFrame:
    """rank, name, start_ns, end_ns, syncs: the constructors of tensors from Python data and
    the host-to-device copies from pageable memory, anywhere in the trace. `ranges`: the
    host ranges (rank, pid, tid, name as text, start_ns, end_ns)."""
    lifts = ranges.filter(pl.col("name").str.contains(sig.FROM_HOST_DATA))
    before = (
        ranges.filter(~pl.col("name").str.contains(sig.CONSTRUCTOR_PART))
        .select(*KEYS, _prev_end="end_ns")
        .sort("_prev_end")
    )
    constructors = (
        lifts.sort("start_ns")
        .join_asof(
            before,
            left_on="start_ns",
            right_on="_prev_end",
            by=KEYS,
            strategy="backward",
            check_sortedness=False,
        )
        .select(
            "rank",
            name=pl.lit(CONSTRUCTOR),
            start_ns=pl.coalesce("_prev_end", "start_ns"),
            end_ns="end_ns",
            syncs=pl.lit(False),
        )
    )
    return pl.concat([constructors, _pageable_copies(timeline, ranges)])


def _pageable_copies(timeline: Timeline, ranges: pl.LazyFrame) -> pl.LazyFrame:
    """The host side of each host-to-device copy from pageable memory: the `aten::copy_`
    around the runtime call that launched it, else that call."""
    events = timeline.events.lazy()
    copies = events.filter(
        (pl.col("kind") == Kind.MEMCPY.value)
        & (pl.col("copy_kind").cast(pl.String) == "HtoD")
        & (pl.col("src_memory").cast(pl.String) == "pageable")
        & pl.col("correlation").is_not_null()
    ).select("rank", "correlation")
    calls = (
        events.filter(pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value]))
        .select(*KEYS, "correlation", "start_ns", "end_ns")
        .join(copies, on=["rank", "correlation"], how="semi")
    )
    ops = (
        ranges.filter(pl.col("name").str.contains(sig.COPY_OP))
        .select(*KEYS, _o_start="start_ns", _o_end="end_ns")
        .sort("_o_start")
    )
    around = pl.col("_o_end").is_not_null() & (pl.col("_o_end") >= pl.col("end_ns"))
    return (
        calls.sort("start_ns")
        .join_asof(
            ops,
            left_on="start_ns",
            right_on="_o_start",
            by=KEYS,
            strategy="backward",
            check_sortedness=False,
        )
        .select(
            "rank",
            name=pl.lit(COPY),
            start_ns=pl.when(around).then("_o_start").otherwise("start_ns"),
            end_ns=pl.when(around).then("_o_end").otherwise("end_ns"),
            syncs=pl.lit(True),
        )
        .unique(["rank", "start_ns", "end_ns"])
    )


def paired(calls: pl.LazyFrame) -> pl.LazyFrame:
    """The calls of every cause, less the `host_batch` ones of the steps (per rank) that do
    not hold both a constructor and a pageable copy. `calls`: cause_calls' rows with `step`."""
    batch = pl.col("cause").cast(pl.String) == "host_batch"
    both = (
        calls.filter(batch)
        .group_by("rank", "step")
        .agg(kinds=pl.col("name").n_unique())
        .filter(pl.col("kinds") == 2)
        .select("rank", "step")
    )
    return pl.concat(
        [calls.filter(~batch), calls.filter(batch).join(both, on=["rank", "step"], how="semi")]
    )
