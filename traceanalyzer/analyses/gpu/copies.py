"""Memory copies: volume, time and achieved bandwidth by direction and memory kind, the
part of their time that ran under kernels, what pinning the pageable copies (host to device
and device to host) saves (`pageable_impact`), what prefetching managed memory saves
(`managed_impact`) and, where direct copies fill a device, what overlapping them with its
compute saves (`overlap_impact`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import busy_before, overlaps, union
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, StepCounts
from traceanalyzer.model import Kind


def memcpy_summary(work: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, device, copy_kind, src_memory, dst_memory) inside the window: count,
    bytes, time_ns (summed durations), gbps (bytes / time, decimal GB/s: each copy's own
    time, so copies on concurrent streams are not counted as one slow copy; null without
    bytes or time) and under_kernels_ns (the part of their time during which a kernel of the
    device ran: time a faster copy does not give back to a GPU-bound step)."""
    wins = windows.select(*DEVICE_KEY, w_start="start_ns", w_end="end_ns")
    copies = (
        work.filter(pl.col("kind") == Kind.MEMCPY.value)
        .join(wins, on=DEVICE_KEY)
        .filter(overlaps("start_ns", "end_ns", "w_start", "w_end"))
    )
    kernels = union(
        work.filter(pl.col("kind") == Kind.KERNEL.value).select(*DEVICE_KEY, "start_ns", "end_ns"),
        DEVICE_KEY,
    )
    copies = busy_before(
        busy_before(copies, kernels, DEVICE_KEY, "start_ns"), kernels, DEVICE_KEY, "end_ns"
    )
    keys = [*DEVICE_KEY, "copy_kind", "src_memory", "dst_memory"]
    return (
        copies.group_by(keys)
        .agg(
            count=pl.len().cast(pl.Int64),
            bytes=pl.col("bytes").sum(),
            time_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
            _under=(pl.col("end_ns_busy_ns") - pl.col("start_ns_busy_ns")).sum().cast(pl.Int64),
        )
        .with_columns(
            gbps=pl.when((pl.col("time_ns") > 0) & (pl.col("bytes") > 0)).then(
                pl.col("bytes") / pl.col("time_ns")
            ),
            under_kernels_ns=pl.col("_under"),
            copy_kind=pl.col("copy_kind").cast(pl.String),
            src_memory=pl.col("src_memory").cast(pl.String),
            dst_memory=pl.col("dst_memory").cast(pl.String),
        )
        .sort(  # ties in a fixed order: the report is diffed
            [*DEVICE_KEY, "time_ns", "copy_kind", "src_memory", "dst_memory"],
            descending=[False, False, True, False, False, False],
            nulls_last=True,
        )
        .drop("_under")
    )


#: Host-device bandwidth of pinned copies where the trace has none, by the GPU's name: the
#: link its form factor usually has (neither format records the PCIe generation or width),
#: GB/s (10^9 bytes/s) achieved, not the link's nominal rate. First match wins.
ASSUMED_LINKS: tuple[tuple[str, float, str], ...] = (
    ("GH200", 200.0, "NVLink-C2C"),
    ("GB200", 200.0, "NVLink-C2C"),
    ("B200", 50.0, "PCIe 5.0 x16"),
    ("H200", 50.0, "PCIe 5.0 x16"),
    ("H100", 50.0, "PCIe 5.0 x16"),
    ("L40", 25.0, "PCIe 4.0 x16"),
    ("A100", 25.0, "PCIe 4.0 x16"),
    ("A10", 25.0, "PCIe 4.0 x16"),
    ("A40", 25.0, "PCIe 4.0 x16"),
    ("RTX 40", 25.0, "PCIe 4.0 x16"),
    ("RTX 30", 25.0, "PCIe 4.0 x16"),
    ("RTX 50", 50.0, "PCIe 5.0 x16"),
    ("MI300", 50.0, "PCIe 5.0 x16"),
    ("MI250", 25.0, "PCIe 4.0 x16"),
    ("V100", 12.0, "PCIe 3.0 x16"),
    ("T4", 12.0, "PCIe 3.0 x16"),
    ("RTX 20", 12.0, "PCIe 3.0 x16"),
    ("GTX", 12.0, "PCIe 3.0 x16"),
    ("Quadro", 12.0, "PCIe 3.0 x16"),
)
#: ... and for a GPU the table does not know.
PINNED_GBPS = 25.0
#: Pinned copies must move at least this much for their bandwidth to be the reference.
MIN_PINNED_BYTES = 1_000_000
#: The directions whose pageable copies are staged through a pinned buffer by the driver.
PAGEABLE_DIRECTIONS = ("HtoD", "DtoH")


@dataclass(frozen=True, slots=True)
class PageableImpact:
    """What pinning one device's pageable copies of one direction saves (TA009's impact
    model, `pageable_impact`).

    - `direction`: `HtoD` or `DtoH`;
    - `count`, `bytes`, `time_ns`: the device's copies of that direction from (to) pageable
      memory inside its window; `under_kernels_ns`: the part of their time under kernels;
    - `pinned_gbps`: the bandwidth the same bytes would reach pinned, `pinned_basis` where it
      comes from (this device's pinned copies, measured; else the link assumed for the GPU);
    - `excess_ns`: `time_ns` less the bytes at `pinned_gbps` (never negative), and no more
      than the copies' time outside kernels (a copy under a kernel costs a GPU-bound step
      nothing);
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
    direction: str = "HtoD"
    under_kernels_ns: int = 0


def pageable_impact(
    copies: pl.DataFrame, counts: StepCounts, gpu_names: dict[tuple[int, int], str] | None = None
) -> tuple[PageableImpact, ...]:
    """The PageableImpact of every device and direction with copies from or to pageable
    memory, by rank, device and direction (host to device first).

    What pinning saves for sure: the copies' time less the time the same bytes take at
    pinned bandwidth (this device's pinned copies of the same direction where they move at
    least MIN_PINNED_BYTES, else of the other direction, never under a quarter of the
    assumed link; else the link assumed for the GPU, ASSUMED_LINKS), no more than their time
    outside kernels. With `non_blocking=True` the pinned copy can also run beside compute,
    which may hide the rest; the host's time staging the data is not counted.

    `copies`: Metrics.copies.summary; `counts`: the steps each device's window holds;
    `gpu_names`: (rank, device) -> GPU name, for the assumed link."""
    names = gpu_names or {}

    def by_device(direction: str, memory: str) -> pl.DataFrame:
        side = "src_memory" if direction == "HtoD" else "dst_memory"
        return (
            copies.filter((pl.col("copy_kind") == direction) & (pl.col(side) == memory))
            .group_by(DEVICE_KEY)
            .agg(
                pl.col("count").sum(),
                pl.col("bytes").sum(),
                pl.col("time_ns").sum(),
                pl.col("under_kernels_ns").sum(),
            )
            .sort(DEVICE_KEY)
        )

    pinned = {
        d: {(r, dev): (b, t) for r, dev, _n, b, t, _u in by_device(d, "pinned").iter_rows()}
        for d in PAGEABLE_DIRECTIONS
    }
    out = []
    for direction in PAGEABLE_DIRECTIONS:
        other = "DtoH" if direction == "HtoD" else "HtoD"
        for rank, device, count, size, time, under in by_device(direction, "pageable").iter_rows():
            size, time, under = size or 0, time or 0, under or 0
            link = assumed_link(names.get((rank, device)))
            own = pinned[direction].get((rank, device), (0, 0))
            if (own[0] or 0) < MIN_PINNED_BYTES:
                own = pinned[other].get((rank, device), own)
            gbps, basis = _pinned_gbps(*own, link)
            excess = max(0, round(time - size / gbps)) if time else 0
            excess = min(excess, max(0, time - under))
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
                    direction=direction,
                    under_kernels_ns=under,
                )
            )
    return tuple(out)


#: Copies hold a device where they fill more than this share of its busy time.
COPY_BOUND_SHARE = 0.5
#: Memory kinds whose copies the driver stages or migrates (TA009, TA027 price them).
STAGED_MEMORY = ("pageable", "managed")


@dataclass(frozen=True, slots=True)
class CopyOverlapImpact:
    """What overlapping one device's copies with its compute saves, where copies that are
    not pageable or managed (pinned, device to device, peer to peer) fill most of its busy
    time (TA028's impact model, `overlap_impact`).

    - `busy_ns`, `kernel_ns`: the device's busy time and kernel time in its window;
      `copy_only_ns`: its busy time without a kernel (busy less kernels: the copies alone),
      `copy_only_share` of the busy time;
    - `copy_ns`, `bytes`, `gbps`: the direct copies' summed time, bytes and bandwidth (each
      copy's own time); `under_kernels_ns`: the part of their time under kernels;
    - `kernel_alone_ns`: kernel time without a copy beside it (kernels less the copies'
      time under them);
    - `overlap_ns`: what running copies and kernels side by side saves: the smaller of
      `copy_only_ns` and `kernel_alone_ns` (the shorter one hides under the longer);
    - `steps`; `impact_ns`: `overlap_ns` per step; `ceiling_ns`: `kernel_alone_ns` per step
      (overlap hides no more than the compute beside it); `resident_ns`: `copy_only_ns` per
      step, what keeping the data on the device would save (no price: whether it fits is
      the program's); None without steps.
    """

    rank: int
    device: int
    busy_ns: int
    kernel_ns: int
    copy_only_ns: int
    copy_only_share: float
    copy_ns: int
    bytes: int
    gbps: float | None
    under_kernels_ns: int
    kernel_alone_ns: int
    overlap_ns: int
    steps: int
    impact_ns: int | None
    ceiling_ns: int | None
    resident_ns: int | None


def overlap_impact(
    copies: pl.DataFrame, devices: pl.DataFrame, counts: StepCounts
) -> tuple[CopyOverlapImpact, ...]:
    """The CopyOverlapImpact of every device whose busy time is mostly copies (busy less
    kernels over COPY_BOUND_SHARE of busy) and whose copy time is mostly direct (not from
    or to pageable or managed memory: TA009 and TA027 price those), by rank and device.

    `copies`: Metrics.copies.summary; `devices`: Metrics.devices.summary (busy_ns,
    kernel_ns); `counts`: the steps each device's window holds."""
    staged = pl.col("src_memory").is_in(STAGED_MEMORY) | pl.col("dst_memory").is_in(STAGED_MEMORY)
    per = (
        copies.group_by(DEVICE_KEY)
        .agg(
            all_ns=pl.col("time_ns").sum(),
            copy_ns=pl.col("time_ns").filter(~staged.fill_null(False)).sum(),
            bytes=pl.col("bytes").filter(~staged.fill_null(False)).sum(),
            under=pl.col("under_kernels_ns").filter(~staged.fill_null(False)).sum(),
        )
        .join(devices.select(*DEVICE_KEY, "busy_ns", "kernel_ns"), on=DEVICE_KEY)
        .sort(DEVICE_KEY)
    )
    out = []
    for r in per.iter_rows(named=True):
        busy, kernels = int(r["busy_ns"] or 0), int(r["kernel_ns"] or 0)
        copy_ns, under = int(r["copy_ns"] or 0), int(r["under"] or 0)
        copy_only = max(0, busy - kernels)
        if not busy or copy_only <= COPY_BOUND_SHARE * busy or copy_ns * 2 <= (r["all_ns"] or 0):
            continue
        alone = max(0, kernels - under)
        overlap = min(copy_only, alone)
        rank, device = r["rank"], r["device"]
        out.append(
            CopyOverlapImpact(
                rank=rank,
                device=device,
                busy_ns=busy,
                kernel_ns=kernels,
                copy_only_ns=copy_only,
                copy_only_share=copy_only / busy,
                copy_ns=copy_ns,
                bytes=int(r["bytes"] or 0),
                gbps=(r["bytes"] / copy_ns) if copy_ns and r["bytes"] else None,
                under_kernels_ns=under,
                kernel_alone_ns=alone,
                overlap_ns=overlap,
                steps=counts.on(rank, device),
                impact_ns=counts.per_step(overlap, rank, device),
                ceiling_ns=counts.per_step(alone, rank, device),
                resident_ns=counts.per_step(copy_only, rank, device),
            )
        )
    return tuple(out)


def assumed_link(gpu: str | None) -> tuple[float, str]:
    """The pinned bandwidth assumed for a GPU by its name (ASSUMED_LINKS), and the link's
    name; PINNED_GBPS for a GPU the table does not know."""
    for pattern, gbps, link in ASSUMED_LINKS:
        if gpu and pattern.lower() in gpu.lower():
            return gbps, link
    return PINNED_GBPS, "PCIe 4.0 x16"


def _pinned_gbps(
    size: int | None, time: int | None, link: tuple[float, str] = (PINNED_GBPS, "PCIe 4.0 x16")
) -> tuple[float, str]:
    """The bandwidth the same bytes would reach pinned, from a device's pinned copies (`size`
    bytes in `time` ns, measured), else the link assumed; and where it comes from."""
    size, time = int(size or 0), int(time or 0)
    gbps, name = link
    if size >= MIN_PINNED_BYTES and time:
        return max(size / time, gbps / 4), "measured: this trace's pinned copies"
    return gbps, f"assumed: {name} for this GPU (no pinned copies in the trace)"


@dataclass(frozen=True, slots=True)
class ManagedImpact:
    """What prefetching one device's managed (unified) memory saves (TA027's impact model,
    `managed_impact`).

    - `count`, `bytes`, `time_ns`: the device's host-to-device unified-memory migrations
      inside its window (pages moved on demand when a kernel touches them, or by the
      driver's speculative prefetch around a fault); `under_kernels_ns`: the part of their
      time under kernels, which the kernels wait for;
    - `back_count`, `back_bytes`, `back_ns`: the device-to-host migrations (the host
      touching pages a kernel left on the GPU: CPU page faults);
    - `link_gbps`, `link_basis`: the rate one bulk prefetch of the same bytes reaches
      (measured from the trace's pinned copies, else the link assumed for the GPU);
    - `prefetch_ns`: the same bytes at `link_gbps`, per step (one bulk prefetch);
    - `excess_ns`: the migrations' time under kernels less the same bytes at `link_gbps`;
      `impact_ns`, `ceiling_ns`: it and the migrations' time under kernels, per step.
    """

    rank: int
    device: int
    count: int
    bytes: int
    time_ns: int
    under_kernels_ns: int
    back_count: int
    back_bytes: int
    back_ns: int
    link_gbps: float
    link_basis: str
    prefetch_ns: int
    excess_ns: int
    steps: int
    impact_ns: int | None
    ceiling_ns: int | None


def managed_impact(
    copies: pl.DataFrame, counts: StepCounts, gpu_names: dict[tuple[int, int], str] | None = None
) -> tuple[ManagedImpact, ...]:
    """The ManagedImpact of every device with host-to-device unified-memory migrations.

    A kernel that touches managed pages not on the GPU faults, and the driver migrates them
    in small pieces while the kernel waits (a 64 MiB buffer: 3,000 migrations, 9 ms under one
    kernel on an H200, against 1.3 ms for the same bytes in one transfer). Prefetching
    (`cudaMemPrefetchAsync` before the kernel) moves the same bytes in bulk at the link's
    rate: it saves the migrations' time under kernels less the bytes at that rate.

    `copies`: Metrics.copies.summary; `counts`: the steps each device's window holds;
    `gpu_names`: (rank, device) -> GPU name, for the assumed link."""
    names = gpu_names or {}
    managed = copies.filter(pl.col("src_memory") == "managed")

    def by_device(direction: str) -> dict[tuple[int, int], tuple[int, int, int, int]]:
        rows = (
            managed.filter(pl.col("copy_kind") == direction)
            .group_by(DEVICE_KEY)
            .agg(
                pl.col("count").sum(),
                pl.col("bytes").sum(),
                pl.col("time_ns").sum(),
                pl.col("under_kernels_ns").sum(),
            )
            .sort(DEVICE_KEY)
        )
        return {(r, d): (n, b or 0, t or 0, u or 0) for r, d, n, b, t, u in rows.iter_rows()}

    pinned = {
        (r["rank"], r["device"]): (r["bytes"], r["time_ns"])
        for r in copies.filter(
            pl.col("src_memory").eq("pinned") | pl.col("dst_memory").eq("pinned")
        )
        .group_by(DEVICE_KEY)
        .agg(pl.col("bytes").sum(), pl.col("time_ns").sum())
        .iter_rows(named=True)
    }
    back = by_device("DtoH")
    out = []
    for (rank, device), (count, size, time, under) in by_device("HtoD").items():
        link = assumed_link(names.get((rank, device)))
        gbps, basis = _pinned_gbps(*pinned.get((rank, device), (0, 0)), link)
        excess = max(0, round(under - size / gbps))
        b = back.get((rank, device), (0, 0, 0, 0))
        out.append(
            ManagedImpact(
                rank=rank,
                device=device,
                count=count,
                bytes=size,
                time_ns=time,
                under_kernels_ns=under,
                back_count=b[0],
                back_bytes=b[1],
                back_ns=b[2],
                link_gbps=gbps,
                link_basis=basis,
                prefetch_ns=round(size / gbps) // (counts.on(rank, device) or 1),
                excess_ns=excess,
                steps=counts.on(rank, device),
                impact_ns=counts.per_step(excess, rank, device),
                ceiling_ns=counts.per_step(under, rank, device),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Copies:
    """The memory copies in the windows (Metrics.copies).

    - `summary`: rank, device, copy_kind, src_memory, dst_memory, count, bytes, time_ns,
      gbps, under_kernels_ns: per device and kind of copy, their count, bytes, time, achieved
      bandwidth and the part of their time under kernels (`memcpy_summary`).

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
            "under_kernels_ns": pl.Int64,
        }
    }

    summary: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.copies", self.SCHEMAS)
