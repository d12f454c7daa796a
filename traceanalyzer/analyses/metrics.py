"""Metrics: the frozen container of every analysis result, handed to the report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.analyses.causes import impact as causes_impact
from traceanalyzer.analyses.counters import gpu_metrics, launch_shapes, ncu_results
from traceanalyzer.analyses.critical_path import critical_path
from traceanalyzer.analyses.distributed import overlap
from traceanalyzer.analyses.gpu import (
    attention,
    bandwidth,
    casts,
    copies,
    devices,
    fusion,
    gemm_units,
    idle,
    kernels,
    memory,
    shapes,
)
from traceanalyzer.analyses.host import host_phases
from traceanalyzer.analyses.timeline import clock, startup, steady, windows
from traceanalyzer.analyses.timeline.frames import SchemaDriftError, check_schema

if TYPE_CHECKING:
    from traceanalyzer.analyses.causes.impact import CauseImpact, Causes
    from traceanalyzer.analyses.counters.gpu_metrics import ClockImpact, GpuMetrics
    from traceanalyzer.analyses.counters.launch_shapes import LaunchShapes, UnderfillImpact
    from traceanalyzer.analyses.counters.ncu_results import NcuJoin
    from traceanalyzer.analyses.critical_path.critical_path import CriticalPath
    from traceanalyzer.analyses.distributed.collectives import CollectiveSplit, OverlapImpact
    from traceanalyzer.analyses.distributed.imbalance import RankBalance
    from traceanalyzer.analyses.distributed.overlap import Communication
    from traceanalyzer.analyses.facts import RunFacts
    from traceanalyzer.analyses.gpu.attention import Attention
    from traceanalyzer.analyses.gpu.bandwidth import Bandwidth
    from traceanalyzer.analyses.gpu.casts import CastSources
    from traceanalyzer.analyses.gpu.copies import (
        Copies,
        CopyOverlapImpact,
        ManagedImpact,
        PageableImpact,
    )
    from traceanalyzer.analyses.gpu.devices import Devices
    from traceanalyzer.analyses.gpu.flops import Flops
    from traceanalyzer.analyses.gpu.fusion import Fusion, MemoryImpact
    from traceanalyzer.analyses.gpu.gemm_units import GemmUnits, TensorCoreImpact
    from traceanalyzer.analyses.gpu.idle import Idle, SyncImpact
    from traceanalyzer.analyses.gpu.kernels import CastImpact, Kernels
    from traceanalyzer.analyses.gpu.memory import Memory
    from traceanalyzer.analyses.gpu.shapes import ShapeImpact, Shapes
    from traceanalyzer.analyses.host.host_bound import HostWaitImpact, LaunchImpact
    from traceanalyzer.analyses.host.host_phases import HostPhases
    from traceanalyzer.analyses.timeline.clock import EarlyStarts
    from traceanalyzer.analyses.timeline.startup import DeviceStartup, Startup
    from traceanalyzer.analyses.timeline.steady import Periods
    from traceanalyzer.analyses.timeline.windows import Steps

__all__ = ["FRAME_SCHEMAS", "OPTIONAL_COLUMNS", "Metrics", "SchemaDriftError", "check_frame"]

#: The declared columns of every analysis result's frames, in order: `<field>.<frame>` ->
#: column -> dtype (`pl.Enum` stands for an Enum of any categories). Each typed result
#: declares its own (`SCHEMAS`) and checks its frames against them when it is built, so a
#: renamed or retyped column fails at the analysis that made it, not silently in the
#: published JSON (the report copies several of these frames into it).
FRAME_SCHEMAS: dict[str, dict[str, Any]] = {
    **{f"steps.{k}": dict(v) for k, v in windows.Steps.SCHEMAS.items()},
    **{f"devices.{k}": dict(v) for k, v in devices.Devices.SCHEMAS.items()},
    **{f"kernels.{k}": dict(v) for k, v in kernels.Kernels.SCHEMAS.items()},
    **{f"idle.{k}": dict(v) for k, v in idle.Idle.SCHEMAS.items()},
    **{f"critical_path.{k}": dict(v) for k, v in critical_path.CriticalPath.SCHEMAS.items()},
    **{f"memory.{k}": dict(v) for k, v in memory.Memory.SCHEMAS.items()},
    **{f"host_phases.{k}": dict(v) for k, v in host_phases.HostPhases.SCHEMAS.items()},
    **{f"cast_sources.{k}": dict(v) for k, v in casts.CastSources.SCHEMAS.items()},
    **{f"communication.{k}": dict(v) for k, v in overlap.Communication.SCHEMAS.items()},
    **{f"copies.{k}": dict(v) for k, v in copies.Copies.SCHEMAS.items()},
    **{f"bandwidth.{k}": dict(v) for k, v in bandwidth.Bandwidth.SCHEMAS.items()},
    **{f"shapes.{k}": dict(v) for k, v in shapes.Shapes.SCHEMAS.items()},
    **{f"gemm_units.{k}": dict(v) for k, v in gemm_units.GemmUnits.SCHEMAS.items()},
    **{f"early_starts.{k}": dict(v) for k, v in clock.EarlyStarts.SCHEMAS.items()},
    **{f"attention.{k}": dict(v) for k, v in attention.Attention.SCHEMAS.items()},
    **{f"fusion.{k}": dict(v) for k, v in fusion.Fusion.SCHEMAS.items()},
    **{f"startup.{k}": dict(v) for k, v in startup.Startup.SCHEMAS.items()},
    **{f"periods.{k}": dict(v) for k, v in steady.Periods.SCHEMAS.items()},
    **{f"causes.{k}": dict(v) for k, v in causes_impact.Causes.SCHEMAS.items()},
    **{f"launch_shapes.{k}": dict(v) for k, v in launch_shapes.LaunchShapes.SCHEMAS.items()},
    **{f"ncu.{k}": dict(v) for k, v in ncu_results.NcuJoin.SCHEMAS.items()},
    **{f"gpu_metrics.{k}": dict(v) for k, v in gpu_metrics.GpuMetrics.SCHEMAS.items()},
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

    - `basis`: "steps" when step markers defined the window, "iterations" when the trace has
      none but its calls repeat (`iterations`: the call range whose repeats are the steps,
      timeline/iterations.py), else "trace".
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
    - `communication`: each device's collectives, their time and exposed part, and each
      rank's wait inside them (analyses/distributed/overlap.py: overlap.Communication).
    - `slowest_rank`: the rank others wait for (the largest own time: `balance`; without
      steps, the rank that waits least).
    - `bandwidth`: memory-bound operators' achieved bandwidth, where shapes are recorded
      (analyses/gpu/bandwidth.py: bandwidth.Bandwidth).
    - `shapes`: the matrix products' shapes, dtypes and alignment
      (analyses/gpu/shapes.py: shapes.Shapes).
    - `gemm_units`: the GEMM kernels off the Tensor Cores
      (analyses/gpu/gemm_units.py: gemm_units.GemmUnits).
    - `early_starts`: GPU work starting before its launch
      (analyses/timeline/clock.py: clock.EarlyStarts).
    - `memory`: allocated memory's step peaks, their growth and each growing device's runway
      (analyses/gpu/memory.py: memory.Memory; empty without memory events).
    - `critical_path`: the critical path per sampled (rank, step) and the what-if scenarios
      (analyses/critical_path/critical_path.py: critical_path.CriticalPath).
    - `copies`: the memory copies per device and kind, with bytes, time and bandwidth
      (analyses/gpu/copies.py: copies.Copies).
    - `facts`: what the run context is read off (facts.RunFacts: names, kinds recorded).
    - `collective_split`: every rank's collectives matched across ranks, their time split
      into waiting for peers and transfer, exposed or not, with bytes and bus bandwidth
      (analyses/distributed/collectives.py).
    - `flops`: FLOPs per device and steady step, achieved TFLOP/s, MFU, and the roofline of
      the matrix and attention operators (analyses/gpu/flops.py).
    - `host_phases`: where the host's time goes, per steady host step and by the phase that
      launched the kernels (analyses/host/host_phases.py: host_phases.HostPhases; empty
      without CPU operators).
    - `attention`: attention computed by hand over n x T x S score tensors
      (analyses/gpu/attention.py: attention.Attention).
    - `fusion`: per device, the memory-bound kernels' traffic, the part a fusion removes and
      the roof, and the operator sequences of the chains whose fusion saves most
      (analyses/gpu/fusion.py: fusion.Fusion).
    - `startup`: one-time host calls inside the windows (initialisation, a first launch
      that loads a library) and, per device, their union and the GPU idle under it
      (analyses/timeline/startup.py: startup.Startup).
    - `periods`: per rank, the loop's period over the steady steps, host or GPU side, with
      the shortest and longest step (analyses/timeline/steady.py: steady.Periods).
    - `balance`: the ranks' own times per steady step, the slowest rank, why, and the price
      of the imbalance (analyses/distributed/imbalance.py).
    - The impact models: what fixing a finding saves per steady step (`impact_ns`) and the
      most it can save (`ceiling_ns`), with the figures they are computed from, read by the
      rules. `memory_impact_model`: what fusing the memory-bound kernels saves, on the
      device where it saves most (fusion.memory_impact); `sync_model`: per rank, the GPU
      idle of the host syncs (idle.sync_impact);
      `pageable_model`: per device and direction, what pinning its pageable copies saves
      (copies.pageable_impact); `managed_model`: per device, what prefetching its managed
      memory saves (copies.managed_impact); `copy_overlap_model`: per device held by direct
      copies, what overlapping them with its compute saves (copies.overlap_impact);
      `tensor_core_model`: per device, what moving
      its GEMMs onto the Tensor Cores saves (gemm_units.tensor_core_impact);
      `shape_model`: per device, what padding its misaligned matmul shapes saves
      (shapes.shape_impact);
      `overlap_model`: per device, what overlapping its exposed communication with compute
      saves (collectives.overlap_impact); `cast_model`: what cutting the copy and cast
      kernels saves (kernels.cast_impact); `cast_sources`: where they come from and what
      each named fix removes (analyses/gpu/casts.py: casts.CastSources); `host_wait_model`:
      per device, what feeding the GPU faster saves (host_bound.host_wait_impact);
      `launch_model`: per device, what launching fewer kernels saves
      (host_bound.launch_impact).
    - `startup_model`: per device, its window, its one-time work, the GPU idle under it and
      the calls that name it (startup.per_device).
    - `causes`: the pitfalls behind the walls, read off their signatures: the host-side
      causes' work in the steady steps and the idle it explains, their calls by name, the
      compiled graphs per step, the layout-transposing kernels (analyses/causes/:
      impact.Causes); `cause_model`: per cause and device, what removing it saves
      (impact.cause_impact).
    - `launch_shapes`: the kernels' launch shapes against their devices' limits (blocks per
      SM, occupancy, waves, SM fill) and the launches that leave most SMs idle
      (analyses/counters/launch_shapes.py: launch_shapes.LaunchShapes); `underfill_model`:
      per device, what filling the GPU with them saves (launch_shapes.underfill_impact).
    - `ncu`: Nsight Compute's kernels matched to the trace's (`--ncu`): per export the
      kernels matched and the kernel time they cover, per kernel name the measured DRAM
      bytes, registers, occupancy and pipe shares, per device the Tensor Core pipe's
      measured share (analyses/counters/ncu_join.py, ncu_results.py: NcuJoin; empty frames
      without `--ncu`).
    - `gpu_metrics`: Nsight's sampled GPU metrics (SMs Active, Tensor Active, DRAM, clock,
      ...) per device over the steady window and per steady step, over the samples inside
      the memory-bound and GEMM kernels, and in bins for the figure
      (analyses/counters/gpu_metrics.py: gpu_metrics.GpuMetrics; empty without metrics);
      `clock_model`: per device with GPU metrics, what its clock held below the maximum
      while busy costs (gpu_metrics.clock_impact).
    """

    basis: str
    steps: Steps
    devices: Devices
    kernels: Kernels
    idle: Idle
    critical_path: CriticalPath
    memory: Memory
    communication: Communication
    copies: Copies
    slowest_rank: int | None
    bandwidth: Bandwidth
    shapes: Shapes
    gemm_units: GemmUnits
    early_starts: EarlyStarts
    facts: RunFacts
    collective_split: CollectiveSplit
    flops: Flops
    host_phases: HostPhases
    attention: Attention
    balance: RankBalance
    fusion: Fusion
    startup: Startup
    periods: Periods
    memory_impact_model: MemoryImpact
    sync_model: tuple[SyncImpact, ...]
    pageable_model: tuple[PageableImpact, ...]
    managed_model: tuple[ManagedImpact, ...]
    tensor_core_model: tuple[TensorCoreImpact, ...]
    shape_model: tuple[ShapeImpact, ...]
    overlap_model: tuple[OverlapImpact, ...]
    cast_model: CastImpact
    cast_sources: CastSources
    host_wait_model: tuple[HostWaitImpact, ...]
    launch_model: tuple[LaunchImpact, ...]
    startup_model: tuple[DeviceStartup, ...]
    causes: Causes
    cause_model: tuple[CauseImpact, ...]
    launch_shapes: LaunchShapes
    underfill_model: tuple[UnderfillImpact, ...]
    ncu: NcuJoin
    gpu_metrics: GpuMetrics
    clock_model: tuple[ClockImpact, ...]
    iterations: str | None = None
    copy_overlap_model: tuple[CopyOverlapImpact, ...] = ()
