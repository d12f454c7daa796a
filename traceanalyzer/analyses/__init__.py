"""Analyses: pure functions from a Timeline to Metrics (no rendering, no file access)."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses import devices, kernels, windows
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.errors import ConfigError, NoGpuEventsError
from traceanalyzer.model import Timeline

DEFAULT_TOP_KERNELS = 10


def analyze(
    timeline: Timeline, top_n: int = DEFAULT_TOP_KERNELS, step_pattern: str | None = None
) -> Metrics:
    """Compute windows, busy/idle, steps and kernel summaries for every (rank, device).

    `step_pattern` is a regular expression for the host ranges that mark steps (default:
    `ProfilerStep#N` for Chrome traces, common NVTX step names for Nsight exports).
    """
    if timeline.gpu_work().select(pl.len()).collect().item() == 0:
        raise no_gpu_events(timeline)
    pattern = step_pattern or windows.default_step_pattern(timeline.meta.format)
    _check_pattern(pattern)
    markers = windows.step_markers(timeline, pattern).collect().lazy()
    work = windows.gpu_work_with_step(timeline, markers).collect().lazy()
    steps = windows.device_steps(work, markers).collect()
    by_steps = steps.height > 0
    wins = windows.device_windows(work, steps.lazy(), markers, by_steps).collect()
    in_windows = devices.kernels_in_windows(work, wins.lazy()).collect()
    dev, step_rows = pl.collect_all(
        [
            devices.device_summary(work, wins.lazy(), in_windows.lazy()),
            devices.step_summary(work, steps.lazy()),
        ]
    )
    return Metrics(
        basis="steps" if by_steps else "trace",
        windows=wins,
        devices=dev,
        steps=step_rows,
        kernel_histogram=kernels.duration_histogram(in_windows),
        top_kernels=kernels.top_kernels(in_windows, top_n),
        kernel_count=in_windows.height,
        kernel_total_ns=int(in_windows["clipped_ns"].sum() or 0),
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
    held = timeline.events.group_by("kind").len().sort("len", descending=True)
    kinds = ", ".join(f"{n} {k}" for k, n in held.iter_rows())
    if other:
        cats = ", ".join(f"{n} {c}" for c, n in other)
        problem = (
            "no GPU events (kernels, memcpy, memset); the trace holds "
            f"{kinds or 'no host events'} and events of categories the tool does not read: {cats}"
        )
        hint = "a CUPTI range-profiler or non-CUDA accelerator trace has no GPU timeline to analyse"
    else:
        problem = (
            "no GPU events (kernels, memcpy, memset): this is a CPU-only trace "
            f"({kinds or 'empty'})"
        )
        hint = "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
    return NoGpuEventsError(problem, path=timeline.meta.path, hint=hint)


__all__ = ["Metrics", "analyze"]
