"""The causes' typed result (`Causes`, Metrics.causes) and what removing each saves
(`CauseImpact`, Metrics.cause_model): the job stage's half of the causes room.

**Host-side causes** (allocator calls, compilation, anomaly checks): removing the work saves
the GPU idle it explains (host_work's module docstring), per steady step, and at most the
device's idle that is not start-up (no fix that feeds the GPU saves more than it waited).
Anomaly mode also costs the forward a traceback per autograd node, inside the operators
(anomaly.forward_capture): the nodes per step times one capture's cost is added.

**Activation recomputation** and **zero-filled gradients**: no checkpointing removes the
recomputed forward's host work and its kernels, and `zero_grad(set_to_none=True)` the
fills'. Its host side is priced as a host cause's (the idle under it); its GPU side as the
layout's kernels are (their time, scaled by the share of kernel time that bounds the step,
in `unrecorded_ns`); the larger of the two is the price (a host-bound step gains the host
side, a GPU-bound one the kernels), at most their host and kernel time together.

**Layout conversions**: channels_last removes the transposing kernels (cuDNN then runs the
same NHWC convolution kernels without them) and runs batch normalisation on its channels-
last kernels, `NHWC_NORM_RATIO` of the time of its NCHW ones: the GPU time removed is the
transposes' time plus `1 - NHWC_NORM_RATIO` of the NCHW normalisations'. On the recording
the ratio was measured on, the model gives 11.6 ms per step of GPU time removed against 13.0
ms measured between the two layouts' traces. That time is saved where the GPU's work is what
bounds the step: the critical path's `gpu_compute_2x` what-if (every kernel twice as fast)
saves half of the kernel time on the path, so `2 * saving / kernel time per step` is the
share of kernel time that bounds the step, and the fix saves that share of the GPU time it
removes. Without a critical path, all of it. At most the GPU time removed per step (under a
profiler that slows the host, a step the profiler makes host-bound prices low: the evidence
keeps the GPU time removed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.causes.anomaly import ANOMALY_SCHEMA
from traceanalyzer.analyses.causes.compilation import REGIONS_SCHEMA
from traceanalyzer.analyses.causes.host_work import HOST_SCHEMA, NAMES_SCHEMA, ZERO_FILL_SCHEMA
from traceanalyzer.analyses.causes.layout import LAYOUT_SCHEMA
from traceanalyzer.analyses.causes.recompute import RECOMPUTE_SCHEMA
from traceanalyzer.analyses.causes.step_kinds import KINDS_SCHEMA, SLOW_WORK_SCHEMA
from traceanalyzer.analyses.critical_path.critical_path import bounding_share
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.startup import DeviceStartup
from traceanalyzer.analyses.timeline.windows import StepCounts

#: The what-if whose saving says how much of the kernels' time bounds the step.
GPU_SCENARIO = "gpu_compute_2x"
#: Batch normalisation's channels-last kernels' time over its NCHW kernels' time for the same
#: work: 6.36 against 14.78 ms per step on an H200 (a ResNet-50-like network under bf16
#: autocast, tests/data/gpu/README.md: conv_nchw_bf16 and conv_channels_last_bf16).
NHWC_NORM_RATIO = 0.43


@dataclass(frozen=True, slots=True)
class Causes:
    """The causes' frames, every rank's (see the room's modules for their columns).

    - `host`: per (rank, device, cause), the host-side causes' work inside the steady steps
      and the GPU idle it explains (host_work.host_causes);
    - `names`: each host-side cause's calls by name (and backward function);
    - `anomaly`: per rank whose backward ran anomaly mode's check, the autograd nodes per
      step and the cost of the traceback the forward records for each (anomaly.forward_capture);
    - `regions`: per rank, the compiled graphs run in the steady steps, the recompiled ones
      and the frames (compilation.compiled_regions);
    - `layout`: per device, the layout-transposing kernels of convolutions
      (layout.layout_kernels);
    - `step_kinds`: per rank whose steady steps come in a fast and a slow kind, the pattern
      (periodic, a trend, outliers), the time of each kind and the slow kind's extra time;
      `slow_work`: what the slow steps run that the fast ones do not
      (step_kinds.step_kinds);
    - `recompute`: per device, the forward operators recomputed inside the backward and
      the kernels they launched (recompute.recomputed_kernels);
    - `zero_fill`: per device, the kernels zero_grad's fills launched
      (host_work.zero_fill_kernels).
    """

    host: pl.DataFrame
    names: pl.DataFrame
    anomaly: pl.DataFrame
    regions: pl.DataFrame
    layout: pl.DataFrame
    step_kinds: pl.DataFrame
    slow_work: pl.DataFrame
    recompute: pl.DataFrame
    zero_fill: pl.DataFrame

    SCHEMAS: ClassVar[Schemas] = {
        "host": HOST_SCHEMA,
        "names": NAMES_SCHEMA,
        "anomaly": ANOMALY_SCHEMA,
        "regions": REGIONS_SCHEMA,
        "layout": LAYOUT_SCHEMA,
        "step_kinds": KINDS_SCHEMA,
        "slow_work": SLOW_WORK_SCHEMA,
        "recompute": RECOMPUTE_SCHEMA,
        "zero_fill": ZERO_FILL_SCHEMA,
    }

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.causes", self.SCHEMAS)

    def names_of(self, rank: int, cause: str, limit: int = 5) -> list[dict[str, Any]]:
        """The cause's calls on `rank` by name (name, parent, count, total_ns), most time
        first, at most `limit`."""
        rows = self.names.filter((pl.col("rank") == rank) & (pl.col("cause") == cause))
        return rows.head(limit).select("name", "parent", "count", "total_ns").to_dicts()

    def syncing_calls(self, rank: int, cause: str) -> int:
        """The host-side cause's calls on `rank` that synchronise (its device rows agree)."""
        rows = self.host.filter((pl.col("rank") == rank) & (pl.col("cause") == cause))
        return int(rows["syncing_calls"].max() or 0) if rows.height else 0  # type: ignore[arg-type]

    def slow_work_of(self, rank: int) -> list[dict[str, Any]]:
        """What the slow steps of `rank` run that the fast ones do not (name, extra_calls,
        extra_ns), most extra time first."""
        rows = self.slow_work.filter(pl.col("rank") == rank)
        return rows.select("name", "extra_calls", "extra_ns").to_dicts()

    def regions_of(self, rank: int) -> dict[str, Any] | None:
        """The rank's compiled regions row, or None where no compiled graph ran."""
        rows = self.regions.filter(pl.col("rank") == rank).to_dicts()
        return rows[0] if rows else None


@dataclass(frozen=True, slots=True)
class CauseImpact:
    """What removing one cause saves on one device, per steady step.

    - `cause`: `compilation`, `allocator`, `anomaly_checks` or `layout`;
    - `steps`, `steps_with`: the rank's steady steps and those holding the cause's work;
    - `calls_per_step`: its calls (host causes) or kernels (layout) per steady step;
    - `work_ns`: its host time (host causes: the union of its calls) or the GPU time it
      removes (layout: the transposes and the NCHW normalisations' excess) per steady step;
    - `explained_ns`: the GPU idle it explains per step (host causes; layout: the kernels'
      time that bounds the step);
    - `unrecorded_ns`: host work per step the fix removes that the trace does not record as
      the cause's own (anomaly mode's traceback for every autograd node, inside the forward
      operators), counted in the impact; 0 for the others;
    - `impact_ns`: what removing it saves per step; `ceiling_ns`: the most it can (host
      causes: the device's idle that is not start-up; layout: the kernels' time), per step.
    """

    cause: str
    rank: int
    device: int
    steps: int
    steps_with: int
    calls_per_step: float
    work_ns: int
    explained_ns: int
    unrecorded_ns: int
    impact_ns: int | None
    ceiling_ns: int | None

    @property
    def every_step_share(self) -> float:
        """The share of steady steps that hold the cause's work."""
        return self.steps_with / self.steps if self.steps else 0.0


def cause_impact(
    causes: Causes,
    devices: pl.DataFrame,
    startup: Sequence[DeviceStartup],
    savings: Mapping[tuple[int, str], int],
    counts: StepCounts,
) -> tuple[CauseImpact, ...]:
    """Each cause's CauseImpact on each device where it was found: host causes in the order
    of `causes.host`, then layout conversions. `devices`: Metrics.devices.summary;
    `startup`: startup.per_device; `savings`: critical_path.mean_savings; `counts`: the
    steps each device's window holds."""
    once = {(d.rank, d.device): d.idle_ns for d in startup}
    captures = {r["rank"]: r for r in causes.anomaly.iter_rows(named=True)}
    redone = {(r["rank"], r["device"]): r for r in causes.recompute.iter_rows(named=True)}
    fills = {(r["rank"], r["device"]): r for r in causes.zero_fill.iter_rows(named=True)}
    regions = {r["rank"]: r for r in causes.regions.iter_rows(named=True)}
    idle = {(d["rank"], d["device"]): d["idle_ns"] for d in devices.iter_rows(named=True)}
    kernel = {(d["rank"], d["device"]): d["kernel_ns"] or 0 for d in devices.iter_rows(named=True)}
    out = []
    backward = {
        (r["rank"], r["device"]): r
        for r in causes.host.iter_rows(named=True)
        if r["cause"] == "compiled_backward"
    }
    for r in causes.host.iter_rows(named=True):  # a few rows: causes x devices
        if r["cause"] == "compiled_backward":
            continue  # the compiled recompute's host side, below
        rank, device = r["rank"], r["device"]
        per = counts.on(rank, device)
        if not per:
            continue
        ceiling = max(0, idle.get((rank, device), 0) - once.get((rank, device), 0)) // per
        explained = r["idle_ns"] // per
        unrecorded = 0
        if r["cause"] == "anomaly_checks" and (c := captures.get(rank)) and r["steps"]:
            unrecorded = c["nodes"] * c["capture_ns"] // r["steps"]
        if r["cause"] == "graph_breaks":
            # the regions' glue the breaks add: all but the top-level runs' share
            g = regions.get(rank) or {}
            share = (g.get("runs", 0) - g.get("top_runs", 0)) / g["runs"] if g.get("runs") else 0
            explained = round(explained * share)
        if r["cause"] in ("recompute", "zero_grad_fill"):
            # their kernels are saved too where the GPU's work bounds the step: the larger of
            # the host side (the idle under it) and the GPU side is what it costs
            launched = redone if r["cause"] == "recompute" else fills
            gpu = (launched.get((rank, device)) or {}).get("kernel_ns", 0) // per
            bound = bounding_share(
                savings.get((rank, GPU_SCENARIO)), kernel.get((rank, device), 0) // per
            )
            gpu_part = round(gpu * bound)
            out.append(
                CauseImpact(
                    cause=str(r["cause"]),
                    rank=rank,
                    device=device,
                    steps=r["steps"],
                    steps_with=r["steps_with"],
                    calls_per_step=r["calls"] / r["steps"] if r["steps"] else 0.0,
                    work_ns=r["host_ns"] // per,
                    explained_ns=explained,
                    unrecorded_ns=gpu_part,
                    impact_ns=min(max(explained, gpu_part), r["host_ns"] // per + gpu),
                    # the most removing it can save: its host time and its kernels' time
                    ceiling_ns=r["host_ns"] // per + gpu,
                )
            )
            continue
        out.append(
            CauseImpact(
                cause=str(r["cause"]),
                rank=rank,
                device=device,
                steps=r["steps"],
                steps_with=r["steps_with"],
                calls_per_step=r["calls"] / r["steps"] if r["steps"] else 0.0,
                work_ns=r["host_ns"] // per,
                explained_ns=explained,
                unrecorded_ns=unrecorded,
                impact_ns=min(explained + unrecorded, ceiling),
                ceiling_ns=ceiling,
            )
        )
    hosted = {(m.rank, m.device) for m in out if m.cause == "recompute"}
    for r in causes.recompute.iter_rows(named=True):
        # a compiled backward's recompute (recompute.compiled_recompute): no host operator
        # of its own, its kernels' time only
        rank, device = r["rank"], r["device"]
        per = counts.on(rank, device)
        if not per or (rank, device) in hosted:
            continue
        gpu = (r["kernel_ns"] or 0) // per
        bound = bounding_share(
            savings.get((rank, GPU_SCENARIO)), kernel.get((rank, device), 0) // per
        )
        gpu_part = round(gpu * bound)
        # its host side: the recomputed share of the compiled backward's work and idle
        b = backward.get((rank, device)) or {}
        ratio = r["flops_ratio"] or 2.0
        redo = max(0.0, (ratio - 2) / ratio)
        work = round((b.get("host_ns") or 0) * redo) // per
        explained = round((b.get("idle_ns") or 0) * redo) // per
        out.append(
            CauseImpact(
                cause="recompute",
                rank=rank,
                device=device,
                steps=per,
                steps_with=b.get("steps_with") or per,
                calls_per_step=0.0,
                work_ns=work,
                explained_ns=explained,
                unrecorded_ns=gpu_part,
                impact_ns=min(max(explained, gpu_part), work + gpu),
                ceiling_ns=work + gpu,
            )
        )
    for r in causes.layout.iter_rows(named=True):
        rank, device = r["rank"], r["device"]
        per = counts.on(rank, device)
        if not per:
            continue
        own = round((r["transpose_ns"] + (1 - NHWC_NORM_RATIO) * r["nchw_norm_ns"]) / per)
        bound = bounding_share(
            savings.get((rank, GPU_SCENARIO)), kernel.get((rank, device), 0) // per
        )
        explained = round(own * bound)
        out.append(
            CauseImpact(
                cause="layout",
                rank=rank,
                device=device,
                steps=per,
                steps_with=per,
                calls_per_step=r["count"] / per,
                work_ns=own,
                explained_ns=explained,
                unrecorded_ns=0,
                impact_ns=min(explained, own),
                ceiling_ns=own,
            )
        )
    return tuple(out)
