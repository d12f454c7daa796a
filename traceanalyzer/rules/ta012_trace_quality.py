"""TA012: the trace itself limits what the report can say."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import polars as pl

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, launched, step

#: Drop reasons that are expected in healthy traces and say nothing about their quality.
BENIGN_DROPS = ("host events of processes with no GPU work", "NVTX mark (no duration)")


def _steps(n: int) -> list[Event]:
    """`n` steps of 200 µs, one GEMM each."""
    return [
        ev
        for i in range(n)
        for ev in [
            step(i + 1, 100 + 200 * i, 200),
            *launched(105 + 200 * i, 110 + 200 * i, 150, i + 1, "sm90_xmma_gemm_bf16bf16"),
        ]
    ]


class TraceQuality(Rule):
    """The trace is incomplete or inconsistent: read the report with care.

    ## What it detects
    Problems with the capture rather than the workload: a file cut off mid-event (the events
    before the cut were kept); too few profiled steps (fewer than a threshold), or no step
    markers at all (the whole trace is the window and there is no per-step impact); events
    the reader dropped (unknown categories, zero timestamps, negative durations); and, where
    the metrics carry the clock check, GPU work that starts before the host call that
    launched it by more than a tolerance (host and device clocks disagree).

    ## Why it matters
    Every other diagnosis rests on the trace. A truncated trace misses the end of the run, a
    single step may be a warm-up outlier, and inconsistent clocks make idle gaps and the
    critical path wrong. Without step markers the impact of a fix per step cannot be told.

    ## How to fix
    Let the profiler finish (`prof.stop()` / the context manager's exit) before copying the
    file; profile at least three active steps after warm-up
    (`torch.profiler.schedule(wait=1, warmup=2, active=4)`) and call `prof.step()` every
    iteration (or wrap steps in NVTX ranges for Nsight); use a current profiler and one
    host per trace file.

    ## Known false positives
    Short inference traces that have no notion of steps, and categories the tool does not
    read by design (accelerator-specific events). The severity follows the problem, not an
    estimated saving.

    ## Impact estimate
    None: trace quality costs no step time; it limits what the report can claim.
    """

    code = "TA012"
    slug = "trace-quality"
    title = "Trace quality limits the analysis"
    category = "trace_quality"
    default_severity = Severity.INFO
    advice = (
        "Capture a complete trace of at least three active steps after warm-up "
        "(torch.profiler.schedule, prof.step() every iteration)."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_steps: int = field(
            default=3, metadata={"help": "profiled steps per rank below which it warns"}
        )
        min_dropped_events: int = field(
            default=1, metadata={"help": "dropped events (benign reasons left out) to report"}
        )
        max_early_start_share: float = field(
            default=0.01,
            metadata={"help": "share of GPU work starting before its launch that is tolerated"},
        )

    example_bad: ClassVar[list[Event]] = _steps(1)
    example_good: ClassVar[list[Event]] = _steps(3)

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        q = ctx.meta.quality
        if q.truncated_files:
            yield self.finding(
                ctx,
                f"{len(q.truncated_files)} trace file(s) cut off mid-event: "
                f"{', '.join(q.truncated_files)}; the events before the cut were kept",
                {"truncated_files": list(q.truncated_files), "notes": list(q.notes)},
                severity=Severity.WARNING,
                advice="Let the profiler finish writing before copying the trace, then re-run.",
            )
        if q.skipped_files:
            yield self.finding(
                ctx,
                f"{len(q.skipped_files)} file(s) of the rank folder could not be read and are "
                f"not analysed: {'; '.join(q.skipped_files)}",
                {"skipped_files": list(q.skipped_files)},
                severity=Severity.WARNING,
                advice="Re-copy or re-export the unreadable rank files: findings across ranks "
                "(imbalance, communication) are missing those ranks.",
            )
        yield from self._steps(ctx, t)
        dropped = {k: n for k, n in q.dropped.items() if k not in BENIGN_DROPS}
        if sum(dropped.values()) >= t.min_dropped_events and dropped:
            listed = ", ".join(
                f"{n} {k}" for k, n in sorted(dropped.items(), key=lambda x: (-x[1], x[0]))
            )
            yield self.finding(
                ctx,
                f"{sum(dropped.values())} events dropped while reading: {listed}",
                {"dropped": dropped},
                severity=Severity.INFO,
                advice="Dropped events are not analysed; check the profiler version and "
                "settings if they matter.",
            )
        yield from self._clock(ctx, t)

    def _steps(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        if ctx.metrics.basis == "trace":
            yield self.finding(
                ctx,
                "no step markers: the whole trace is the window, and every impact is per "
                "window (one step)",
                {"steps": 0, "threshold_steps": t.min_steps},
                severity=Severity.INFO,
                advice="Call prof.step() every iteration (ProfilerStep#N), or wrap steps in "
                "NVTX ranges named step_N for Nsight; --step-pattern matches other names.",
            )
            return
        counts = ctx.metrics.steps.group_by("rank").agg(n=pl.col("step").n_unique())
        for rank, n in counts.sort("rank").iter_rows():
            if n < t.min_steps:
                yield self.finding(
                    ctx,
                    f"rank {rank}: only {n} profiled step(s); per-step numbers rest on a "
                    f"small sample (at least {t.min_steps} wanted)",
                    {"steps": n, "threshold_steps": t.min_steps},
                    Scope(rank=rank),
                    severity=Severity.INFO,
                )

    def _clock(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for r in ctx.metrics.early_starts.iter_rows(named=True):
            if not r["linked"] or r["early_share"] <= t.max_early_start_share:
                continue
            yield self.finding(
                ctx,
                f"rank {r['rank']} GPU {r['device']}: {r['early']} of {r['linked']} GPU "
                f"operations start before the host call that launched them (up to "
                f"{r['max_early_ns'] / 1e3:.1f} µs early): host and device clocks disagree",
                {
                    "linked": r["linked"],
                    "early": r["early"],
                    "early_share": r["early_share"],
                    "max_early_ns": r["max_early_ns"],
                    "threshold_share": t.max_early_start_share,
                },
                Scope(r["rank"], r["device"]),
                severity=Severity.WARNING,
                advice="Idle gaps and the critical path are unreliable: re-capture on one "
                "host with a current profiler, or align the traces' clocks before merging.",
            )
