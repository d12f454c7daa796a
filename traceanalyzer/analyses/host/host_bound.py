"""The GPU bound by its host: waiting for the host (TA001's impact model, `host_wait_impact`)
or for its launches (TA003's, `launch_impact`).

Both read the devices' idle by cause (Metrics.devices), the critical path's mean saving per
step with host time closed (`host_gaps_closed`: critical_path.mean_savings) and the steps
each window holds (windows.StepCounts). Which waits are whose: on a device whose kernels are
too short to keep it fed one launch at a time (`launch_bound`), the waits for the host
inside steps are the launches' own cost (TA003's), and only the waits between steps are
TA001's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from traceanalyzer.analyses.host.host_phases import host_phase_medians, optimizer_tiny_share
from traceanalyzer.analyses.timeline.startup import DeviceStartup
from traceanalyzer.analyses.timeline.windows import StepCounts

#: A device whose kernels average less than this runs them faster than a launch costs the
#: host (5-10 µs; an eager operator 10-50 µs: field notes), over at least TINY_KERNEL_COUNT
#: kernels (nsys-ai flags an average under 10 µs over 100 launches).
TINY_KERNEL_MEAN_NS = 10_000
TINY_KERNEL_COUNT = 100
#: ... and its waits for the host inside steps are the operators' own host cost where they
#: average at most this per kernel (an eager operator's 10-50 µs, up to twice that with the
#: profiler's overhead); more, and the host did other work between its launches.
HOST_WAIT_PER_KERNEL_MAX_NS = 100_000
#: The what-if both models scale: the critical path with host time costing nothing.
SCENARIO = "host_gaps_closed"


def host_wait_inside_steps(device: Mapping[str, Any]) -> int:
    """A device's host-wait idle inside steps (all of it without steps); `device`: a row of
    Metrics.devices.summary."""
    return int(device["host_wait_ns"] - device["host_wait_between_steps_ns"])


def launch_bound(device: Mapping[str, Any], graphs: bool) -> bool:
    """Whether a device's kernels are too short to keep it fed one launch at a time, and its
    waits for the host inside steps no longer than issuing each operator takes (`device`: a
    row of Metrics.devices.summary). Those waits are then the per-operator host cost of each
    launch, whatever the length of each: launch overhead (TA003), not the host doing other
    work (TA001); waits between steps stay TA001's. Not where the run replays CUDA graphs
    (`graphs`: context.replays_graphs): a replayed kernel costs no launch, and the waits
    between replays are the host's own work."""
    count = device["kernel_count"]
    return bool(
        not graphs
        and count >= TINY_KERNEL_COUNT
        and device["kernel_ns"] < TINY_KERNEL_MEAN_NS * count
        and host_wait_inside_steps(device) <= HOST_WAIT_PER_KERNEL_MAX_NS * count
    )


def _capped(saving: int | None, per_step: int | None) -> int | None:
    """The critical path's saving, but no more than the idle per step (either alone where
    the other is unknown)."""
    if saving is None or per_step is None:
        return saving if per_step is None else per_step
    return min(saving, per_step)


@dataclass(frozen=True, slots=True)
class HostWaitImpact:
    """What feeding one device faster saves (TA001's impact model, `host_wait_impact`).

    - `window_ns`, `idle_ns`, `idle_share`, `longest_gap_ns`: the device's (Metrics.devices);
    - `launch_bound`: its waits inside steps are its launches' cost (`launch_bound`): only
      the waits between steps are counted;
    - `startup_idle_ns`: the counted wait under one-time host work (startup.DeviceStartup),
      left out: start-up is not the loop's;
    - `host_wait_ns`: the host-wait idle counted, start-up left out; `host_wait_share`: its
      share of the window (None for an empty window); `between_steps_ns`, `inside_steps_ns`:
      the part that ends at a step's first GPU operation, and the rest;
    - `phases`: the rank's host time per steady step by phase (host_phases medians; None
      without CPU operators);
    - `impact_ns`: the critical path's `host_gaps_closed` saving, capped by `host_wait_ns`
      per step of the device: a fix that feeds the GPU cannot save more than it waited;
    - `ceiling_ns`: the device's idle that is not start-up, per step: feeding the GPU saves
      at most its idle.
    """

    rank: int
    device: int
    window_ns: int
    idle_ns: int
    idle_share: float | None
    longest_gap_ns: int
    launch_bound: bool
    startup_idle_ns: int
    host_wait_ns: int
    host_wait_share: float | None
    between_steps_ns: int
    inside_steps_ns: int
    phases: dict[str, int] | None
    impact_ns: int | None
    ceiling_ns: int | None


def host_wait_impact(
    devices: pl.DataFrame,
    startup: Sequence[DeviceStartup],
    phases: pl.DataFrame,
    savings: Mapping[tuple[int, str], int],
    counts: StepCounts,
    graphs: bool,
) -> tuple[HostWaitImpact, ...]:
    """Each device's HostWaitImpact, in the order of `devices` (Metrics.devices.summary).
    `startup`: startup.per_device; `phases`: Metrics.host_phases.steps; `savings`:
    critical_path.mean_savings; `counts`: the steps each window holds; `graphs`: the run
    replays CUDA graphs."""
    once = {(d.rank, d.device): d.idle_ns for d in startup}
    out = []
    for d in devices.iter_rows(named=True):
        rank, device, window = d["rank"], d["device"], d["window_ns"]
        bound = launch_bound(d, graphs)
        between = d["host_wait_between_steps_ns"]
        wait = between if bound else d["host_wait_ns"]
        startup_idle = once.get((rank, device), 0)
        left_out = min(wait, startup_idle)
        wait -= left_out
        between = min(between, wait)
        out.append(
            HostWaitImpact(
                rank=rank,
                device=device,
                window_ns=window,
                idle_ns=d["idle_ns"],
                idle_share=d["idle_share"],
                longest_gap_ns=d["longest_gap_ns"],
                launch_bound=bound,
                startup_idle_ns=left_out,
                host_wait_ns=wait,
                host_wait_share=wait / window if window else None,
                between_steps_ns=between,
                inside_steps_ns=wait - between,
                phases=host_phase_medians(phases, rank),
                impact_ns=_capped(
                    savings.get((rank, SCENARIO)), counts.per_step(wait, rank, device)
                ),
                ceiling_ns=counts.per_step(max(0, d["idle_ns"] - startup_idle), rank, device),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class LaunchImpact:
    """What launching fewer kernels saves on one device (TA003's impact model,
    `launch_impact`).

    - `window_ns`, `idle_ns`, `kernel_count`, `gap_count`: the device's (Metrics.devices);
      `mean_kernel_ns`: its kernels' mean time in the window (0 without kernels);
    - `short_gap_ns`: its idle in short launch gaps (`launch_overhead` gaps);
      `inside_steps_ns`: where it is `launch_bound`, its waits for the host inside steps
      (launches too), else 0; `launch_overhead_ns`: the two together, and
      `launch_overhead_share` their share of the window (None for an empty window);
    - `optimizer_share`: the share of the rank's tiny kernels launched inside
      optimizer.step (host_phases.optimizer_tiny_share; None without CPU operators);
    - `impact_ns`: the critical path's `host_gaps_closed` saving, capped by
      `launch_overhead_ns` per step of the device; `optimizer_impact_ns`: its
      `optimizer_share` (what a fused optimizer removes; None without that share);
    - `ceiling_ns`: the device's idle per step: fewer launches save at most its idle.
    """

    rank: int
    device: int
    window_ns: int
    idle_ns: int
    kernel_count: int
    gap_count: int
    mean_kernel_ns: int
    short_gap_ns: int
    inside_steps_ns: int
    launch_overhead_ns: int
    launch_overhead_share: float | None
    optimizer_share: float | None
    impact_ns: int | None
    optimizer_impact_ns: int | None
    ceiling_ns: int | None


def launch_impact(
    devices: pl.DataFrame,
    kernel_phases: pl.DataFrame,
    savings: Mapping[tuple[int, str], int],
    counts: StepCounts,
    graphs: bool,
) -> tuple[LaunchImpact, ...]:
    """Each device's LaunchImpact, in the order of `devices` (Metrics.devices.summary).
    `kernel_phases`: Metrics.host_phases.kernels; the rest as `host_wait_impact`'s."""
    out = []
    for d in devices.iter_rows(named=True):
        rank, device, window, count = d["rank"], d["device"], d["window_ns"], d["kernel_count"]
        inside = host_wait_inside_steps(d) if launch_bound(d, graphs) else 0
        launch = d["launch_overhead_ns"] + inside
        impact = _capped(savings.get((rank, SCENARIO)), counts.per_step(launch, rank, device))
        origin = optimizer_tiny_share(kernel_phases, rank)
        out.append(
            LaunchImpact(
                rank=rank,
                device=device,
                window_ns=window,
                idle_ns=d["idle_ns"],
                kernel_count=count,
                gap_count=d["gap_count"],
                mean_kernel_ns=d["kernel_ns"] // count if count else 0,
                short_gap_ns=d["launch_overhead_ns"],
                inside_steps_ns=inside,
                launch_overhead_ns=launch,
                launch_overhead_share=launch / window if window else None,
                optimizer_share=origin,
                impact_ns=impact,
                optimizer_impact_ns=(
                    None if impact is None or origin is None else round(impact * origin)
                ),
                ceiling_ns=counts.per_step(d["idle_ns"], rank, device),
            )
        )
    return tuple(out)
