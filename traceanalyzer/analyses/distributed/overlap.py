"""Communication: how far NCCL time overlaps compute, per collective, and rank imbalance.

Per (rank, device), as the contract defines: `comm_ns` is the union of communication
kernels inside the window; `overlapped_comm_ns` the part of it during which at least one
non-communication kernel also ran on the device; `exposed_comm_ns` the rest.
The intersection is the compute union's time inside each merged communication interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import busy_before, union
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY

#: Bytes per element of the message dtypes torch records for collectives.
DTYPE_BYTES: dict[str, int] = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
}


def comm_overlap(
    kernels: pl.LazyFrame, windows: pl.LazyFrame, has_comm: bool = True
) -> pl.LazyFrame:
    """rank, device, comm_ns, overlapped_comm_ns, exposed_comm_ns, overlap_share.

    `kernels`: kernels inside the windows with an `is_comm` column. `has_comm=False` says
    that none is communication: every total is then 0, and no union is computed.
    """
    wins = windows.select(*DEVICE_KEY, w_start="start_ns", w_end="end_ns")
    cut = (
        kernels.join(wins, on=DEVICE_KEY)
        .with_columns(
            start_ns=pl.max_horizontal("start_ns", "w_start"),
            end_ns=pl.min_horizontal("end_ns", "w_end"),
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .select(*DEVICE_KEY, "start_ns", "end_ns", "is_comm")
    )

    if has_comm:
        comm_merged = union(cut.filter(pl.col("is_comm")), DEVICE_KEY)
        compute = union(cut.filter(~pl.col("is_comm")), DEVICE_KEY)
        spans = comm_merged.select(*DEVICE_KEY, lo="start_ns", hi="end_ns")
        # the compute time inside each merged communication interval, from the compute
        # union's running total (no third union of every kernel, as inclusion-exclusion
        # needs: at 10^6 kernels that union was a third of this analysis)
        inside = busy_before(
            busy_before(spans, compute, DEVICE_KEY, "lo"), compute, DEVICE_KEY, "hi"
        )
        totals = inside.group_by(DEVICE_KEY).agg(
            comm_ns=(pl.col("hi") - pl.col("lo")).sum(),
            overlapped_comm_ns=(pl.col("hi_busy_ns") - pl.col("lo_busy_ns")).sum(),
        )
    else:  # no rows, with the key dtypes of the kernels
        totals = (
            cut.select(DEVICE_KEY)
            .clear()
            .with_columns(comm_ns=pl.lit(0, pl.Int64), overlapped_comm_ns=pl.lit(0, pl.Int64))
        )
    return (
        windows.select(DEVICE_KEY)
        .join(totals, on=DEVICE_KEY, how="left")
        .with_columns(pl.col("comm_ns", "overlapped_comm_ns").fill_null(0))
        .with_columns(exposed_comm_ns=pl.col("comm_ns") - pl.col("overlapped_comm_ns"))
        .with_columns(
            overlap_share=pl.when(pl.col("comm_ns") > 0).then(
                pl.col("overlapped_comm_ns") / pl.col("comm_ns")
            )
        )
        .select(*DEVICE_KEY, "comm_ns", "overlapped_comm_ns", "exposed_comm_ns", "overlap_share")
        .sort(DEVICE_KEY)
    )


def per_collective(kernels: pl.LazyFrame, has_comm: bool = True) -> pl.LazyFrame:
    """rank, device, collective, count, total_ns, exposed_ns, msg_bytes (sum, where recorded).

    `kernels`: kernels inside the windows with `is_comm`, `collective_kind` and `clipped_ns`.
    A kernel's exposed time is its time inside the window minus its overlap with the union of
    compute kernels. `has_comm=False` (no communication kernel: no rows) skips that union.
    """
    compute_work = kernels.filter(~pl.col("is_comm")).select(*DEVICE_KEY, "start_ns", "end_ns")
    compute = (
        union(compute_work, DEVICE_KEY)
        if has_comm
        else compute_work.clear().with_columns(busy_before_ns=pl.lit(0, pl.Int64))
    )
    comm = kernels.filter(pl.col("is_comm")).with_columns(
        lo=pl.col("start_ns"), hi=pl.col("start_ns") + pl.col("clipped_ns")
    )
    with_overlap = busy_before(
        busy_before(comm, compute, DEVICE_KEY, "lo"), compute, DEVICE_KEY, "hi"
    )
    dtype_bytes = (
        pl.col("msg_dtype")
        .cast(pl.String)
        .replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    )
    return (
        with_overlap.with_columns(
            exposed_ns=pl.col("clipped_ns") - (pl.col("hi_busy_ns") - pl.col("lo_busy_ns")),
            msg_bytes=pl.col("msg_nelems") * dtype_bytes,
        )
        .group_by(*DEVICE_KEY, pl.col("collective_kind").alias("collective"))
        .agg(
            count=pl.len().cast(pl.Int64),
            total_ns=pl.col("clipped_ns").sum(),
            exposed_ns=pl.col("exposed_ns").sum(),
            msg_bytes=pl.when(pl.col("msg_bytes").is_not_null().any()).then(
                pl.col("msg_bytes").sum()
            ),
        )
        .sort(
            [*DEVICE_KEY, "total_ns", "collective"],
            descending=[False, False, True, False],
            nulls_last=True,
        )
    )


def matched_collectives(kernels: pl.LazyFrame) -> pl.LazyFrame:
    """The communication kernels matched across ranks (see `rank_imbalance`): rank, device,
    start_ns, end_ns, dur, wait_ns (the part of the kernel spent waiting for the last rank
    to arrive: it sits at the kernel's start)."""
    comm = (
        kernels.filter(pl.col("is_comm"))
        .sort("rank", "start_ns")
        .with_columns(
            seq=pl.int_range(pl.len()).over("rank"),
            dur=pl.col("end_ns") - pl.col("start_ns"),
        )
    )
    n_ranks = comm.select(pl.col("rank").n_unique())
    return (
        comm.with_columns(
            ranks=pl.col("rank").n_unique().over("seq"),
            kinds=pl.col("collective_kind").n_unique().over("seq"),
        )
        .join(n_ranks.rename({"rank": "world"}), how="cross")
        .filter((pl.col("ranks") == pl.col("world")) & (pl.col("kinds") == 1))
        .with_columns(wait_ns=pl.col("dur") - pl.col("dur").min().over("seq"))
    )


def rank_imbalance(kernels: pl.LazyFrame) -> pl.LazyFrame:
    """Per rank: wait_ns, the time its collectives spent waiting for the slowest rank.

    The n-th communication kernel of each rank is taken as one collective (the ranks of a job
    issue the same collectives in the same order; collectives whose kind differs between ranks
    are left out). All ranks leave a collective together, so the rank that arrived last has
    the shortest kernel; every other rank's extra kernel time is waiting: wait = duration -
    the shortest duration of that collective. Durations, not timestamps, are compared, so
    unsynchronised host clocks do not matter. Columns: rank, collectives, comm_ns, wait_ns.
    """
    return (
        matched_collectives(kernels)
        .group_by("rank")
        .agg(
            collectives=pl.len().cast(pl.Int64),
            comm_ns=pl.col("dur").sum(),
            wait_ns=pl.col("wait_ns").sum(),
        )
        .sort("rank")
    )


@dataclass(frozen=True, slots=True)
class Communication:
    """Each device's collectives and each rank's wait inside them (Metrics.communication).

    - `collectives`: rank, device, collective, count, total_ns, exposed_ns, msg_bytes: per
      device and collective, its time and the part no compute overlaps (`per_collective`).
    - `rank_waits`: rank, collectives, comm_ns, wait_ns: per rank, its time in collectives
      and the part spent waiting for other ranks (`rank_imbalance`; empty for a single rank).

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "collectives": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "collective": pl.Enum,
            "count": pl.Int64,
            "total_ns": pl.Int64,
            "exposed_ns": pl.Int64,
            "msg_bytes": pl.Int64,
        },
        "rank_waits": {
            "rank": pl.Int32,
            "collectives": pl.Int64,
            "comm_ns": pl.Int64,
            "wait_ns": pl.Int64,
        },
    }

    collectives: pl.DataFrame
    rank_waits: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.communication", self.SCHEMAS)
