"""Launch shapes: how much of the GPU each kernel's launch can keep busy.

A busy timeline says a kernel was resident, not that the GPU worked: a kernel launched with
one block runs on one SM of 132 and leaves the rest idle for as long as it runs. Every trace
records each launch's shape (Kineto's kernel args, Nsight's kernel table): the grid in
blocks, the block in threads, registers per thread, shared memory per block and, in Nsight,
local memory per thread (spills). Against the device's limits (from the trace's device
properties where recorded, else `SM_LIMITS` by compute capability) they give:

- **blocks per SM**: the resident blocks the SM's warps, block slots, registers and shared
  memory allow (the CUDA occupancy calculator's arithmetic: registers allocated per warp in
  units of `REGISTER_UNIT`, shared memory per block plus the system's reserve, in units of
  `SHARED_MEMORY_UNIT`), and which of the four binds (`limited_by`);
- **occupancy**: the resident warps over the SM's maximum (theoretical occupancy; low
  occupancy is the design of many fast kernels, GEMMs and attention among them, and is
  evidence, never a finding on its own);
- **waves**: the blocks over the SMs times the blocks each holds;
- **SM fill** (`sm_fill_share`): the share of the SMs the launch keeps busy. A grid of fewer
  blocks than SMs fills `blocks / SMs` of them (a block runs on one SM); a grid of more than
  one wave spends its last wave on what is left, `waves / ceil(waves)`; anything else fills
  the GPU.

**The model of what filling the GPU saves.** A launch that fills `f` of the SMs would, with
its work spread over all of them, take `f` of its time, and never less than a kernel's fixed
cost (`KERNEL_FLOOR_NS`): it saves `time - max(f * time, KERNEL_FLOOR_NS)`, only of the time
it runs alone (a kernel that shares the GPU with kernels of other streams fills it with
them). Only launches that leave most of the GPU idle are counted: a grid far below the SM
count (`f < MAX_FILL_SHARE`), or a last wave that leaves most SMs idle (past one wave of
one block per SM, where waves are whole: `f < MAX_TAIL_FILL_SHARE`), running at least
`MIN_LAUNCH_NS` (a shorter launch is mostly fixed cost), of kernel names whose launches
are mostly such (a name whose other launches fill the GPU is chunked work, its small
launches the remainder). Communication kernels are left out: NCCL's grid is its channel
count, and its kernels wait for peers. The job stage turns the time removed into a price
where the GPU's work bounds the step (`UnderfillImpact`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.critical_path.critical_path import bounding_share
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import busy_before, union
from traceanalyzer.analyses.timeline.windows import StepCounts
from traceanalyzer.model import DeviceInfo

#: compute capability -> (max warps per SM, max resident blocks per SM, 32-bit registers per
#: SM, shared memory per SM in bytes, shared memory the system reserves per block): the CUDA
#: C++ Programming Guide's table of compute capabilities. A trace's own device properties
#: (Kineto's `maxThreadsPerMultiprocessor`, `regsPerMultiprocessor`,
#: `sharedMemPerMultiprocessor`; Nsight's `maxWarpsPerSm`, `maxBlocksPerSm`, ...) win.
SM_LIMITS: dict[str, tuple[int, int, int, int, int]] = {
    "6.0": (64, 32, 65536, 65536, 0),
    "6.1": (64, 32, 65536, 98304, 0),
    "7.0": (64, 32, 65536, 98304, 0),
    "7.5": (32, 16, 65536, 65536, 0),
    "8.0": (64, 32, 65536, 167936, 1024),
    "8.6": (48, 16, 65536, 102400, 1024),
    "8.7": (48, 16, 65536, 167936, 1024),
    "8.9": (48, 24, 65536, 102400, 1024),
    "9.0": (64, 32, 65536, 233472, 1024),
    "10.0": (64, 32, 65536, 233472, 1024),
    "10.3": (64, 32, 65536, 233472, 1024),
    "12.0": (48, 32, 65536, 102400, 1024),
}
#: An AMD compute unit (CDNA): 64-lane wavefronts, 32 of them resident, 64 KiB of LDS. ROCm
#: traces record grid and block only, so the warps and block slots are the limits read.
AMD_CU_LIMITS = (32, 32, 0, 65536, 0)
#: Registers are allocated to a warp in units of this many (compute capability 5.0 on).
REGISTER_UNIT = 256
#: Shared memory is allocated to a block in units of this many bytes.
SHARED_MEMORY_UNIT = 128
#: A grid of fewer blocks than this share of the SMs is far below the SM count: three
#: quarters of the GPU idle while it runs (a grid of half the SMs, such as batch norm's one
#: block per channel, is not flagged).
MAX_FILL_SHARE = 0.25
#: A grid past one wave whose SM fill is under this share spends most of its time on a last
#: wave that leaves most SMs idle: 1 to 1.2 waves (a last wave under a fifth full).
MAX_TAIL_FILL_SHARE = 0.6
#: Launches shorter than this are mostly fixed cost (launch, ramp-up, a small reduction's
#: last stage by design): their fill says little of what a larger grid would save.
MIN_LAUNCH_NS = 20_000
#: A kernel's fixed cost, however little it does (its launch reaching the SMs, its blocks'
#: start and end): on Hopper an empty kernel runs about 2 us back to back.
KERNEL_FLOOR_NS = 2_000
#: The kernel names shown per device besides the underfilled ones (most time first).
TOP_SHAPES = 10
#: At most this many streams per device are checked for launches that share the GPU with
#: other streams' kernels (the rest count as running alone).
MAX_STREAMS_CHECKED = 16

#: Per device (`LaunchShapes.per_device`).
DEVICE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "sms": pl.Int64(),
    "limits": pl.String(),
    "kernel_ns": pl.Int64(),
    "shaped_ns": pl.Int64(),
    "filled_ns": pl.Int64(),
    "sm_fill_share": pl.Float64(),
    "underfilled_count": pl.Int64(),
    "underfilled_ns": pl.Int64(),
    "alone_ns": pl.Int64(),
    "removed_ns": pl.Int64(),
}
#: Per device and kernel name (`LaunchShapes.kernels`): the shape of its launches with the
#: most time.
KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "name": pl.String(),
    "op_name": pl.String(),
    "origin": pl.String(),
    "count": pl.Int64(),
    "total_ns": pl.Int64(),
    "shapes": pl.Int64(),
    "blocks": pl.Int64(),
    "threads_per_block": pl.Int64(),
    "registers_per_thread": pl.Int64(),
    "shared_mem_bytes": pl.Int64(),
    "local_mem_bytes": pl.Int64(),
    "blocks_per_sm": pl.Int64(),
    "limited_by": pl.String(),
    "occupancy_share": pl.Float64(),
    "waves": pl.Float64(),
    "sm_fill_share": pl.Float64(),
    "underfilled_count": pl.Int64(),
    "underfilled_ns": pl.Int64(),
    "removed_ns": pl.Int64(),
}

#: Kernel names of libraries (cuBLAS, cuDNN, CUTLASS, PyTorch's own, FlashAttention, NCCL,
#: ROCm's): their launch shapes are the library's choice for the tensors it was given.
_LIBRARY = (
    r"(?i)^(void )?(at::|c10::|cutlass|cublas|cudnn|cub::|thrust|flash|fmha|nccl|rccl|"
    r"transformer_engine|apex|xformers|miopen|rocprim|ck::)|nvjet|xmma|gemm|gemv|^sm\d+_|"
    r"^(ampere|volta|turing|hopper|maxwell)_|^Cijk_|MIOpen|cutlass|cudnn|at::native"
)


def origin(name: pl.Expr) -> pl.Expr:
    """Who chose the launch shape: `compiled` (Inductor's `triton_*` kernels), `library`
    (cuBLAS, cuDNN, CUTLASS, PyTorch's own kernels, ...), else `custom` (a kernel of the
    program's own: a Triton or CUDA kernel by a bare name)."""
    return (
        pl.when(name.str.starts_with("triton_"))
        .then(pl.lit("compiled"))
        .when(name.str.contains(_LIBRARY))
        .then(pl.lit("library"))
        .otherwise(pl.lit("custom"))
    )


def device_limits(infos: Sequence[DeviceInfo]) -> pl.DataFrame:
    """Per (rank, device): sms, warp_size, max_warps, max_blocks, regs_per_sm, smem_per_sm,
    smem_reserved and `limits`: `trace` where the trace records the SM's limits, `table`
    where they come from SM_LIMITS (or AMD_CU_LIMITS), `unknown` where neither (the SM fill
    of a grid below the SM count needs none of them)."""
    rows = []
    for d in infos:
        amd = bool(d.name) and any(s in (d.name or "") for s in ("AMD", "Instinct", "Radeon"))
        table = AMD_CU_LIMITS if amd else SM_LIMITS.get(d.compute_capability or "")
        warp = 64 if amd else 32
        warps, blocks, regs, smem, reserved = table or (None, None, None, None, 0)
        recorded = d.max_threads_per_sm is not None
        if recorded:
            warps = (d.max_threads_per_sm or 0) // warp or warps
        rows.append(
            {
                "rank": d.rank,
                "device": d.device,
                "sms": d.sm_count,
                "warp_size": warp,
                "max_warps": warps,
                "max_blocks": d.max_blocks_per_sm or blocks,
                "regs_per_sm": d.regs_per_sm or regs or None,
                "smem_per_sm": d.shared_mem_per_sm or smem,
                "smem_reserved": reserved,
                "limits": "trace" if recorded else "table" if table else "unknown",
            }
        )
    schema = {
        "rank": pl.Int32,
        "device": pl.Int32,
        "sms": pl.Int64,
        "warp_size": pl.Int64,
        "max_warps": pl.Int64,
        "max_blocks": pl.Int64,
        "regs_per_sm": pl.Int64,
        "smem_per_sm": pl.Int64,
        "smem_reserved": pl.Int64,
        "limits": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row").unique(["rank", "device"], keep="first")


def _volume(col: str) -> pl.Expr:
    """x*y*z of a launch's [x, y, z] (null where not recorded): three element reads, not a
    list evaluation per row (a million kernels)."""
    dims = [pl.col(col).list.get(i, null_on_oob=True).cast(pl.Int64).fill_null(1) for i in range(3)]
    return pl.when(pl.col(col).is_not_null()).then(dims[0] * dims[1] * dims[2])


def shaped(kernels: pl.LazyFrame, limits: pl.DataFrame) -> pl.LazyFrame:
    """The kernels with a recorded grid, with their launch shape against their device's
    limits: blocks, threads_per_block, blocks_per_sm, limited_by, occupancy_share, waves,
    sm_fill_share (the module docstring). `kernels`: rank, device, grid, block, registers,
    shared_mem_bytes (and any other columns, kept)."""
    blocks = _volume("grid")
    threads = _volume("block")
    c = pl.col
    warps = (c("threads_per_block") + c("warp_size") - 1) // c("warp_size")
    regs = c("registers").cast(pl.Int64)
    per_warp = ((regs * c("warp_size") + REGISTER_UNIT - 1) // REGISTER_UNIT) * REGISTER_UNIT
    by_regs = pl.when((regs > 0) & (c("regs_per_sm") > 0)).then(
        (c("regs_per_sm") // per_warp) // c("_warps")
    )
    smem = c("shared_mem_bytes").fill_null(0) + c("smem_reserved")
    smem = ((smem + SHARED_MEMORY_UNIT - 1) // SHARED_MEMORY_UNIT) * SHARED_MEMORY_UNIT
    by_smem = pl.when((c("shared_mem_bytes") > 0) & (c("smem_per_sm") > 0)).then(
        c("smem_per_sm") // smem
    )
    by_warps = c("max_warps") // c("_warps")
    limits_of = {"blocks": c("max_blocks"), "warps": by_warps, "registers": by_regs}
    per_sm = pl.min_horizontal(*limits_of.values(), by_smem)
    limited = pl.lit(None, pl.String)
    # where two limits tie, the first named wins: warps, block slots, registers, shared memory
    order = [("warps", by_warps), ("blocks", c("max_blocks")), ("registers", by_regs)]
    for name, limit in reversed([*order, ("shared memory", by_smem)]):
        limited = pl.when(limit == c("blocks_per_sm")).then(pl.lit(name)).otherwise(limited)
    waves = c("blocks") / (c("sms") * c("blocks_per_sm"))
    fill = (
        pl.when(c("blocks") < c("sms"))
        .then(c("blocks") / c("sms"))
        .when(waves > 1)
        .then(waves / waves.ceil())
        .otherwise(pl.lit(1.0))
    )
    return (
        kernels.filter(pl.col("grid").is_not_null())
        .join(limits.lazy(), on=["rank", "device"], how="left")
        .with_columns(blocks=blocks, threads_per_block=threads)
        .filter((c("blocks") > 0) & (c("threads_per_block") > 0))
        .with_columns(_warps=warps)
        .with_columns(blocks_per_sm=per_sm)
        .with_columns(
            blocks_per_sm=pl.when(c("blocks_per_sm") > 0).then(c("blocks_per_sm")),
        )
        .with_columns(
            limited_by=pl.when(c("blocks_per_sm").is_not_null()).then(limited),
            occupancy_share=(c("blocks_per_sm") * c("_warps") / c("max_warps")).clip(
                upper_bound=1.0
            ),
            waves=waves,
            sm_fill_share=pl.when(c("sms") > 0).then(fill),
        )
        .drop("_warps")
    )


def _alone_ns(candidates: pl.DataFrame, kernels: pl.DataFrame) -> pl.Series:
    """Each candidate launch's time not shared with kernels of another stream of its device
    (its `clipped_ns` where no other stream ran kernels then)."""
    key = ["rank", "device"]
    out = candidates.with_row_index("_row").with_columns(_shared=pl.lit(0, pl.Int64))
    streams = candidates.select(*key, "stream").unique().sort(*key, "stream")
    per_device = (
        kernels.select(*key, "stream").unique().group_by(key).len().filter(pl.col("len") > 1)
    )
    checked = streams.join(per_device.select(key), on=key).head(MAX_STREAMS_CHECKED)
    parts = []
    for rank, device, stream in checked.iter_rows():  # a few streams, never events
        others = kernels.lazy().filter(
            (pl.col("rank") == rank) & (pl.col("device") == device) & (pl.col("stream") != stream)
        )
        merged = union(others.select(*key, "start_ns", "end_ns"), key)
        mine = out.lazy().filter(
            (pl.col("rank") == rank) & (pl.col("device") == device) & (pl.col("stream") == stream)
        )
        looked = busy_before(busy_before(mine, merged, key, "start_ns"), merged, key, "end_ns")
        parts.append(
            looked.select(
                "_row", _overlap=pl.col("end_ns_busy_ns") - pl.col("start_ns_busy_ns")
            ).collect()
        )
    if parts:
        shared = pl.concat(parts)
        out = out.join(shared, on="_row", how="left").with_columns(
            _shared=pl.col("_overlap").fill_null(0)
        )
    return (
        out.sort("_row")
        .select((pl.col("clipped_ns") - pl.col("_shared")).clip(lower_bound=0))
        .to_series()
    )


def launch_shapes(
    kernels: pl.DataFrame, infos: Sequence[DeviceInfo]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per device (DEVICE_SCHEMA) and per device and kernel name (KERNEL_SCHEMA): the launch
    shapes of the kernels inside the windows, the underfilled launches (SM fill under
    MAX_FILL_SHARE, communication left out), their time, the part of it they ran alone and
    the time filling the GPU removes (the module docstring). `kernels`: the classified kernels
    inside the windows (`clipped_ns`, `is_comm`, `op_name`)."""
    key = ["rank", "device"]
    limits = device_limits(infos)
    k = (
        shaped(
            kernels.lazy()
            .filter(pl.col("kind") == "kernel")
            .select(
                *key,
                "stream",
                "start_ns",
                "end_ns",
                "clipped_ns",
                "is_comm",
                "grid",
                "block",
                "registers",
                "shared_mem_bytes",
                "local_mem_bytes",
                "name",  # categorical until grouped: a million kernels' names as text cost 100 MB
                "op_name",
            ),
            limits,
        )
        .drop(
            "grid",
            "block",
            "warp_size",
            "max_warps",
            "max_blocks",
            "regs_per_sm",
            "smem_per_sm",
            "smem_reserved",
            "limits",
        )
        .collect()
    )
    fill = pl.col("sm_fill_share")
    low = (
        pl.when(pl.col("blocks") < pl.col("sms"))
        .then(fill < MAX_FILL_SHARE)
        .otherwise((fill < MAX_TAIL_FILL_SHARE) & (pl.col("blocks_per_sm") == 1))
        & ~pl.col("is_comm")
        & (pl.col("clipped_ns") >= MIN_LAUNCH_NS)
    ).fill_null(False)
    # a kernel whose other launches fill the GPU is chunked work (a multi-tensor apply's
    # last chunk): its small launches are the remainder, not its shape
    mostly = (pl.col("clipped_ns").filter(low).sum() * 2 >= pl.col("clipped_ns").sum()).over(
        "rank", "device", "name"
    )
    k = k.with_columns(underfilled=low & mostly)
    candidates = k.filter(pl.col("underfilled"))
    if candidates.height:
        alone = _alone_ns(candidates, kernels.filter(pl.col("kind") == "kernel"))
        ideal = pl.max_horizontal(pl.col("clipped_ns") * fill, pl.lit(KERNEL_FLOOR_NS))
        candidates = candidates.with_columns(alone_ns=alone).with_columns(
            removed_ns=pl.min_horizontal(pl.col("alone_ns"), pl.col("clipped_ns") - ideal)
            .clip(lower_bound=0)
            .round()
            .cast(pl.Int64)
        )
    else:
        candidates = candidates.with_columns(
            alone_ns=pl.lit(0, pl.Int64), removed_ns=pl.lit(0, pl.Int64)
        )
    per_device = _per_device(kernels, k, candidates, limits)
    return per_device, _per_name(k, candidates)


def _per_device(
    kernels: pl.DataFrame, k: pl.DataFrame, candidates: pl.DataFrame, limits: pl.DataFrame
) -> pl.DataFrame:
    key = ["rank", "device"]
    total = (
        kernels.lazy()
        .filter(pl.col("kind") == "kernel")
        .group_by(key)
        .agg(kernel_ns=pl.col("clipped_ns").sum())
    )
    have = (
        k.lazy()
        .group_by(key)
        .agg(
            shaped_ns=pl.col("clipped_ns").sum(),
            # whole ns per launch: a sum of integers does not depend on the events' order
            filled_ns=(pl.col("clipped_ns") * pl.col("sm_fill_share").fill_null(1.0))
            .round()
            .cast(pl.Int64)
            .sum(),
        )
    )
    under = (
        candidates.lazy()
        .group_by(key)
        .agg(
            underfilled_count=pl.len().cast(pl.Int64),
            underfilled_ns=pl.col("clipped_ns").sum(),
            alone_ns=pl.col("alone_ns").sum(),
            removed_ns=pl.col("removed_ns").sum(),
        )
    )
    frame = (
        total.join(have, on=key, how="left")
        .join(under, on=key, how="left")
        .join(limits.lazy().select(*key, "sms", "limits"), on=key, how="left")
        .with_columns(
            pl.col("shaped_ns", "underfilled_count", "underfilled_ns", "alone_ns", "removed_ns")
            .fill_null(0)
            .cast(pl.Int64),
            pl.col("filled_ns").fill_null(0).cast(pl.Int64),
        )
        .with_columns(
            # the SMs the kernels kept busy over their time (null without an SM count)
            sm_fill_share=pl.when((pl.col("sms") > 0) & (pl.col("shaped_ns") > 0)).then(
                pl.col("filled_ns") / pl.col("shaped_ns")
            )
        )
        .select(list(DEVICE_SCHEMA))
        .sort(key)
        .collect()
    )
    return frame.cast(DEVICE_SCHEMA)  # type: ignore[arg-type]


_SHAPE = [
    "blocks",
    "threads_per_block",
    "registers",
    "shared_mem_bytes",
    "local_mem_bytes",
    "blocks_per_sm",
    "limited_by",
    "occupancy_share",
    "waves",
    "sm_fill_share",
]


def _per_name(k: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
    """Per device and name: the top TOP_SHAPES names by time and every underfilled one, with
    the shape of their launches with the most time (of the underfilled ones, where it has
    any)."""
    key = ["rank", "device"]
    if k.height == 0:
        return pl.DataFrame(schema=KERNEL_SCHEMA)
    by_shape = (
        k.group_by(*key, "name", *_SHAPE)
        .agg(shape_ns=pl.col("clipped_ns").sum(), _under=pl.col("underfilled").any())
        # an underfilled name's shape is that of its underfilled launches; ties in a fixed
        # order (the report is diffed)
        .sort(
            ["_under", "shape_ns", "blocks", "threads_per_block", "registers", "shared_mem_bytes"],
            descending=[True, True, False, False, False, False],
            nulls_last=True,
        )
        .group_by(*key, "name", maintain_order=True)
        .agg(pl.col(_SHAPE).first(), shapes=pl.len().cast(pl.Int64))
        .with_columns(pl.col("name").cast(pl.String))
    )
    ops = (
        k.filter(pl.col("op_name").is_not_null())
        .group_by(*key, "name", "op_name")
        .agg(op_ns=pl.col("clipped_ns").sum())
        .with_columns(pl.col("name", "op_name").cast(pl.String))
        .sort("op_ns", "op_name", descending=[True, False])
        .group_by(*key, "name", maintain_order=True)
        .agg(pl.col("op_name").first())
    )
    totals = (
        k.group_by(*key, "name")
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("clipped_ns").sum())
        .with_columns(pl.col("name").cast(pl.String))
    )
    under = (
        candidates.group_by(*key, "name")
        .agg(
            underfilled_count=pl.len().cast(pl.Int64),
            underfilled_ns=pl.col("clipped_ns").sum(),
            removed_ns=pl.col("removed_ns").sum(),
        )
        .with_columns(pl.col("name").cast(pl.String))
    )
    ranked = totals.sort(["total_ns", "name"], descending=[True, False]).with_columns(
        _rank=pl.int_range(1, pl.len() + 1).over(key)
    )
    frame = (
        ranked.join(under, on=[*key, "name"], how="left")
        .filter((pl.col("_rank") <= TOP_SHAPES) | pl.col("underfilled_ns").is_not_null())
        .join(by_shape, on=[*key, "name"], how="left")
        .join(ops, on=[*key, "name"], how="left")
        .with_columns(
            pl.col("underfilled_count", "underfilled_ns", "removed_ns").fill_null(0),
            origin=origin(pl.col("name")),
            registers_per_thread=pl.col("registers").cast(pl.Int64),
        )
        .sort(
            ["rank", "device", "removed_ns", "total_ns", "name"],
            descending=[False, False, True, True, False],
        )
        .select(list(KERNEL_SCHEMA))
    )
    return frame.cast(KERNEL_SCHEMA)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class UnderfillImpact:
    """What filling the GPU with the underfilled launches saves on one device, per steady
    step: `kernel_ns`, `underfilled_ns` (their time), `kernel_share` (their share of the
    kernel time), `removed_ns` (the GPU time the model
    removes), `bound_share` (the share of kernel time that bounds the step: the critical
    path's `gpu_compute_2x` what-if, `critical_path.bounding_share`), `impact_ns` (removed
    times bound share) and `ceiling_ns` (their time: no fill saves more)."""

    rank: int
    device: int
    steps: int
    kernel_ns: int
    underfilled_ns: int
    kernel_share: float
    removed_ns: int
    bound_share: float
    impact_ns: int
    ceiling_ns: int


def underfill_impact(
    per_device: pl.DataFrame, savings: Mapping[tuple[int, str], int], counts: StepCounts
) -> tuple[UnderfillImpact, ...]:
    """Each device's UnderfillImpact where it has underfilled launches (`per_device`:
    LaunchShapes.per_device; `savings`: critical_path.mean_savings)."""
    out = []
    for r in per_device.filter(pl.col("underfilled_count") > 0).iter_rows(named=True):
        rank, device = r["rank"], r["device"]
        per = counts.on(rank, device)
        if not per:
            continue
        removed = r["removed_ns"] // per
        share = bounding_share(savings.get((rank, "gpu_compute_2x")), r["kernel_ns"] // per)
        out.append(
            UnderfillImpact(
                rank=rank,
                device=device,
                steps=per,
                kernel_ns=r["kernel_ns"] // per,
                underfilled_ns=r["underfilled_ns"] // per,
                kernel_share=r["underfilled_ns"] / r["kernel_ns"] if r["kernel_ns"] else 0.0,
                removed_ns=removed,
                bound_share=share,
                impact_ns=min(round(removed * share), r["underfilled_ns"] // per),
                ceiling_ns=r["underfilled_ns"] // per,
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class LaunchShapes:
    """The kernels' launch shapes against their devices' limits (Metrics.launch_shapes).

    - `per_device`: DEVICE_SCHEMA: the SM count and where the limits came from, the kernel
      time, the part with a recorded shape, its SM-fill-weighted time (`filled_ns`: the
      busy GPU's SMs at work, in SM-time) and its share of that time (`sm_fill_share`, null
      without an SM count), the underfilled launches' count and time, the
      part of it they ran alone and the time the fill model removes;
    - `kernels`: KERNEL_SCHEMA: per device, the kernels with most time and every
      underfilled one, with the shape of their launches with the most time.
    """

    per_device: pl.DataFrame
    kernels: pl.DataFrame

    SCHEMAS: ClassVar[Schemas] = {"per_device": DEVICE_SCHEMA, "kernels": KERNEL_SCHEMA}

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.launch_shapes", self.SCHEMAS)

    def underfilled(self, rank: int, device: int, limit: int = 5) -> list[dict[str, object]]:
        """The underfilled kernels of one device, most time removed first."""
        rows = self.kernels.filter(
            (pl.col("rank") == rank) & (pl.col("device") == device) & (pl.col("removed_ns") > 0)
        )
        return rows.head(limit).to_dicts()
