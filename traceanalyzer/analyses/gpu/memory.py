"""Allocated GPU memory step over step (traces recorded with profile_memory=True).

Within a step, allocated memory should rise and fall back (a sawtooth: activations freed
after backward). If the peak of each step is higher than the last, something is kept alive
from step to step: a leak (tensors appended to a list, a graph kept by a stored loss).
`runway` says how many steps of such growth the device's memory has left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import in_ranges
from traceanalyzer.model import DeviceInfo, Kind, Timeline


def step_peaks(timeline: Timeline, markers: pl.LazyFrame) -> pl.DataFrame:
    """rank, device, step, peak_bytes, end_bytes, reserved_peak_bytes, reserved_low_bytes,
    released_bytes: the highest total allocated during each host step and the total left
    allocated at its last memory event; the most and least the caching allocator held
    reserved during it, and the reserved memory given back to the driver that its events
    show (the falls of the reserved total from the device's previous memory event to each of
    its events: `torch.cuda.empty_cache()`, or the allocator freeing its cache to retry a
    failed allocation; a release records no event, so it shows at the next). Empty without memory
    events; the reserved figures are null where the trace does not record them."""
    memory = (
        timeline.events.lazy()
        .filter((pl.col("kind") == Kind.MEMORY.value) & pl.col("device").is_not_null())
        .select("rank", "device", "start_ns", "bytes", "reserved_bytes")
        .sort("start_ns")
        # the fall since the device's previous event: a release (empty_cache) records no
        # event of its own, so it shows at the next one, maybe in the next step
        .with_columns(
            _fall=(pl.col("reserved_bytes").shift(1) - pl.col("reserved_bytes"))
            .clip(lower_bound=0)
            .over("rank", "device")
        )
    )
    return (
        in_ranges(memory, markers, "rank")
        .group_by("rank", "device", "step")
        .agg(
            peak_bytes=pl.col("bytes").max(),
            end_bytes=pl.col("bytes").sort_by("start_ns").last(),
            reserved_peak_bytes=pl.col("reserved_bytes").max(),
            reserved_low_bytes=pl.col("reserved_bytes").min(),
            released_bytes=pl.when(pl.col("reserved_bytes").is_not_null().any())
            .then(pl.col("_fall").sum())
            .cast(pl.Int64),
            first_ns=pl.col("start_ns").min(),
        )
        .sort("rank", "device", "first_ns")
        .drop("first_ns")
        .collect()
    )


def growth(peaks: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device): steps, first_peak_bytes, last_peak_bytes, growth_bytes
    (last - first), per_step_bytes (least-squares slope of the peaks), rising_share (share of
    step-to-step changes where the peak rose)."""
    key = ["rank", "device"]
    x = pl.int_range(pl.len()).cast(pl.Float64)
    y = pl.col("peak_bytes").cast(pl.Float64)
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    return (
        peaks.lazy()
        .group_by(key, maintain_order=True)
        .agg(
            steps=pl.len().cast(pl.Int64),
            first_peak_bytes=pl.col("peak_bytes").first(),
            last_peak_bytes=pl.col("peak_bytes").last(),
            per_step_bytes=pl.when(pl.len() > 1).then(slope),
            rising_share=pl.when(pl.len() > 1).then(
                (pl.col("peak_bytes").diff() > 0).sum() / (pl.len() - 1)
            ),
        )
        .with_columns(growth_bytes=pl.col("last_peak_bytes") - pl.col("first_peak_bytes"))
        .sort(key)
        .collect()
    )


@dataclass(frozen=True, slots=True)
class MemoryRunway:
    """One device's step peaks and how soon their growth fills its memory (`runway`; TA011
    reads it).

    - `steps`, `first_peak_bytes`, `last_peak_bytes`, `growth_bytes`, `per_step_bytes`,
      `rising_share`: the device's row of `growth` (Metrics.memory.growth);
    - `step_peaks_bytes`: each step's peak, in order (Metrics.memory.peaks);
    - `device_memory_bytes`: the device's memory (None where the trace does not say);
    - `steps_to_oom`: the steps until the peak reaches it at `per_step_bytes` (None without
      the device's memory or without growth).
    """

    rank: int
    device: int
    steps: int
    first_peak_bytes: int | None
    last_peak_bytes: int | None
    growth_bytes: int | None
    per_step_bytes: float | None
    rising_share: float | None
    step_peaks_bytes: tuple[int, ...]
    device_memory_bytes: int | None
    steps_to_oom: int | None


def runway(
    growth: pl.DataFrame, peaks: pl.DataFrame, devices: Sequence[DeviceInfo]
) -> tuple[MemoryRunway, ...]:
    """The MemoryRunway of every device in `growth` (its rows and order); `peaks`:
    `step_peaks`' rows (Metrics.memory.peaks); `devices`: the trace's devices, for their
    memory."""
    sizes = {(d.rank, d.device): d.memory_bytes for d in devices}
    out = []
    for g in growth.iter_rows(named=True):
        rank, device = g["rank"], g["device"]
        mine = peaks.filter((pl.col("rank") == rank) & (pl.col("device") == device))
        per_step = g["per_step_bytes"] or 0
        total = sizes.get((rank, device))
        to_oom = (
            max(0, int((total - g["last_peak_bytes"]) // per_step))
            if total and per_step > 0
            else None
        )
        out.append(
            MemoryRunway(
                rank=rank,
                device=device,
                steps=g["steps"],
                first_peak_bytes=g["first_peak_bytes"],
                last_peak_bytes=g["last_peak_bytes"],
                growth_bytes=g["growth_bytes"],
                per_step_bytes=g["per_step_bytes"],
                rising_share=g["rising_share"],
                step_peaks_bytes=tuple(mine["peak_bytes"].to_list()),
                device_memory_bytes=total,
                steps_to_oom=to_oom,
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ReservedPool:
    """One device's caching-allocator pool over the steady steps (Memory.pool; TA015 reads
    it): `steps` with reserved totals recorded, `steps_released` (those giving back at least
    the asked share of their reserved peak), `released_per_step_bytes` (mean),
    `reserved_peak_bytes`, `allocated_peak_bytes`; `emptied` (most steps give memory back:
    the pool is emptied and grown again) and `fragmented` (at the peak, at least the asked
    share of the reserved memory is not allocated)."""

    steps: int
    steps_released: int
    released_per_step_bytes: int
    reserved_peak_bytes: int
    allocated_peak_bytes: int
    emptied: bool
    fragmented: bool


@dataclass(frozen=True, slots=True)
class Memory:
    """The job's allocated GPU memory step over step (Metrics.memory; empty without memory
    events).

    - `peaks`: rank, device, step, peak_bytes, end_bytes, reserved_peak_bytes,
      reserved_low_bytes, released_bytes (`step_peaks`, every rank's).
    - `growth`: rank, device, steps, first_peak_bytes, last_peak_bytes, per_step_bytes,
      rising_share, growth_bytes (`growth`).
    - `runway`: per device of `growth`, its step peaks and the steps until its memory is
      full at that growth (`runway`; TA011 reads it).

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "peaks": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "step": pl.Int64,
            "peak_bytes": pl.Int64,
            "end_bytes": pl.Int64,
            "reserved_peak_bytes": pl.Int64,
            "reserved_low_bytes": pl.Int64,
            "released_bytes": pl.Int64,
        },
        "growth": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "steps": pl.Int64,
            "first_peak_bytes": pl.Int64,
            "last_peak_bytes": pl.Int64,
            "per_step_bytes": pl.Float64,
            "rising_share": pl.Float64,
            "growth_bytes": pl.Int64,
        },
    }

    peaks: pl.DataFrame
    growth: pl.DataFrame
    runway: tuple[MemoryRunway, ...]

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.memory", self.SCHEMAS)

    def pool(
        self, rank: int, device: int, release_share: float, unused_share: float
    ) -> ReservedPool | None:
        """The device's ReservedPool, or None where no memory event records reserved memory.
        `release_share`: the share of a step's reserved peak it must give back to count as
        released; `unused_share`: the share of the reserved peak not allocated that reads
        as fragmented."""
        rows = self.peaks.filter(
            (pl.col("rank") == rank)
            & (pl.col("device") == device)
            & pl.col("reserved_peak_bytes").is_not_null()
        )
        if rows.height == 0:
            return None
        released = rows.filter(
            pl.col("released_bytes") >= release_share * pl.col("reserved_peak_bytes")
        ).height
        reserved = int(rows["reserved_peak_bytes"].max())  # type: ignore[arg-type]
        allocated = int(rows["peak_bytes"].max() or 0)  # type: ignore[arg-type]
        return ReservedPool(
            steps=rows.height,
            steps_released=released,
            released_per_step_bytes=int(rows["released_bytes"].mean() or 0),  # type: ignore[arg-type]
            reserved_peak_bytes=reserved,
            allocated_peak_bytes=allocated,
            emptied=released * 2 > rows.height,
            fragmented=reserved > 0 and reserved - allocated >= unused_share * reserved,
        )
