"""Analyses: pure functions from a Timeline to Metrics (no rendering, no file access)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from traceanalyzer.analyses.counters import ncu_join
from traceanalyzer.analyses.distributed import job
from traceanalyzer.analyses.distributed.rank import Flagged, Options, RankPart, analyze_rank
from traceanalyzer.analyses.gpu import idle
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.analyses.timeline import steady
from traceanalyzer.errors import ConfigError, NoGpuEventsError
from traceanalyzer.model import Timeline
from traceanalyzer.model.ncu import NcuExport

DEFAULT_TOP_KERNELS = 10


def analyze(
    timeline: Timeline,
    top_n: int = DEFAULT_TOP_KERNELS,
    step_pattern: str | None = None,
    launch_gap_max_ns: int = idle.LAUNCH_GAP_MAX_NS,
    all_steps: bool = False,
    ncu: Sequence[NcuExport] = (),
) -> Metrics:
    """Compute every analysis for every (rank, device) of the timeline.

    `step_pattern` is a regular expression for the host ranges that mark steps (default:
    `ProfilerStep#N` for Chrome traces, common NVTX step names for Nsight exports).
    Warm-up and outlier steps are left out of the window (see `steady`) unless `all_steps`.

    Each rank is analysed alone (`rank.analyze_rank`), and the job stage merges the ranks'
    parts (`job`): the same pipeline as a folder whose ranks are read and analysed in
    separate processes (`traceanalyzer.ranks`). The execution policy of one rank lives in
    `analyze_rank` (docs/architecture.md, "Where work runs in parallel").

    `ncu`: Nsight Compute exports of the same program: each is paired with the devices it
    matches (`ncu_join.assign`, which refuses one that barely overlaps the trace), and its
    measurements reach the bandwidth table, the roofline and Metrics.ncu.
    """
    if timeline.gpu_work().select(pl.len()).collect().item() == 0:
        raise no_gpu_events(timeline)
    assigned = ncu_join.assign(timeline, ncu) if ncu else ()
    opts = Options(top_n, step_pattern, launch_gap_max_ns, all_steps, ncu=assigned)
    ranks = timeline.events["rank"].unique().sort().to_list()
    if len(ranks) == 1:
        part = analyze_rank(timeline, opts, solo=True)
        return finish([part], steady.flag([part.table]), opts, timeline.meta.path)

    def rank_part(i: int, flagged: Flagged | None, job_steps: bool | None) -> RankPart:
        return analyze_rank(_rank_of(timeline, ranks[i]), opts, flagged, job_steps=job_steps)

    parts, flagged = job.settle(
        [rank_part(i, None, None) for i in range(len(ranks))],
        lambda again, flagged, job_steps: [rank_part(i, flagged, job_steps) for i in again],
    )
    return finish(parts, flagged, opts, timeline.meta.path)


def finish(parts: list[RankPart], flagged: Flagged, opts: Options, path: str) -> Metrics:
    """The job's Metrics from its ranks' parts; a ConfigError naming `path` (the trace or
    folder) where a `--step-pattern` matched no step on any rank."""
    if opts.step_pattern and not any(p.found_steps for p in parts):
        raise _no_match(parts, opts.step_pattern, path)
    return job.combine(parts, flagged, opts)


def _rank_of(timeline: Timeline, rank: int) -> Timeline:
    """The events of one rank of a job's timeline."""
    return Timeline(
        events=timeline.events.filter(pl.col("rank") == rank),
        meta=timeline.meta,
        gpu_metrics=timeline.gpu_metrics.filter(pl.col("rank") == rank),
    )


def _no_match(parts: list[RankPart], pattern: str, path: str) -> ConfigError:
    """The error for a --step-pattern that matches no host range, with names that might."""
    names = (
        pl.concat([p.frames["step_like"] for p in parts])
        .group_by("name")
        .agg(pl.col("len").sum())
        .sort(["len", "name"], descending=[True, False])
        .head(4)
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
        path=path,
        hint=hint,
    )


def no_gpu_events(timeline: Timeline) -> NoGpuEventsError:
    """The error for a trace without kernels, memcpys or memsets, naming what it does hold."""
    other = sorted(
        (k.removeprefix("category "), n)
        for k, n in timeline.meta.quality.dropped.items()
        if k.startswith("category ")
    )
    held = timeline.events.group_by("kind").len().sort(["len", "kind"], descending=[True, False])
    kinds = ", ".join(f"{n} {k}" for k, n in held.iter_rows())
    cut = timeline.meta.quality.truncated_files
    if cut:
        sizes = [Path(f).stat().st_size for f in cut if Path(f).is_file()]
        after = f" after {sum(sizes) / 1e6:.1f} MB" if sizes else ""
        return NoGpuEventsError(
            f"the trace is cut off{after}, and the part before the cut holds no GPU events "
            f"({kinds or 'no events'}): the file ends early",
            path=timeline.meta.path,
            hint="a copy that stopped before the end (Kineto writes the GPU events after the "
            "host ones); copy the trace again from its source, or let the profiler finish "
            "writing",
        )
    uncategorised = dict(other).get("(none)", 0)
    if uncategorised and uncategorised >= sum(n for _, n in other) / 2:
        problem = (
            f"{uncategorised} events carry no category (`cat`), so none of them can be read as "
            "a kernel, a copy or a host call" + (f"; the trace also holds {kinds}" if kinds else "")
        )
        hint = (
            "this looks like a trace written by another tool: traceanalyzer reads "
            "torch.profiler (Kineto) Chrome traces, whose events name their category "
            "(kernel, gpu_memcpy, cuda_runtime, cpu_op), and Nsight Systems exports"
        )
    elif other:
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
        if launches >= LOST_BUFFERS_LAUNCHES:
            hint = (
                "the profiler lost its GPU buffers (CUPTI/roctracer): profile fewer active "
                "steps, or make sure the profiler is stopped cleanly before the trace is "
                "exported"
            )
        else:
            hint = (
                "with this few launches no buffer filled up: GPU activity tracing was most "
                "likely unavailable (CUPTI missing or not permitted, WSL, another profiler "
                "such as nsys or ncu attached to the process); check the profiler's warnings "
                "when it starts"
            )
    elif runtime := _runtime_calls(timeline):
        problem = (
            f"nothing ran on the GPU: CUDA was traced ({runtime}) but no kernel or copy was "
            "launched in the profiled window"
        )
        hint = (
            "the model ran on the CPU (move the model and its inputs with .to('cuda')), or "
            "the profiled steps hold no GPU work: profile the steps that use the GPU"
        )
    elif "legacy" in (timeline.meta.producer or ""):
        problem = (
            "a legacy torch.autograd.profiler export with no GPU time: it was recorded "
            f"without use_cuda=True ({kinds or 'empty'})"
        )
        hint = (
            "record with torch.profiler.profile(activities=[ProfilerActivity.CPU, "
            "ProfilerActivity.CUDA]), or the legacy profiler with use_cuda=True"
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


#: Launches without activity records from which lost buffers are the likelier cause; fewer
#: than this and activity tracing was most likely off (nothing filled a buffer).
LOST_BUFFERS_LAUNCHES = 1000


def _runtime_calls(timeline: Timeline) -> str:
    """The CUDA/HIP runtime or driver calls of the trace, "N runtime calls: a, b, c"."""
    calls = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(["runtime", "driver"]))
        .group_by(name=pl.col("name").cast(pl.String))
        .len()
        .sort(["len", "name"], descending=[True, False])
        .collect()
    )
    if not calls.height:
        return ""
    names = ", ".join(calls["name"].head(3).to_list())
    return f"{int(calls['len'].sum())} runtime calls: {names}"


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


__all__ = ["Metrics", "analyze", "finish"]
