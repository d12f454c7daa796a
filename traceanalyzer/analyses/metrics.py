"""Metrics: the frozen container of every analysis result, handed to the report."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.analyses.critical_path import critical_path
from traceanalyzer.analyses.gpu import casts, devices, fusion, idle, kernels, memory
from traceanalyzer.analyses.host import host_phases
from traceanalyzer.analyses.timeline import startup, steady, windows
from traceanalyzer.analyses.timeline.frames import SchemaDriftError, check_schema

if TYPE_CHECKING:
    from traceanalyzer.analyses.critical_path.critical_path import CriticalPath
    from traceanalyzer.analyses.distributed.collectives import CollectiveSplit, OverlapImpact
    from traceanalyzer.analyses.distributed.imbalance import RankBalance
    from traceanalyzer.analyses.facts import RunFacts
    from traceanalyzer.analyses.gpu.casts import CastSources
    from traceanalyzer.analyses.gpu.copies import PageableImpact
    from traceanalyzer.analyses.gpu.devices import Devices
    from traceanalyzer.analyses.gpu.flops import Flops
    from traceanalyzer.analyses.gpu.fusion import MemoryImpact
    from traceanalyzer.analyses.gpu.gemm_units import TensorCoreImpact
    from traceanalyzer.analyses.gpu.idle import Idle, SyncImpact
    from traceanalyzer.analyses.gpu.kernels import CastImpact, Kernels
    from traceanalyzer.analyses.gpu.memory import Memory
    from traceanalyzer.analyses.gpu.shapes import ShapeImpact
    from traceanalyzer.analyses.host.host_bound import HostWaitImpact, LaunchImpact
    from traceanalyzer.analyses.host.host_phases import HostPhases
    from traceanalyzer.analyses.timeline.startup import DeviceStartup
    from traceanalyzer.analyses.timeline.windows import Steps

__all__ = ["FRAME_SCHEMAS", "OPTIONAL_COLUMNS", "Metrics", "SchemaDriftError", "check_frame"]

#: The declared columns of every analysis result, in order: name -> dtype (`pl.Enum` stands
#: for an Enum of any categories). `Metrics` checks its frames against them when it is built,
#: and each typed result its own (`SCHEMAS`, listed here under `<field>.<frame>`), so a
#: renamed or retyped column fails at the analysis that made it, not silently in the
#: published JSON (the report copies several of these frames into it).
FRAME_SCHEMAS: dict[str, dict[str, Any]] = {
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
    "copies": {
        "rank": pl.Int32,
        "device": pl.Int32,
        "copy_kind": pl.String,
        "src_memory": pl.String,
        "dst_memory": pl.String,
        "count": pl.Int64,
        "bytes": pl.Int64,
        "time_ns": pl.Int64,
        "gbps": pl.Float64,
    },
    "bandwidth": {
        "rank": pl.Int32,
        "device": pl.Int32,
        "op_name": pl.String,
        "ops": pl.Int64,
        "kernel_ns": pl.Int64,
        "bytes": pl.Int64,
        "gbps": pl.Float64,
        "peak_gbps": pl.Float64,
        "beyond_peak": pl.Boolean,
        "share_of_peak": pl.Float64,
    },
    "matmul_shapes": {
        "rank": pl.Int32,
        "device": pl.Int32,
        "op_name": pl.String,
        "m": pl.Int64,
        "n": pl.Int64,
        "k": pl.Int64,
        "dtype": pl.String,
        "calls": pl.Int64,
        "kernel_ns": pl.Int64,
        "align": pl.Int64,
        "misaligned": pl.String,
    },
    "non_tc_gemms": {
        "rank": pl.Int32,
        "device": pl.Int32,
        "name": pl.String,
        "evidence": pl.String,
        "op_dtype": pl.String,
        "count": pl.Int64,
        "total_ns": pl.Int64,
    },
    "early_starts": {
        "rank": pl.Int32,
        "device": pl.Int32,
        "linked": pl.Int64,
        "early": pl.Int64,
        "early_share": pl.Float64,
        "max_early_ns": pl.Int64,
    },
    "attention": {
        "rank": pl.Int32,
        "device": pl.Int32,
        "n": pl.Int64,
        "t": pl.Int64,
        "s": pl.Int64,
        "d": pl.Int64,
        "causal": pl.Boolean,
        "backward": pl.Boolean,
        "ops": pl.Int64,
        "calls": pl.Int64,
        "kernel_ns": pl.Int64,
        "fused_ns": pl.Int64,
    },
    "memory_model": dict(fusion.SCHEMA),
    "fusion_patterns": dict(fusion.PATTERN_SCHEMA),
    "startup": dict(startup.SCHEMA),
    "startup_idle": dict(startup.IDLE_SCHEMA),
    "periods": dict(steady.PERIOD_SCHEMA),
    **{f"steps.{k}": dict(v) for k, v in windows.Steps.SCHEMAS.items()},
    **{f"devices.{k}": dict(v) for k, v in devices.Devices.SCHEMAS.items()},
    **{f"kernels.{k}": dict(v) for k, v in kernels.Kernels.SCHEMAS.items()},
    **{f"idle.{k}": dict(v) for k, v in idle.Idle.SCHEMAS.items()},
    **{f"critical_path.{k}": dict(v) for k, v in critical_path.CriticalPath.SCHEMAS.items()},
    **{f"memory.{k}": dict(v) for k, v in memory.Memory.SCHEMAS.items()},
    **{f"host_phases.{k}": dict(v) for k, v in host_phases.HostPhases.SCHEMAS.items()},
    **{f"cast_sources.{k}": dict(v) for k, v in casts.CastSources.SCHEMAS.items()},
}
#: Columns a frame carries only where the trace has them (`<field>.<frame>` for a typed
#: result's, from its `OPTIONAL`).
OPTIONAL_COLUMNS: dict[str, dict[str, Any]] = {
    f"idle.{k}": dict(v) for k, v in idle.Idle.OPTIONAL.items()
}


def check_frame(name: str, frame: pl.DataFrame) -> None:
    """Raise SchemaDriftError where `frame` is not `FRAME_SCHEMAS[name]` (plus the frame's
    optional columns, at the end, in order)."""
    check_schema(f"Metrics.{name}", frame, FRAME_SCHEMAS[name], OPTIONAL_COLUMNS.get(name))


@dataclass(frozen=True, slots=True)
class Metrics:
    """Results of `analyze()`; frames are summaries, never whole event tables.

    - `basis`: "steps" when step markers defined the window, else "trace".
    - `steps`: each device's window, its steady steps, the warm-up and outlier steps left
      out, the GPU work outside the windows and the steps each window holds
      (analyses/timeline/windows.py: windows.Steps).
    - `devices`: each device's busy and idle time in its window, idle by cause,
      communication and Tensor Core time (analyses/gpu/devices.py: devices.Devices).
    - `kernels`: the kernels' histograms, top kernels, classes, names, count and time, and
      the small kernels' shares (analyses/gpu/kernels.py: kernels.Kernels).
    - `idle`: the idle gaps by cause, their histogram, the host syncs, their call sites and
      count per step, the timeline strip's bins and the launch-gap limit
      (analyses/gpu/idle.py: idle.Idle).
    - `collectives`: rank, device, collective, count, total_ns, exposed_ns, msg_bytes.
    - `rank_waits`: rank, collectives, comm_ns, wait_ns (empty for a single rank).
    - `slowest_rank`: the rank others wait for (the largest own time: `balance`; without
      steps, the rank that waits least).
    - `bandwidth`: rank, device, op_name, ops, kernel_ns, bytes, gbps, peak_gbps,
      share_of_peak: memory-bound operators' achieved bandwidth (where shapes are recorded).
    - `matmul_shapes`: rank, device, op_name, m, n, k, dtype, calls, kernel_ns, align,
      misaligned (see analyses/gpu/shapes.py).
    - `non_tc_gemms`: rank, device, name, evidence, op_dtype, count, total_ns: GEMM kernels
      off the Tensor Cores (analyses/gpu/gemm_units.py); `early_starts`: rank, device, linked,
      early, early_share, max_early_ns: GPU work starting before its launch (clock.py).
    - `memory`: allocated memory's step peaks, their growth and each growing device's runway
      (analyses/gpu/memory.py: memory.Memory; empty without memory events).
    - `critical_path`: the critical path per sampled (rank, step) and the what-if scenarios
      (analyses/critical_path/critical_path.py: critical_path.CriticalPath).
    - `copies`: rank, device, copy_kind, src_memory, dst_memory, count, bytes, time_ns, gbps.
    - `facts`: what the run context is read off (facts.RunFacts: names, kinds recorded).
    - `collective_split`: every rank's collectives matched across ranks, their time split
      into waiting for peers and transfer, exposed or not, with bytes and bus bandwidth
      (analyses/distributed/collectives.py).
    - `flops`: FLOPs per device and steady step, achieved TFLOP/s, MFU, and the roofline of
      the matrix and attention operators (analyses/gpu/flops.py).
    - `host_phases`: where the host's time goes, per steady host step and by the phase that
      launched the kernels (analyses/host/host_phases.py: host_phases.HostPhases; empty
      without CPU operators).
    - `attention`: rank, device, n, t, s, d, causal, backward, ops, calls, kernel_ns,
      fused_ns: attention computed by hand over n x T x S score tensors
      (analyses/gpu/attention.py).
    - `memory_model`: per device, the memory-bound kernels' traffic, the part a fusion
      removes and the roof: what fixing them can save (analyses/gpu/fusion.py);
      `fusion_patterns`: the operator sequences of the chains whose fusion saves most.
    - `startup`: one-time host calls inside the windows (initialisation, a first launch
      that loads a library) and the GPU idle under them (analyses/timeline/startup.py);
      `startup_idle`: per device, their union (startup_ns) and the idle under it (idle_ns).
    - `periods`: per rank, the loop's period over the steady steps, host or GPU side
      (steady.loop_periods), with the shortest and longest step.
    - `balance`: the ranks' own times per steady step, the slowest rank, why, and the price
      of the imbalance (analyses/distributed/imbalance.py).
    - The impact models: what fixing a finding saves per steady step (`impact_ns`) and the
      most it can save (`ceiling_ns`), with the figures they are computed from, read by the
      rules. `memory_impact_model`: what fusing the memory-bound kernels saves, on the
      device where it saves most (fusion.memory_impact); `sync_model`: per rank, the GPU
      idle of the host syncs (idle.sync_impact);
      `pageable_model`: per device, what pinning its pageable host-to-device copies saves
      (copies.pageable_impact); `tensor_core_model`: per device, what moving its GEMMs onto
      the Tensor Cores saves (gemm_units.tensor_core_impact); `shape_model`: per device,
      what padding its misaligned matmul shapes saves (shapes.shape_impact);
      `overlap_model`: per device, what overlapping its exposed communication with compute
      saves (collectives.overlap_impact); `cast_model`: what cutting the copy and cast
      kernels saves (kernels.cast_impact); `cast_sources`: where they come from and what
      each named fix removes (analyses/gpu/casts.py: casts.CastSources); `host_wait_model`:
      per device, what feeding the GPU faster saves (host_bound.host_wait_impact);
      `launch_model`: per device, what launching fewer kernels saves
      (host_bound.launch_impact).
    - `startup_model`: per device, its window, its one-time work, the GPU idle under it and
      the calls that name it (startup.per_device).
    """

    basis: str
    steps: Steps
    devices: Devices
    kernels: Kernels
    idle: Idle
    critical_path: CriticalPath
    memory: Memory
    collectives: pl.DataFrame
    rank_waits: pl.DataFrame
    copies: pl.DataFrame
    slowest_rank: int | None
    bandwidth: pl.DataFrame
    matmul_shapes: pl.DataFrame
    non_tc_gemms: pl.DataFrame
    early_starts: pl.DataFrame
    facts: RunFacts
    collective_split: CollectiveSplit
    flops: Flops
    host_phases: HostPhases
    attention: pl.DataFrame
    balance: RankBalance
    memory_model: pl.DataFrame
    fusion_patterns: pl.DataFrame
    startup: pl.DataFrame
    startup_idle: pl.DataFrame
    periods: pl.DataFrame
    memory_impact_model: MemoryImpact
    sync_model: tuple[SyncImpact, ...]
    pageable_model: tuple[PageableImpact, ...]
    tensor_core_model: tuple[TensorCoreImpact, ...]
    shape_model: tuple[ShapeImpact, ...]
    overlap_model: tuple[OverlapImpact, ...]
    cast_model: CastImpact
    cast_sources: CastSources
    host_wait_model: tuple[HostWaitImpact, ...]
    launch_model: tuple[LaunchImpact, ...]
    startup_model: tuple[DeviceStartup, ...]

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, pl.DataFrame):
                check_frame(f.name, value)
