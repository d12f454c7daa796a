"""Analyses: pure functions from a Timeline to Metrics (no rendering, no file access)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses import (
    bandwidth,
    classify,
    clock,
    copies,
    critical_path,
    devices,
    gemm_units,
    idle,
    kernels,
    memory,
    overlap,
    shapes,
    steady,
    tensor_cores,
    windows,
)
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.errors import ConfigError, NoGpuEventsError
from traceanalyzer.model import Timeline
from traceanalyzer.timings import stage

DEFAULT_TOP_KERNELS = 10


@dataclass(frozen=True, slots=True)
class Windowed:
    """What every analysis of the plan reads, computed once: the steady steps' markers, the
    host syncs, the GPU work linked to its launches and steps, each device's steps and
    window, the kernels inside the windows (classified), and the idle gaps."""

    timeline: Timeline
    markers: pl.LazyFrame
    state: steady.SteadyState
    syncs: pl.LazyFrame
    linked: pl.DataFrame
    work: pl.LazyFrame
    steps: pl.DataFrame
    wins: pl.DataFrame
    kernels: pl.DataFrame
    gaps: pl.DataFrame
    has_comm: bool
    launch_gap_max_ns: int


#: The plan: the analyses that are independent polars plans over the shared inputs, by name.
#: They run together (one `pl.collect_all`, which shares their common subplans); `_assemble`
#: joins and files their results into `Metrics`.
PLAN: dict[str, Callable[[Windowed], pl.LazyFrame]] = {
    "devices": lambda w: devices.device_summary(w.work, w.wins.lazy(), w.kernels.lazy()),
    "steps": lambda w: devices.step_summary(w.work, w.steps.lazy(), w.kernels.lazy()),
    "idle_by_cause": lambda w: idle.idle_by_cause(w.gaps.lazy()),
    "idle_per_step": lambda w: idle.idle_per_step(w.gaps.lazy(), w.steps.lazy()),
    "between_steps": lambda w: idle.host_wait_between_steps(w.gaps.lazy(), w.steps.lazy()),
    "sync_calls": lambda w: idle.sync_sites(w.timeline, w.syncs, w.markers, w.gaps.lazy()),
    "overlap": lambda w: overlap.comm_overlap(w.kernels.lazy(), w.wins.lazy(), w.has_comm),
    "collectives": lambda w: overlap.per_collective(w.kernels.lazy(), w.has_comm),
    "rank_waits": lambda w: overlap.rank_imbalance(w.kernels.lazy()),
    "tensor_cores": lambda w: tensor_cores.tensor_core_summary(w.kernels).lazy(),
    "copies": lambda w: copies.memcpy_summary(w.work, w.wins.lazy()),
    "outside_window": lambda w: windows.outside_window(w.linked.lazy(), w.wins.lazy()),
    "steps_per_rank": lambda w: w.markers.group_by("rank").agg(steps=pl.len().cast(pl.Int64)),
}


def analyze(
    timeline: Timeline,
    top_n: int = DEFAULT_TOP_KERNELS,
    step_pattern: str | None = None,
    launch_gap_max_ns: int = idle.LAUNCH_GAP_MAX_NS,
    all_steps: bool = False,
) -> Metrics:
    """Compute every analysis for every (rank, device) of the timeline.

    `step_pattern` is a regular expression for the host ranges that mark steps (default:
    `ProfilerStep#N` for Chrome traces, common NVTX step names for Nsight exports).
    Warm-up and outlier steps are left out of the window (see `steady`) unless `all_steps`.

    The execution policy lives here, and only here (docs/architecture.md, "Where work runs
    in parallel"): the critical path's tables are built first, while few other large frames
    are held (they need the most memory of all); its paths (compiled loops, one core, see
    longest_path) are then solved on a thread beside the other analyses, whose polars plans
    (`PLAN`, collected together) leave the other core partly idle. The thread reads only the
    tables built for it.
    """
    if timeline.gpu_work().select(pl.len()).collect().item() == 0:
        raise no_gpu_events(timeline)
    with stage("analyze: steady steps"):
        markers, keys, state = _steady_steps(timeline, step_pattern, all_steps)
        syncs = idle.sync_calls(timeline).collect().lazy()
    with stage("analyze: critical path, tables"):
        prepared = critical_path.prepare(
            timeline,
            markers.collect(),
            syncs.collect(),
            work=_linked_work(timeline, markers, keys),
        )
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="critical-path")
    solving = pool.submit(_timed_solve, prepared)
    pool.shutdown(wait=False)
    del prepared
    with stage("analyze: windows"):
        shared = _windowed(timeline, markers, keys, state, syncs, launch_gap_max_ns)
    with stage("analyze: plan"):
        collected = pl.collect_all([make(shared) for make in PLAN.values()])
    results = dict(zip(PLAN, collected, strict=True))
    paths = solving.result()
    with stage("analyze: assemble"):
        return _assemble(shared, results, paths, top_n)


def _linked_work(
    timeline: Timeline, markers: pl.LazyFrame, keys: pl.DataFrame | None
) -> pl.DataFrame:
    with stage("analyze: critical path, tables: linked work"):
        return windows.linked_work(timeline, markers, keys, windows.CRITICAL_PATH_COLUMNS)


def _timed_solve(prepared: critical_path.Prepared) -> critical_path.CriticalPaths:
    with stage("analyze: critical path, solve (thread)"):
        return prepared.solve()


def _steady_steps(
    timeline: Timeline, step_pattern: str | None, all_steps: bool
) -> tuple[pl.LazyFrame, pl.DataFrame | None, steady.SteadyState]:
    """The step markers, the GPU work's launch keys, and the steady state (warm-up and
    outlier steps left out of both)."""
    pattern = step_pattern or windows.default_step_pattern(timeline.meta.format)
    _check_pattern(pattern)
    found = windows.step_markers(timeline, pattern).collect()
    if step_pattern and found.height == 0:
        raise _no_match(timeline, step_pattern)
    markers = found.lazy()
    keys = windows.launch_keys(timeline, markers)
    state = _steady_state(timeline, markers, keys, all_steps)
    if state.excluded.height:
        markers = state.markers.lazy()
        keys = _drop_steps(timeline, keys, state.excluded)
    return markers, keys, state


def _windowed(
    timeline: Timeline,
    markers: pl.LazyFrame,
    keys: pl.DataFrame | None,
    state: steady.SteadyState,
    syncs: pl.LazyFrame,
    launch_gap_max_ns: int,
) -> Windowed:
    """The shared inputs of the plan (see `Windowed`)."""
    with stage("analyze: windows: linked work"):
        linked = windows.linked_work(timeline, markers, keys)
    work = linked.lazy().drop(windows.LAUNCH_EXTRA)
    with stage("analyze: windows: steps"):
        steps = windows.device_steps(work, markers).collect()
        wins = windows.device_windows(work, steps.lazy(), markers, steps.height > 0).collect()
    with stage("analyze: windows: kernels"):
        in_windows = _classified(timeline, devices.kernels_in_windows(work, wins.lazy())).collect()
    # in-memory: the streaming engine takes much longer over the window joins and join_asofs
    with stage("analyze: windows: idle gaps"):
        gaps = idle.idle_gaps(timeline, work, wins.lazy(), syncs, launch_gap_max_ns).collect(
            engine="in-memory"
        )
    return Windowed(
        timeline=timeline,
        markers=markers,
        state=state,
        syncs=syncs,
        linked=linked,
        work=work,
        steps=steps,
        wins=wins,
        kernels=in_windows,
        gaps=gaps,
        has_comm=bool(in_windows["is_comm"].any()),
        launch_gap_max_ns=launch_gap_max_ns,
    )


def _assemble(
    w: Windowed, r: dict[str, pl.DataFrame], paths: critical_path.CriticalPaths, top_n: int
) -> Metrics:
    """File the plan's results, the critical path and the analyses that need no plan (small
    frames, or reads of the timeline of their own) into Metrics."""
    key = windows.DEVICE_KEY
    causes = [f"{c}_ns" for c in idle.CAUSES]
    dev = (
        r["devices"]
        .join(r["idle_by_cause"], on=key, how="left")
        .join(r["between_steps"], on=key, how="left")
        .join(r["overlap"], on=key, how="left")
        .join(r["tensor_cores"], on=key, how="left")
        .with_columns(pl.col(causes).fill_null(0))
        .with_columns(pl.col("gap_count", "host_wait_between_steps_ns").fill_null(0))
        .with_columns(
            devices.share(pl.col(f"{c}_ns"), pl.col("window_ns")).alias(f"{c}_share")
            for c in idle.CAUSES
        )
    )
    step_rows = (
        r["steps"]
        .join(r["idle_per_step"], on=[*key, "step"], how="left")
        .with_columns(pl.col(causes).fill_null(0))
    )
    in_windows, timeline, imbalance = w.kernels, w.timeline, r["rank_waits"]
    comm = _comm_spans(in_windows.lazy()) if w.has_comm else None
    bins = idle.timeline_bins(w.gaps, w.wins, comm=comm)
    # each device's time waiting for other ranks inside collectives (the bins cover its window)
    waits = (
        bins.group_by(key).agg(pl.col("comm_wait_ns").sum())
        if comm is not None
        else w.wins.select(*key, comm_wait_ns=pl.lit(0, pl.Int64))
    )
    dev = dev.join(waits, on=key, how="left").with_columns(pl.col("comm_wait_ns").fill_null(0))
    small = kernels.small_kernels(in_windows)
    peaks = memory.step_peaks(timeline, w.markers)
    slowest = int(imbalance.sort("wait_ns", "rank")["rank"][0]) if imbalance.height > 1 else None
    return Metrics(
        basis="steps" if w.steps.height > 0 else "trace",
        windows=w.wins,
        devices=dev,
        steps=step_rows,
        kernel_histogram=kernels.duration_histogram(in_windows),
        launch_size_histogram=kernels.launch_size_histogram(in_windows),
        top_kernels=kernels.top_kernels(in_windows, top_n),
        kernel_classes=kernels.class_breakdown(in_windows),
        kernel_count=in_windows.height,
        kernel_total_ns=int(in_windows["clipped_ns"].sum() or 0),
        small_kernel_count_share=small["count_share"],
        small_kernel_time_share=small["time_share"],
        gaps=w.gaps,
        gap_histogram=idle.gap_histogram(w.gaps),
        sync_calls=r["sync_calls"],
        collectives=r["collectives"],
        rank_waits=imbalance,
        copies=r["copies"],
        launch_gap_max_ns=w.launch_gap_max_ns,
        sync_sites=idle.sync_sites_summary(r["sync_calls"], r["steps_per_rank"]),
        syncs_per_step=idle.syncs_per_step(r["sync_calls"]),
        slowest_rank=slowest,
        bandwidth=bandwidth.memory_bound_bandwidth(timeline, in_windows, timeline.meta.devices),
        matmul_shapes=shapes.matmul_shapes(timeline, in_windows),
        memory_peaks=peaks,
        non_tc_gemms=gemm_units.non_tensor_core_gemms(in_windows),
        early_starts=clock.early_starts(timeline, work=w.linked),
        timeline_bins=bins,
        memory_growth=memory.growth(peaks),
        critical_steps=paths.steps,
        what_if=paths.what_if,
        excluded_steps=w.state.excluded,
        warmup_steps=w.state.warmup_rows,
        outside_window=r["outside_window"],
    )


def _comm_spans(kernels: pl.LazyFrame) -> pl.DataFrame:
    """Communication kernels (rank, device, start_ns, end_ns, wait_ns), clipped to the
    windows; wait_ns where they match across ranks (else 0)."""
    waits = overlap.matched_collectives(kernels).select(
        "rank", "device", "start_ns", "end_ns", "wait_ns"
    )
    return (
        kernels.filter(pl.col("is_comm"))
        .select("rank", "device", "start_ns", "end_ns")
        .join(waits, on=["rank", "device", "start_ns", "end_ns"], how="left")
        .with_columns(pl.col("wait_ns").fill_null(0))
        .unique(maintain_order=True)
        .collect()
    )


def _steady_state(
    timeline: Timeline, markers: pl.LazyFrame, keys: pl.DataFrame | None, all_steps: bool
) -> steady.SteadyState:
    """The steady steps (every step with `all_steps`)."""
    found = markers.collect()
    cols = ("rank", "device", "kind", "start_ns", "end_ns")
    if keys is None:
        ops = windows.linked_work(timeline, markers, None, cols).select(*cols, "step")
    else:
        stepped = keys.filter(pl.col("step").is_not_null())
        ev = timeline.events
        ops = pl.DataFrame(
            {c: ev[c].gather(stepped["_row"]) for c in cols} | {"step": stepped["step"]}
        )
    ops = ops.with_columns(pl.col("kind").cast(pl.String))
    if all_steps:
        ops = ops.clear()
    return steady.find(timeline, found, ops)


def _drop_steps(
    timeline: Timeline, keys: pl.DataFrame | None, excluded: pl.DataFrame
) -> pl.DataFrame | None:
    """The launch keys with the excluded steps' work unlinked (step null): it lies outside
    the window, like work launched before the first step."""
    if keys is None:
        return None  # linked_work recomputes the steps from the steady markers
    rank = timeline.events["rank"].gather(keys["_row"])
    out = (
        keys.with_columns(_rank=rank)
        .join(
            excluded.select(_rank="rank", step="step", _out=pl.lit(True)),
            on=["_rank", "step"],
            how="left",
            maintain_order="left",
        )
        .with_columns(step=pl.when(pl.col("_out").is_null()).then(pl.col("step")))
        .drop("_rank", "_out")
    )
    return out


def _classified(timeline: Timeline, kernels_in: pl.LazyFrame) -> pl.LazyFrame:
    """Kernels in the windows with kernel_class, is_comm, collective_kind and the Tensor
    Core verdict (name rules run once per distinct name)."""
    verdicts = tensor_cores.add_verdicts(kernels_in.drop("launch_ns"), timeline).with_columns(
        is_comm=pl.col("kernel_class") == "comm"
    )
    return classify.with_comm_collective(verdicts, pl.col("is_comm"), "collective_kind")


def _no_match(timeline: Timeline, pattern: str) -> ConfigError:
    """The error for a --step-pattern that matches no host range, with names that might."""
    names = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(["annotation", "cpu_op"]))
        .select(pl.col("name").cast(pl.String))
        .filter(pl.col("name").str.contains("(?i)step|iter|batch"))
        .group_by("name")
        .len()
        .sort(["len", "name"], descending=[True, False])
        .head(4)
        .collect()
        .get_column("name")
        .to_list()
    )
    hint = (
        "host ranges that look like steps: " + ", ".join(repr(n) for n in names)
        if names
        else "the trace has no host range named like a step; leave --step-pattern out to "
        "analyse the whole trace"
    )
    return ConfigError(
        f"--step-pattern {pattern!r} matches no host range in the trace",
        path=timeline.meta.path,
        hint=hint,
    )


def _check_pattern(pattern: str) -> None:
    try:
        pl.select(pl.lit("x").str.contains(pattern)).item()
    except pl.exceptions.ComputeError as exc:
        raise ConfigError(
            f"--step-pattern is not a valid regular expression: {pattern!r}",
            hint="use Rust regex syntax, e.g. '^step_\\d+$'",
        ) from exc


def no_gpu_events(timeline: Timeline) -> NoGpuEventsError:
    """The error for a trace without kernels, memcpys or memsets, naming what it does hold."""
    other = sorted(
        (k.removeprefix("category "), n)
        for k, n in timeline.meta.quality.dropped.items()
        if k.startswith("category ")
    )
    held = timeline.events.group_by("kind").len().sort(["len", "kind"], descending=[True, False])
    kinds = ", ".join(f"{n} {k}" for k, n in held.iter_rows())
    if other:
        cats = ", ".join(f"{n} {c}" for c, n in other)
        problem = (
            "no GPU events (kernels, memcpy, memset); the trace holds "
            f"{kinds or 'no host events'} and events of categories the tool does not read: {cats}"
        )
        hint = "a CUPTI range-profiler or non-CUDA accelerator trace has no GPU timeline to analyse"
    elif dropped := _dropped_device_events(timeline):
        problem = f"no GPU events left to analyse: {dropped}"
        hint = "the trace does not follow the Chrome trace format: ts and dur must be numbers (µs)"
    elif launches := _launch_count(timeline):
        problem = (
            f"the GPU activity records are missing: the host launched {launches} kernels "
            "or copies (CUDA/HIP runtime calls are in the trace) but no kernel, memcpy or "
            "memset was recorded"
        )
        hint = (
            "the profiler lost its GPU buffers (CUPTI/roctracer): profile fewer active steps, "
            "or make sure the profiler is stopped cleanly before the trace is exported"
        )
    else:
        problem = (
            "no GPU events (kernels, memcpy, memset): this is a CPU-only trace "
            f"({kinds or 'empty'})"
        )
        hint = "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
    return NoGpuEventsError(problem, path=timeline.meta.path, hint=hint)


def _dropped_device_events(timeline: Timeline) -> str:
    """The events dropped for bad values (text, out-of-range, missing), as `N reason, ...`."""
    drops = {
        k: n for k, n in timeline.meta.quality.dropped.items() if not k.startswith("category ")
    }
    return ", ".join(f"{n} events dropped ({k})" for k, n in sorted(drops.items()))


#: Runtime calls that put work on a GPU stream (CUDA and HIP).
_LAUNCH_CALL = (
    r"^(?:cuda|hip)(?:LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel"
    r"|ExtModuleLaunchKernel|GraphLaunch|MemcpyAsync|Memcpy|MemsetAsync|Memset)|^cuLaunchKernel"
)


def _launch_count(timeline: Timeline) -> int:
    """How many runtime/driver calls in the trace launch GPU work."""
    return int(
        timeline.events.lazy()
        .filter(
            pl.col("kind").is_in(["runtime", "driver"])
            & pl.col("name").cast(pl.String).str.contains(_LAUNCH_CALL)
        )
        .select(pl.len())
        .collect()
        .item()
    )


__all__ = ["PLAN", "Metrics", "Windowed", "analyze"]
