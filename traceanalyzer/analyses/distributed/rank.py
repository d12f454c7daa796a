"""The rank stage of the analyses: everything one rank's events tell, reduced to what the job
stage (`job.combine`) merges with the other ranks'.

Each rank is analysed alone (`analyze_rank`): its steps, windows, kernels, idle gaps and the
analyses of the plan, all keyed by rank. What crosses ranks is handed on small: the steps'
table the steady state is decided on (a step left out on one rank is left out on every
rank), the communication kernels (matched across ranks for waits and imbalance), the
critical path's graph inputs of the sampled steps (the graphs of a step join every rank's
work through its collectives), mergeable kernel totals and the run facts. A job's ranks can
therefore be read and analysed in separate processes, or on a dask cluster, and only these
parts are held together (docs/architecture.md, "Per-rank reduction").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer.analyses import context
from traceanalyzer.analyses.causes import (
    anomaly,
    compilation,
    host_work,
    layout,
    recompute,
    step_kinds,
)
from traceanalyzer.analyses.counters import gpu_metrics, launch_shapes, ncu_join, ncu_results
from traceanalyzer.analyses.critical_path import critical_path
from traceanalyzer.analyses.critical_path.critical_graph import GraphInputs
from traceanalyzer.analyses.distributed import collectives, imbalance, overlap
from traceanalyzer.analyses.gpu import (
    attention,
    bandwidth,
    casts,
    classify,
    copies,
    devices,
    flops,
    fusion,
    gemm_units,
    idle,
    kernels,
    memory,
    shapes,
    tensor_cores,
)
from traceanalyzer.analyses.host import host_phases
from traceanalyzer.analyses.timeline import clock, iterations, startup, steady, windows
from traceanalyzer.errors import ConfigError
from traceanalyzer.model import DeviceInfo, Timeline, TraceMeta
from traceanalyzer.timings import stage

#: A step -> (reason, rank where first found, name): the steps left out on every rank.
Flagged = dict[int, tuple[str, int, str]]


@dataclass(frozen=True, slots=True)
class Options:
    """The analysis options every rank and the job stage share."""

    top_n: int = 10
    step_pattern: str | None = None
    launch_gap_max_ns: int = idle.LAUNCH_GAP_MAX_NS
    all_steps: bool = False
    #: every idle gap in Metrics.idle.gaps (annotate places them); False: the ones the report
    #: and rules read (idle.read_gaps), so that a rank's part stays small
    all_gaps: bool = True
    #: Nsight Compute's kernels, each export's processes paired with a (rank, device)
    #: (`ncu_join.assign`); empty without `--ncu`
    ncu: tuple[ncu_join.Assigned, ...] = field(default=(), compare=False, repr=False)


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
    by_steps: bool


#: The plan: the analyses of one rank that are independent polars plans over the shared
#: inputs, by name. They run together (one `pl.collect_all`, which shares their common
#: subplans); `_reduce` files their results.
PLAN: dict[str, Callable[[Windowed], pl.LazyFrame]] = {
    "devices": lambda w: devices.device_summary(w.work, w.wins.lazy(), w.kernels.lazy()),
    "steps": lambda w: devices.step_summary(w.work, w.steps.lazy(), w.kernels.lazy()),
    "idle_by_cause": lambda w: idle.idle_by_cause(w.gaps.lazy()),
    "idle_per_step": lambda w: idle.idle_per_step(w.gaps.lazy(), w.steps.lazy()),
    "between_steps": lambda w: idle.host_wait_between_steps(w.gaps.lazy(), w.steps.lazy()),
    "sync_calls": lambda w: idle.sync_sites(w.timeline, w.syncs, w.markers, w.gaps.lazy()),
    "overlap": lambda w: overlap.comm_overlap(w.kernels.lazy(), w.wins.lazy(), w.has_comm),
    "collectives": lambda w: overlap.per_collective(w.kernels.lazy(), w.has_comm),
    "tensor_cores": lambda w: tensor_cores.tensor_core_summary(w.kernels).lazy(),
    "copies": lambda w: copies.memcpy_summary(w.work, w.wins.lazy()),
    "outside_window": lambda w: windows.outside_window(w.linked.lazy(), w.wins.lazy()),
    "steps_per_rank": lambda w: w.markers.group_by("rank").agg(steps=pl.len().cast(pl.Int64)),
    "step_hosts": lambda w: steady.host_steps(w.markers),
}


def _run_plan(shared: Windowed) -> dict[str, pl.DataFrame]:
    """The plan's results by name. On polars' in-memory engine: at 10^6 kernels the
    streaming one took 1.3 s over the plan, this 0.8 s. (It joins each side of a join at
    once: no plan may pair rows by a key with many rows on both sides, as the sync sites
    once paired each sync call with every Python frame of its thread, 3 GB on a 200 MB
    trace with Python stacks: `idle.sync_sites` pairs them by time.)"""
    collected = pl.collect_all([make(shared) for make in PLAN.values()], engine="in-memory")
    return dict(zip(PLAN, collected, strict=True))


#: The communication kernels' columns the job stage matches across ranks.
COMM_COLUMNS = collectives.COMM_COLUMNS


@dataclass(frozen=True, slots=True)
class RankPart:
    """One rank's analyses, reduced (see the module docstring).

    `frames`: the rank's rows of Metrics frames that are the rank's own (windows, devices
    before the collective waits, steps, gaps, ...), the partial kernel histograms (`job`
    merges them), the kernel totals by name and class, the communication kernels (`comm`)
    and the timeline bins before the collective columns. `excluded`: the steps it left out
    (as the job stage decided, or on its own evidence); `table`: the steady state's table.
    `has_steps`: the rank has steps on a device; `by_steps`: its windows come from steps
    (the job's: any rank's `has_steps`).
    `graph`: the critical path's inputs, or `paths` where the rank is the whole job (solved
    in the rank stage, beside the other analyses).
    """

    rank: int
    meta: TraceMeta
    gpu_work: int
    found_steps: int
    table: steady.StepTable
    excluded: frozenset[int]
    frames: dict[str, pl.DataFrame]
    kernel_count: int
    kernel_total_ns: int
    small_count: int
    small_ns: int
    has_comm: bool
    has_steps: bool
    by_steps: bool
    facts: context.RunFacts
    graph: GraphInputs | None = None
    paths: critical_path.CriticalPaths | None = field(default=None, repr=False)
    #: Without step markers, the call range whose repeats are the steps (None: markers).
    iterations: str | None = None


def analyze_rank(
    timeline: Timeline,
    opts: Options,
    flagged: Flagged | None = None,
    solo: bool = False,
    job_steps: bool | None = None,
) -> RankPart:
    """Analyse the events of one rank (`timeline` holds one rank, or is the whole job when
    `solo`). `flagged`: the steps to leave out as the job stage decided them; `job_steps`:
    whether the job's windows come from steps (any rank has steps on a device) or from the
    whole trace. None: as this rank's own steps say (the job stage runs the rank again where
    that differs)."""
    with stage("analyze: steady steps"):
        markers, keys, state, table, found, iterated = _steady_steps(timeline, opts, flagged)
        syncs = idle.sync_calls(timeline).collect().lazy()
    with stage("analyze: linked work"):  # once: the critical path and the windows read it
        linked = windows.linked_work(timeline, markers, keys)
    path = _critical_path(timeline, markers, syncs, linked, solo)
    with stage("analyze: windows"):
        shared = _windowed(
            timeline, markers, linked, state, syncs, opts.launch_gap_max_ns, job_steps
        )
    with stage("analyze: plan"):
        results = _run_plan(shared)
    graph = None if solo else path.result().graph
    with stage("analyze: rank results"):
        part = _reduce(shared, results, table, found, graph, timeline, opts)
    if iterated:
        part = dataclasses.replace(part, iterations=iterated)
    if solo:
        part = dataclasses.replace(part, paths=path.result().paths)
    return part


#: From this many polars threads up, the critical path's tables are built on a thread beside
#: the windows (`_critical_path`). Both read the same inputs, and each of their polars plans
#: uses only part of the cores (on the 16-core host, 3.5 and 5 cores' worth). Side by side,
#: on the H100 host (3 rounds interleaved, cores pinned): 16 cores, the 741 MB stacks trace's
#: report 3.31-3.72 s against 3.51-4.23 s at the same peak; 8 cores, the 1M-kernel Nsight
#: benchmark 7.1-8.4 s against 8.3-9.0 s; 4 cores, that benchmark 8.8-9.7 s against
#: 9.4-10.5 s (the 741 MB report unchanged on 8 and 4 cores). On 2 cores they contend: that
#: benchmark's tables and windows took 4.7-5.8 s against 2.4 s one after the other.
TABLES_BESIDE_FROM = 4


@dataclass(frozen=True, slots=True)
class _Path:
    """What the critical path's thread hands back: a rank's graph inputs (for the job stage
    to solve with the other ranks'), or the paths of a rank that is the whole job."""

    graph: GraphInputs | None
    paths: critical_path.CriticalPaths | None


def _critical_path(
    timeline: Timeline,
    markers: pl.LazyFrame,
    syncs: pl.LazyFrame,
    linked: pl.DataFrame,
    solo: bool,
) -> Future[_Path]:
    """The graph inputs of the rank's sampled steps, and for a rank that is the whole job
    (`solo`) their paths, on their way: on a thread (with `TABLES_BESIDE_FROM` polars threads
    or more), else the tables now and the solve on a thread (its compiled loops hold one
    core, beside the other analyses' polars plans)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="critical-path")
    try:
        if pl.thread_pool_size() >= TABLES_BESIDE_FROM:
            return pool.submit(_solved, _tables, timeline, markers, syncs, linked, solo)
        tables = _tables(timeline, markers, syncs, linked, solo)
        if solo:  # built now, while few other large frames are held
            return pool.submit(_solved, lambda: tables)
        assert not isinstance(tables, critical_path.Prepared)
        done: Future[_Path] = Future()
        done.set_result(_Path(tables, None))
        return done
    finally:
        pool.shutdown(wait=False)


def _tables(
    timeline: Timeline,
    markers: pl.LazyFrame,
    syncs: pl.LazyFrame,
    linked: pl.DataFrame,
    solo: bool,
) -> GraphInputs | critical_path.Prepared | None:
    """The graph inputs of the rank's sampled steps, prepared to solve where `solo`."""
    with stage("analyze: critical path, tables"):
        graph = critical_path.inputs(
            timeline,
            markers.collect(),
            syncs.collect(),
            work=linked.select(*windows.CRITICAL_PATH_COLUMNS, *windows.LINK_COLUMNS),
        )
        return critical_path.prepared([graph] if graph else []) if solo else graph


def _solved(
    tables: Callable[..., GraphInputs | critical_path.Prepared | None], *args: Any
) -> _Path:
    """`tables(*args)`, solved where they are prepared to be (a rank that is the job)."""
    got = tables(*args)
    if not isinstance(got, critical_path.Prepared):
        return _Path(got, None)
    with stage("analyze: critical path, solve (thread)"):
        return _Path(None, got.solve())


def _steady_steps(
    timeline: Timeline, opts: Options, flagged: Flagged | None
) -> tuple[
    pl.LazyFrame, pl.DataFrame | None, steady.SteadyState, steady.StepTable, int, str | None
]:
    """The step markers, the GPU work's launch keys, the steady state (warm-up and outlier
    steps left out of both), the steady state's table, the number of markers found and,
    where the trace has no step markers and its calls repeat, the name of the call range
    whose repeats are its iterations (`iterations.repeated_calls`)."""
    pattern = opts.step_pattern or windows.default_step_pattern(timeline.meta.format)
    check_pattern(pattern)
    found = windows.step_markers(timeline, pattern).collect()
    iterated = None
    if found.height == 0 and opts.step_pattern is None:
        # no step markers: the calls that repeat are the iterations, where some do
        found, iterated = iterations.repeated_calls(timeline, cycles=not opts.ncu)
    markers = found.lazy()
    keys = windows.launch_keys(timeline, markers)
    ops = _step_ops(timeline, markers, keys, opts.all_steps)
    table = steady.step_table(timeline, found, ops)
    if flagged is None:
        flagged = steady.flag([table])
    state = steady.settle(found, ops, table.tiles, steady.excluded_rows(table.per_step, flagged))
    if state.excluded.height:
        markers = state.markers.lazy()
        keys = _drop_steps(timeline, keys, state.excluded)
    return markers, keys, state, table, found.height, iterated


def _windowed(
    timeline: Timeline,
    markers: pl.LazyFrame,
    linked: pl.DataFrame,
    state: steady.SteadyState,
    syncs: pl.LazyFrame,
    launch_gap_max_ns: int,
    job_steps: bool | None,
) -> Windowed:
    """The shared inputs of the plan (see `Windowed`). `linked`: the GPU work with its
    launches and steps (windows.linked_work, computed once per rank); `job_steps`: see
    `analyze_rank`."""
    work = linked.lazy().drop(windows.LAUNCH_EXTRA)
    with stage("analyze: windows: steps"):
        steps = windows.device_steps(work, markers).collect()
        by_steps = steps.height > 0 if job_steps is None else job_steps
        wins = windows.device_windows(work, steps.lazy(), markers, by_steps).collect()
    with stage("analyze: windows: kernels"):
        in_windows = _classified(timeline, devices.kernels_in_windows(work, wins.lazy()))
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
        by_steps=by_steps,
    )


def _reduce(
    w: Windowed,
    r: dict[str, pl.DataFrame],
    table: steady.StepTable,
    found: int,
    graph: GraphInputs | None,
    timeline: Timeline,
    opts: Options,
) -> RankPart:
    """File the plan's results and the analyses that need no plan (small frames, or reads of
    the timeline of their own) into the rank's part. Nsight Compute's kernels, where given,
    are matched first: the bandwidth table and the roofline read their DRAM bytes."""
    key = windows.DEVICE_KEY
    causes = [f"{c}_ns" for c in idle.CAUSES]
    dev = (
        r["devices"]
        .join(r["idle_by_cause"], on=key, how="left")
        .join(r["between_steps"], on=key, how="left")
        .join(r["overlap"], on=key, how="left")
        # its kernel_ns is the devices' own (all kernel time): joined once
        .join(r["tensor_cores"].drop("kernel_ns"), on=key, how="left")
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
    in_windows = w.kernels
    gpus = timeline.meta.devices

    def phases() -> tuple[pl.DataFrame, pl.DataFrame]:
        segs = host_phases.segments(timeline, w.markers).collect().lazy()  # kernels by phase
        return host_phases.host_phases(timeline, w.markers, segs), host_phases.kernel_phases(
            segs, w.linked
        )

    def one_time() -> tuple[pl.DataFrame, pl.DataFrame]:
        # one pass of the program (one step, or no markers): every call is a first call
        passes = w.markers.select(pl.len()).collect().item()
        calls = startup.one_time_calls(timeline, w.wins, w.gaps, single_pass=passes <= 1)
        return calls, startup.idle_per_device(calls, w.gaps)

    comm = in_windows.filter(pl.col("is_comm"))
    ncu = _ncu(in_windows, opts.ncu, gpus, w.linked)
    measured = ncu.measured_bytes() if opts.ncu else None
    all_gaps = opts.all_gaps
    done = concurrently(
        {
            "small": lambda: kernels.small_totals(in_windows),
            "gaps": lambda: w.gaps if all_gaps else idle.read_gaps(w.gaps),
            "gap_histogram": lambda: idle.gap_histogram(w.gaps),
            "kernel_histogram": lambda: kernels.duration_histogram(in_windows),
            "launch_size_histogram": lambda: kernels.launch_size_histogram(in_windows),
            "kernel_names": lambda: kernels.name_totals(in_windows),
            "kernel_classes": lambda: kernels.class_totals(in_windows),
            "comm": lambda: collectives.with_sm_share(comm, gpus).select(COMM_COLUMNS),
            "comm_compute": lambda: collectives.compute_near_comm(in_windows),
            "host_blocked": lambda: imbalance.host_blocked(w.linked, w.syncs, _host_ranges(w)),
            "phases": phases,
            "op_flops": lambda: flops.op_flops(timeline, in_windows, measured),
            "casts": lambda: _casts(timeline, in_windows),
            "fp32_traffic": lambda: casts.fp32_traffic(timeline, in_windows),
            "ddp_copies": lambda: casts.ddp_bucket_copies(timeline, w.linked, by_steps=w.by_steps),
            "attention": lambda: attention.unfused_attention(timeline, in_windows),
            "memory_model": lambda: fusion.memory_bound_model(timeline, in_windows, gpus),
            "startup": one_time,
            "timeline_bins": lambda: idle.timeline_bins(w.gaps, w.wins),
            "bandwidth": lambda: bandwidth.memory_bound_bandwidth(
                timeline, in_windows, gpus, measured
            ),
            "matmul_shapes": lambda: shapes.matmul_shapes(timeline, in_windows),
            "memory_peaks": lambda: memory.step_peaks(timeline, w.markers),
            "non_tc_gemms": lambda: gemm_units.non_tensor_core_gemms(in_windows),
            "early_starts": lambda: clock.early_starts(timeline, work=w.linked),
            "step_like": lambda: _step_like(timeline, found == 0),
            "facts": lambda: context.facts(timeline),
            "host_causes": lambda: _host_causes(timeline, w),
            "compiled_regions": lambda: compilation.compiled_regions(timeline, w.markers),
            "layout": lambda: layout.layout_kernels(in_windows),
            "launch_shapes": lambda: launch_shapes.launch_shapes(in_windows, gpus),
            "step_kinds": lambda: step_kinds.step_kinds(timeline, w.markers, step_rows),
            "recompute": lambda: _recompute(timeline, w, measured),
            "zero_fill": lambda: host_work.zero_fill_kernels(
                timeline, w.markers, w.linked, w.kernels
            ),
            "gpu_metrics": lambda: gpu_metrics.gpu_metric_frames(
                timeline.gpu_metrics, w.work, w.wins, w.steps, w.kernels, gpus
            ),
        }
    )
    small_count, small_ns = done["small"]
    frames = {
        "windows": w.wins,
        "devices": dev,
        "steps": step_rows,
        "gaps": done["gaps"],
        "gap_histogram": done["gap_histogram"],
        "sync_calls": r["sync_calls"],
        "steps_per_rank": r["steps_per_rank"],
        "step_hosts": r["step_hosts"],
        "collectives": r["collectives"],
        "copies": r["copies"],
        "outside_window": r["outside_window"],
        "kernel_histogram": done["kernel_histogram"],
        "launch_size_histogram": done["launch_size_histogram"],
        "kernel_names": done["kernel_names"],
        "kernel_classes": done["kernel_classes"],
        "comm": done["comm"],
        "comm_compute": done["comm_compute"],
        "host_blocked": done["host_blocked"],
        "host_phases": done["phases"][0],
        "kernel_phases": done["phases"][1],
        "op_flops": done["op_flops"],
        "cast_sources": done["casts"][0],
        "cast_passes": done["casts"][1],
        "fp32_traffic": done["fp32_traffic"],
        "ddp_copies": done["ddp_copies"],
        "attention": done["attention"],
        "memory_model": done["memory_model"][0],
        "fusion_patterns": done["memory_model"][1],
        "startup": done["startup"][0],
        "startup_idle": done["startup"][1],
        "timeline_bins": done["timeline_bins"],
        "bandwidth": done["bandwidth"],
        "matmul_shapes": done["matmul_shapes"],
        "memory_peaks": done["memory_peaks"],
        "non_tc_gemms": done["non_tc_gemms"],
        "early_starts": done["early_starts"],
        "warmup_steps": w.state.warmup_rows,
        "step_like": done["step_like"],
        "host_causes": done["host_causes"][0],
        "cause_names": done["host_causes"][1],
        "anomaly": done["host_causes"][2],
        "compiled_regions": done["compiled_regions"],
        "layout": done["layout"],
        "launch_devices": done["launch_shapes"][0],
        "launch_kernels": done["launch_shapes"][1],
        "step_kinds": done["step_kinds"][0],
        "slow_work": done["step_kinds"][1],
        "recompute": done["recompute"][0],
        "recompute_flops": done["recompute"][1],
        "zero_fill": done["zero_fill"],
        "ncu_files": ncu.files,
        "ncu_kernels": ncu_results.kernel_summary(ncu.kernels),
        "ncu_devices": ncu_results.device_summary(ncu.kernels, ncu.files),
        **{f"gpu_metrics.{k}": v for k, v in done["gpu_metrics"].items()},
    }
    ranks = timeline.events["rank"]
    return RankPart(
        rank=int(ranks[0]) if ranks.len() else 0,
        meta=timeline.meta,
        gpu_work=w.linked.height,
        found_steps=found,
        table=table,
        excluded=frozenset(w.state.excluded["step"].to_list()),
        frames=frames,
        kernel_count=in_windows.height,
        kernel_total_ns=int(in_windows["clipped_ns"].sum() or 0),
        small_count=small_count,
        small_ns=small_ns,
        has_comm=w.has_comm,
        has_steps=w.steps.height > 0,
        by_steps=w.by_steps,
        facts=done["facts"],
        graph=graph,
    )


def concurrently(tasks: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Each task's result by name, the tasks run on up to `ANALYSIS_THREADS` threads at once,
    no more than polars' own threads (1 in a rank's worker process, where the processes are
    the parallelism). Each is a polars plan or numpy work, which release the GIL: one after
    the other, the small plans of a rank's results left most cores idle. The tasks are
    independent reads of frozen frames: the results are those of running them in turn.

    The `HEAVY` tasks start first (the longest), the others in the order given, and no more
    than `HEAVY_AT_ONCE` heavy tasks run at once: a heavy task waits, and the next light one
    starts, until one ends. Each heavy task holds intermediate frames of a size of its own;
    four of them at once set the report's peak memory on a large trace."""
    workers = min(ANALYSIS_THREADS, pl.thread_pool_size(), len(tasks))
    if workers <= 1:
        return {name: _timed(name, task) for name, task in tasks.items()}
    waiting = sorted(tasks, key=lambda name: HEAVY.index(name) if name in HEAVY else len(HEAVY))
    running: dict[Future[Any], str] = {}
    done: dict[str, Any] = {}
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="analyses")
    try:
        while waiting or running:
            heavy = sum(name in HEAVY for name in running.values())
            startable = [n for n in waiting if n not in HEAVY or heavy < HEAVY_AT_ONCE]
            while startable and len(running) < workers:
                name = startable.pop(0)
                waiting.remove(name)
                running[pool.submit(_timed, name, tasks[name])] = name
                if name in HEAVY:
                    heavy += 1
                    if heavy >= HEAVY_AT_ONCE:
                        startable = [n for n in startable if n not in HEAVY]
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                done[running.pop(future)] = future.result()
        return {name: done[name] for name in tasks}
    finally:  # on an error or Ctrl-C, the tasks not started yet are not run
        pool.shutdown(wait=True, cancel_futures=True)


def _timed(name: str, task: Callable[[], Any]) -> Any:
    with stage(f"analyze: rank results: {name}"):
        return task()


#: The most analyses of one rank run at once (each holds its own intermediate frames, and
#: each plan spreads over polars' threads too). On the 16-core host, 741 MB trace: 4 at once
#: held the report's peak at 1342-1400 MB against 1411-1475 MB with 8, in the same time
#: (3.58-3.60 s against 3.50-3.91 s).
ANALYSIS_THREADS = 4

#: The rank results whose intermediate frames are largest (run alone on the 741 MB trace,
#: each raised the resident memory by: phases 217 MB, fp32_traffic 107, casts 88,
#: memory_model 72; every other under 65: startup, 158 MB once, holds 42 MB since it ranks
#: only the names with a long call), longest first, and how many of them run at once.
#: Startup among the light ones, on the H100 host (16 cores, 3 rounds interleaved): the
#: 741 MB stacks trace's rank results took 0.41-0.44 s against 0.44-0.52 s, its peak
#: 1043-1084 MB against 1052-1065 MB.
HEAVY = ("phases", "casts", "memory_model", "fp32_traffic")
HEAVY_AT_ONCE = 2


def _host_causes(
    timeline: Timeline, w: Windowed
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The host-side causes per device, their calls by name, and anomaly mode's forward
    cost on the ranks whose backward ran its checks."""
    host, names = host_work.host_causes(timeline, w.markers, w.wins, w.gaps, w.launch_gap_max_ns)
    checked = host.filter(pl.col("cause") == "anomaly_checks")["rank"].unique().to_list()
    return host, names, anomaly.forward_capture(timeline, w.markers, checked)


def _recompute(
    timeline: Timeline, w: Windowed, measured: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The recomputed forward per device, and its FLOPs (op_flops of its kernels alone);
    where no forward operator runs in the backward, the recompute a compiled backward's GEMM
    FLOPs show (recompute.compiled_recompute). `measured`: Nsight Compute's DRAM bytes per
    kernel, as the whole rank's op_flops read them."""

    def op_flops(tl: Timeline, kernels: pl.DataFrame) -> pl.DataFrame:
        return flops.op_flops(tl, kernels, measured)

    summary, kernels_of = recompute.recomputed_kernels(timeline, w.markers, w.linked, w.kernels)
    if summary.height == 0:
        return recompute.compiled_recompute(timeline, w.markers, w.linked, w.kernels, op_flops)
    return summary, op_flops(timeline, kernels_of)


def _ncu(
    kernels: pl.DataFrame,
    assigned: tuple[ncu_join.Assigned, ...],
    gpus: tuple[DeviceInfo, ...],
    linked: pl.DataFrame,
) -> ncu_join.Matched:
    """The kernels inside the windows matched with the ncu kernels paired with this rank's
    devices (none without `--ncu`); `linked` gives each kernel's launching thread."""
    ranks = set(kernels["rank"].unique().to_list())
    mine = [a for a in assigned if a.rank in ranks]
    if not mine:
        return ncu_join.match(kernels.clear(), [], gpus)
    threads = linked.select("rank", "device", "correlation", "launch_tid")
    return ncu_join.match(kernels, mine, gpus, threads)


def _casts(timeline: Timeline, in_windows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The copy/cast kernels by source, and the weight-casting passes per step."""
    classified = casts.classified_casts(timeline, in_windows).collect().lazy()
    return casts.cast_sources(classified), casts.cast_passes(classified)


def _host_ranges(w: Windowed) -> pl.LazyFrame:
    """The host steps (rank, step, start_ns, end_ns); without step markers, the rank's whole
    time as step 0."""
    markers = w.markers.select("rank", "step", "start_ns", "end_ns").collect()
    if markers.height:
        return markers.lazy()
    ranks = w.timeline.events.lazy().group_by("rank")
    return ranks.agg(
        step=pl.lit(0, pl.Int64), start_ns=pl.col("start_ns").min(), end_ns=pl.col("end_ns").max()
    )


def _step_like(timeline: Timeline, wanted: bool) -> pl.DataFrame:
    """name, len: host ranges named like steps (for the error of a --step-pattern that
    matches none on any rank); none where `wanted` is False."""
    found = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(["annotation", "cpu_op"]))
        .select(pl.col("name").cast(pl.String))
        .filter(pl.col("name").str.contains("(?i)step|iter|batch"))
        .group_by("name")
        .len()
    )
    return (found if wanted else found.clear()).collect()


def _step_ops(
    timeline: Timeline, markers: pl.LazyFrame, keys: pl.DataFrame | None, all_steps: bool
) -> pl.DataFrame:
    """The GPU work launched inside steps (rank, device, kind, start_ns, end_ns, step) the
    steady state reads; none with `all_steps` (every step kept)."""
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
    return ops.clear() if all_steps else ops


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


def _classified(timeline: Timeline, kernels_in: pl.LazyFrame) -> pl.DataFrame:
    """Kernels in the windows with kernel_class, is_comm, collective_kind and the Tensor
    Core verdict (name rules run once per distinct name)."""
    verdicts = tensor_cores.add_verdicts(kernels_in.drop("launch_ns"), timeline).with_columns(
        is_comm=pl.col("kernel_class") == "comm"
    )
    return classify.with_comm_collective(verdicts.collect(), pl.col("is_comm"), "collective_kind")


def check_pattern(pattern: str) -> None:
    """A ConfigError for a step pattern that is not a valid regular expression."""
    try:
        pl.select(pl.lit("x").str.contains(pattern)).item()
    except pl.exceptions.ComputeError as exc:
        raise ConfigError(
            f"--step-pattern is not a valid regular expression: {pattern!r}",
            hint="use Rust regex syntax, e.g. '^step_\\d+$'",
        ) from exc
