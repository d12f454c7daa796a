"""The job stage of the analyses: the ranks' parts (`rank.analyze_rank`) merged into Metrics.

What each rank found of its own is concatenated in order of rank. What crosses ranks is
computed here from the small tables the parts hand on: the steps left out on every rank
(`settle`, which runs a rank again where its own evidence left out other steps), the
collectives matched across ranks (waits, imbalance, the slowest rank), the critical path of
each sampled step over every rank's graph inputs, the kernel histograms and totals merged
from each rank's, and the run context from the ranks' facts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from traceanalyzer.analyses import context
from traceanalyzer.analyses.causes import impact as causes_impact
from traceanalyzer.analyses.counters import gpu_metrics, launch_shapes, ncu_results
from traceanalyzer.analyses.critical_path import critical_path
from traceanalyzer.analyses.distributed import collectives, imbalance, overlap
from traceanalyzer.analyses.distributed.rank import Flagged, Options, RankPart
from traceanalyzer.analyses.gpu import (
    attention,
    bandwidth,
    casts,
    copies,
    devices,
    flops,
    fusion,
    gemm_units,
    idle,
    kernels,
    memory,
    shapes,
)
from traceanalyzer.analyses.host import host_bound, host_phases
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.analyses.timeline import clock, startup, steady, windows
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, step_counts
from traceanalyzer.timings import stage

Rerun = Callable[[list[int], Flagged, bool | None], list[RankPart]]


def settle(parts: list[RankPart], rerun: Rerun) -> tuple[list[RankPart], Flagged]:
    """Every rank's part in order of rank, with the steps left out and the windows' basis
    that the job decides.

    `parts`: each rank's, decided on its own evidence. The steps to leave out are decided on
    every rank's steps table (a step left out on one rank is left out on all:
    `steady.flag`); then the windows of every rank come from steps when any rank has steps
    on a device, else from the whole trace. `rerun(indexes, flagged, job_steps)` runs the
    rank stage again for the parts at `indexes` whose own decision differs (rare: warm-up
    is the same steps everywhere, and a job's ranks all mark steps or none does), and returns
    their new parts in the same order.
    """
    parts = list(parts)
    order = sorted(range(len(parts)), key=lambda i: parts[i].rank)
    flagged = steady.flag([parts[i].table for i in order])

    def again(indexes: list[int], job_steps: bool | None) -> None:
        for i, part in zip(indexes, rerun(indexes, flagged, job_steps), strict=True):
            parts[i] = part

    again([i for i, p in enumerate(parts) if _left_out(p, flagged) != p.excluded], None)
    job_steps = any(p.has_steps for p in parts)
    again([i for i, p in enumerate(parts) if p.by_steps != job_steps], job_steps)
    return [parts[i] for i in order], flagged


def _left_out(part: RankPart, flagged: Flagged) -> frozenset[int]:
    return frozenset(steady.excluded_rows(part.table.per_step, flagged)["step"].to_list())


def combine(parts: list[RankPart], flagged: Flagged, opts: Options) -> Metrics:
    """Metrics of the job from its ranks' parts (in order of rank; see `settle`)."""
    with stage("analyze: job: critical path"):
        paths = _paths(parts)
    with stage("analyze: job: merge"):
        return _merge(parts, flagged, opts, paths)


def _paths(parts: list[RankPart]) -> critical_path.CriticalPaths:
    solved = [p.paths for p in parts if p.paths is not None]
    if solved:
        return solved[0]  # one part that is the whole job: solved in the rank stage
    return critical_path.solve_job([p.graph for p in parts if p.graph is not None])


def _concat(parts: list[RankPart], name: str) -> pl.DataFrame:
    frames = [p.frames[name] for p in parts]
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed")


def _histogram(parts: list[RankPart], name: str, lo: str, hi: str) -> pl.DataFrame:
    """A histogram of every rank's from each rank's: the ranks' bin edges are the start of
    one series, so the longest list of bins is the job's, and the other columns add up."""
    frames = [p.frames[name] for p in parts]
    if len(frames) == 1:
        return frames[0]
    longest = max(frames, key=lambda f: f.height)
    sums = [c for c in longest.columns if c not in (lo, hi)]
    summed = pl.concat(frames).group_by(lo, hi).agg(pl.col(sums).sum())
    return (
        longest.select(lo, hi)
        .join(summed, on=[lo, hi], how="left")
        .with_columns(pl.col(sums).fill_null(0))
        .sort(lo)
    )


def _merge(
    parts: list[RankPart], flagged: Flagged, opts: Options, paths: critical_path.CriticalPaths
) -> Metrics:
    key = DEVICE_KEY
    wins = _concat(parts, "windows")
    gaps = _concat(parts, "gaps")
    comm_kernels = _concat(parts, "comm")
    rank_waits = overlap.rank_imbalance(comm_kernels.lazy()).collect()
    has_comm = any(p.has_comm for p in parts)
    comm = _comm_spans(comm_kernels.lazy()) if has_comm else None
    bins = _concat(parts, "timeline_bins")
    if comm is not None:
        bins = idle.with_comm(bins, wins, comm)
    # each device's time waiting for other ranks inside collectives (the bins cover its window)
    waits = (
        bins.group_by(key).agg(pl.col("comm_wait_ns").sum())
        if comm is not None
        else wins.select(*key, comm_wait_ns=pl.lit(0, pl.Int64))
    )
    dev = (
        _concat(parts, "devices")
        .join(waits, on=key, how="left")
        .with_columns(pl.col("comm_wait_ns").fill_null(0))
    )
    count = sum(p.kernel_count for p in parts)
    total = sum(p.kernel_total_ns for p in parts)
    small_count = sum(p.small_count for p in parts)
    small_ns = sum(p.small_ns for p in parts)
    sync_calls = _concat(parts, "sync_calls")
    peaks = _concat(parts, "memory_peaks")
    per_step = pl.concat([p.table.per_step for p in parts])
    with stage("analyze: job: collectives and ranks"):
        split = collectives.split(comm_kernels, _concat(parts, "comm_compute"))
        steps = _concat(parts, "steps")
        balance = imbalance.balance(
            steps if steps.height else _window_as_step(dev),
            dev,
            split.per_step,
            _concat(parts, "host_blocked"),
        )
    # the slowest rank by its own time (imbalance.balance) where steps compare the ranks;
    # without steps, the rank that waits least inside collectives
    slowest = balance.slowest if steps.height else None
    if slowest is None and rank_waits.height > 1:
        slowest = int(rank_waits.sort("wait_ns", "rank")["rank"][0])
    by_steps = any(p.has_steps for p in parts)
    # no step markers, but calls that repeat on a rank: its iterations are the steps
    iterated = next((p.iterations for p in parts if p.iterations and p.has_steps), None)
    counts = step_counts(steps, by_steps)
    copied = _concat(parts, "copies")
    savings = critical_path.mean_savings(paths.what_if)
    matmuls = _longest_first(
        parts, "matmul_shapes", ["rank", "device", "op_name", "m", "n", "k", "dtype"], True
    )
    infos = [d for p in parts for d in p.meta.devices]
    per_device_comm = _concat(parts, "collectives")
    grown = memory.growth(peaks)
    mem_model, mem_patterns = _concat(parts, "memory_model"), _concat(parts, "fusion_patterns")
    once, once_idle = _concat(parts, "startup"), _concat(parts, "startup_idle")
    top_kernels = kernels.top_of(_concat(parts, "kernel_names"), opts.top_n)
    kernel_classes = kernels.classes_of(_concat(parts, "kernel_classes"))
    sync_sites = idle.sync_sites_summary(sync_calls, _concat(parts, "steps_per_rank"))
    cast_model = kernels.cast_impact(kernel_classes, top_kernels, paths.steps, counts)
    phases = host_phases.HostPhases(
        steps=_concat(parts, "host_phases"), kernels=_concat(parts, "kernel_phases")
    )
    facts = context.RunFacts.merge([p.facts for p in parts])
    graphs = context.replays_graphs(facts)
    once_model = startup.per_device(dev, once, once_idle)
    counters = gpu_metrics.GpuMetrics(
        **{k: _concat(parts, f"gpu_metrics.{k}") for k in gpu_metrics.GpuMetrics.SCHEMAS}
    )
    found = causes_impact.Causes(
        host=_concat(parts, "host_causes"),
        names=_concat(parts, "cause_names"),
        anomaly=_concat(parts, "anomaly"),
        regions=_concat(parts, "compiled_regions"),
        layout=_concat(parts, "layout"),
        step_kinds=_concat(parts, "step_kinds"),
        slow_work=_concat(parts, "slow_work"),
        recompute=_concat(parts, "recompute"),
        zero_fill=_concat(parts, "zero_fill"),
    )
    shaped = launch_shapes.LaunchShapes(
        per_device=_concat(parts, "launch_devices"), kernels=_concat(parts, "launch_kernels")
    )
    return Metrics(
        basis=("iterations" if iterated else "steps") if by_steps else "trace",
        iterations=iterated,
        copy_overlap_model=copies.overlap_impact(copied, dev, counts),
        steps=windows.Steps(
            windows=wins,
            steady=steps,
            warmup=_concat(parts, "warmup_steps"),
            excluded=steady.excluded_rows(per_step, flagged),
            outside_window=_concat(parts, "outside_window"),
            counts=counts,
        ),
        devices=devices.Devices(summary=dev),
        kernels=kernels.Kernels(
            histogram=_histogram(parts, "kernel_histogram", "lo_ns", "hi_ns"),
            launch_size_histogram=_histogram(
                parts, "launch_size_histogram", "lo_threads", "hi_threads"
            ),
            top=top_kernels,
            classes=kernel_classes,
            names=_all_names(_concat(parts, "kernel_names")),
            count=count,
            total_ns=total,
            small_count_share=small_count / count if count else None,
            small_time_share=small_ns / total if total else None,
        ),
        idle=idle.Idle(
            gaps=gaps,
            gap_histogram=_histogram(parts, "gap_histogram", "lo_ns", "hi_ns"),
            sync_calls=sync_calls,
            sync_sites=sync_sites,
            syncs_per_step=idle.syncs_per_step(sync_calls),
            timeline_bins=bins,
            launch_gap_max_ns=opts.launch_gap_max_ns,
        ),
        communication=overlap.Communication(collectives=per_device_comm, rank_waits=rank_waits),
        collective_split=split,
        flops=_flops(parts, steps, wins, infos, dev.select(*key, "gemm_ns")),
        host_phases=phases,
        attention=attention.Attention(unfused=_concat(parts, "attention")),
        fusion=fusion.Fusion(model=mem_model, patterns=mem_patterns),
        startup=startup.Startup(calls=once, idle=once_idle),
        periods=steady.Periods(per_rank=steady.loop_periods(_concat(parts, "step_hosts"), steps)),
        balance=balance,
        copies=copies.Copies(summary=copied),
        slowest_rank=slowest,
        bandwidth=bandwidth.Bandwidth(
            operators=_longest_first(parts, "bandwidth", ["rank", "device", "op_name"])
        ),
        shapes=shapes.Shapes(matmuls=matmuls),
        gemm_units=gemm_units.GemmUnits(off_tensor_cores=_concat(parts, "non_tc_gemms")),
        early_starts=clock.EarlyStarts(summary=_concat(parts, "early_starts")),
        critical_path=critical_path.CriticalPath.of(paths),
        memory=memory.Memory(peaks=peaks, growth=grown, runway=memory.runway(grown, peaks, infos)),
        facts=facts,
        # the impact models: what each fix saves per steady step, and the most it can
        memory_impact_model=fusion.memory_impact(
            mem_model, mem_patterns, paths.steps, savings, counts
        ),
        sync_model=idle.sync_impact(gaps, dev, sync_sites, counts, opts.launch_gap_max_ns),
        pageable_model=copies.pageable_impact(
            copied, counts, {(d.rank, d.device): d.name for d in infos if d.name}
        ),
        managed_model=copies.managed_impact(
            copied, counts, {(d.rank, d.device): d.name for d in infos if d.name}
        ),
        tensor_core_model=gemm_units.tensor_core_impact(dev, paths.steps, savings, counts),
        shape_model=shapes.shape_impact(matmuls, dev, infos, counts),
        overlap_model=collectives.overlap_impact(dev, per_device_comm, split, savings, counts),
        cast_model=cast_model,
        cast_sources=casts.CastSources.of(
            _concat(parts, "cast_sources"),
            _concat(parts, "cast_passes"),
            cast_model,
            counts,
            _concat(parts, "ddp_copies"),
            casts.fp32_savings(
                _concat(parts, "fp32_traffic"), mem_model, paths.steps, savings, counts
            ),
        ),
        host_wait_model=host_bound.host_wait_impact(
            dev, once_model, phases.steps, savings, counts, graphs
        ),
        launch_model=host_bound.launch_impact(dev, phases.kernels, savings, counts, graphs),
        startup_model=once_model,
        causes=found,
        cause_model=causes_impact.cause_impact(found, dev, once_model, savings, counts),
        launch_shapes=shaped,
        underfill_model=launch_shapes.underfill_impact(shaped.per_device, savings, counts),
        ncu=_ncu(parts) if opts.ncu else ncu_results.NcuJoin.empty(),
        gpu_metrics=counters,
        clock_model=gpu_metrics.clock_impact(counters, dev, counts),
    )


def _flops(
    parts: list[RankPart],
    steps: pl.DataFrame,
    wins: pl.DataFrame,
    infos: list[Any],
    gemm: pl.DataFrame,
) -> flops.Flops:
    """The job's FLOPs: model FLOPs (each forward once: the recomputed forwards' taken out)
    with the hardware's beside them."""
    ops, redone = _concat(parts, "op_flops"), _concat(parts, "recompute_flops")
    hardware = flops.device_flops(ops, steps, wins, infos, gemm)
    if redone.height == 0:
        return flops.with_hardware(hardware, hardware)
    model = flops.device_flops(flops.less(ops, redone), steps, wins, infos, gemm)
    return flops.with_hardware(model, hardware)


def _ncu(parts: list[RankPart]) -> ncu_results.NcuJoin:
    """Nsight Compute's measurements, every rank's."""
    return ncu_results.NcuJoin.of(
        [(p.frames["ncu_files"], p.frames["ncu_kernels"], p.frames["ncu_devices"]) for p in parts]
    )


def _all_names(names: pl.DataFrame) -> pl.DataFrame:
    """Every kernel name's totals (top_of with no limit), the name as text."""
    every = kernels.top_of(names, max(names.height, 1))
    return every.with_columns(pl.col("name").cast(pl.String)).select(
        "name", "count", "total_ns", "share"
    )


def _window_as_step(dev: pl.DataFrame) -> pl.DataFrame:
    """Without step markers, each device's window is its one step (step 0)."""
    return dev.select(
        "rank",
        "device",
        step=pl.lit(0, pl.Int64),
        start_ns="start_ns",
        end_ns="end_ns",
        busy_ns="busy_ns",
        host_wait_ns="host_wait_ns",
        sync_ns="sync_ns",
    )


def _longest_first(
    parts: list[RankPart], name: str, then: list[str], nulls_last: bool = False
) -> pl.DataFrame:
    """Every rank's rows, by kernel time across the job (as each rank's are sorted)."""
    rows = _concat(parts, name)
    return rows.sort(
        ["kernel_ns", *then], descending=[True] + [False] * len(then), nulls_last=nulls_last
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
