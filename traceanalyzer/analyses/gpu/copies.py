"""Memory copies: volume, time and achieved bandwidth by direction and memory kind, and
what pinning the pageable host-to-device copies saves (`pageable_impact`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import overlaps
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, StepCounts
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


#: Host-to-device bandwidth of pinned copies where the trace has none: a PCIe 4.0 x16 link
#: in practice (GB/s, 10^9 bytes/s).
PINNED_GBPS = 25.0
#: Pinned copies must move at least this much for their bandwidth to be the reference.
MIN_PINNED_BYTES = 1_000_000


@dataclass(frozen=True, slots=True)
class PageableImpact:
    """What pinning one device's pageable host-to-device copies saves (TA009's impact model,
    `pageable_impact`).

    - `count`, `bytes`, `time_ns`: the device's host-to-device copies from pageable memory
      inside its window;
    - `pinned_gbps`: the bandwidth the same bytes would reach pinned, `pinned_basis` where it
      comes from (this device's pinned copies, or PINNED_GBPS);
    - `excess_ns`: `time_ns` less the bytes at `pinned_gbps` (never negative);
    - `steps`: the steps of the device's window; `impact_ns`: `excess_ns` per step;
      `ceiling_ns`: `time_ns` per step (pinning cannot save more than the copies take);
      None without steps.
    """

    rank: int
    device: int
    count: int
    bytes: int
    time_ns: int
    pinned_gbps: float
    pinned_basis: str
    excess_ns: int
    steps: int
    impact_ns: int | None
    ceiling_ns: int | None


def pageable_impact(copies: pl.DataFrame, counts: StepCounts) -> tuple[PageableImpact, ...]:
    """The PageableImpact of every device with host-to-device copies from pageable memory,
    by rank and device.

    What pinning saves for sure: the copies' time less the time the same bytes take at
    pinned bandwidth (this device's pinned host-to-device copies where they move at least
    MIN_PINNED_BYTES, never under a quarter of PINNED_GBPS; else PINNED_GBPS). With
    `non_blocking=True` the pinned copy can also run beside compute, which may hide the rest;
    the host's time staging the data is not counted.

    `copies`: Metrics.copies.summary; `counts`: the steps each device's window holds."""
    htod = copies.filter(pl.col("copy_kind") == "HtoD")

    def by_device(memory: str) -> pl.DataFrame:
        return (
            htod.filter(pl.col("src_memory") == memory)
            .group_by(DEVICE_KEY)
            .agg(pl.col("count").sum(), pl.col("bytes").sum(), pl.col("time_ns").sum())
            .sort(DEVICE_KEY)
        )

    pinned = {(r, d): (b, t) for r, d, _n, b, t in by_device("pinned").iter_rows()}
    out = []
    for rank, device, count, size, time in by_device("pageable").iter_rows():
        size, time = size or 0, time or 0
        gbps, basis = _pinned_gbps(*pinned.get((rank, device), (0, 0)))
        excess = max(0, round(time - size / gbps)) if time else 0
        out.append(
            PageableImpact(
                rank=rank,
                device=device,
                count=count,
                bytes=size,
                time_ns=time,
                pinned_gbps=gbps,
                pinned_basis=basis,
                excess_ns=excess,
                steps=counts.on(rank, device),
                impact_ns=counts.per_step(excess, rank, device),
                ceiling_ns=counts.per_step(time, rank, device),
            )
        )
    return tuple(out)


def _pinned_gbps(size: int | None, time: int | None) -> tuple[float, str]:
    """The bandwidth the same bytes would reach pinned, from a device's pinned host-to-device
    copies (`size` bytes in `time` ns), else PINNED_GBPS; and where it comes from."""
    size, time = int(size or 0), int(time or 0)
    if size >= MIN_PINNED_BYTES and time:
        return max(size / time, PINNED_GBPS / 4), "this trace's pinned copies"
    return PINNED_GBPS, "PCIe 4.0 x16 (no pinned copies in the trace)"


@dataclass(frozen=True, slots=True)
class Copies:
    """The memory copies in the windows (Metrics.copies).

    - `summary`: rank, device, copy_kind, src_memory, dst_memory, count, bytes, time_ns,
      gbps: per device and kind of copy, their count, bytes, time and achieved bandwidth
      (`memcpy_summary`).

    Its frame is checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "summary": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "copy_kind": pl.String,
            "src_memory": pl.String,
            "dst_memory": pl.String,
            "count": pl.Int64,
            "bytes": pl.Int64,
            "time_ns": pl.Int64,
            "gbps": pl.Float64,
        }
    }

    summary: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.copies", self.SCHEMAS)
