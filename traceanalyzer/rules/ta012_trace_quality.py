"""TA012: the trace itself limits what the report can say."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.analyses.timeline.windows import span_ns
from traceanalyzer.model import DataQuality
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
    markers at all (the whole trace is the window and there is no per-step impact, unless
    its calls repeat: then the steps are its iterations, found from a call range that repeats
    or, where none does, a cycle of kernels,
    analyses/timeline/iterations.py, and the finding says so); events
    the reader dropped (unknown categories, zero timestamps, negative durations); and, where
    the metrics carry the clock check, GPU work that starts before the host call that
    launched it by more than a tolerance (host and device clocks disagree); and one-time
    work inside the window (a first launch that loads a library or autotunes, `cudaFree`
    creating the context, compilation: analyses/timeline/startup.py) over
    `min_startup_share` of it, a warning where it is most of the window: the trace then shows
    start-up, not the loop, and the verdict says so. Its GPU idle is left out of TA001's
    price. Where more than `max_dropped_gpu_share` of the GPU events could not be read
    (timestamps written as text, negative durations, a converter's output), the trace is
    damaged: a critical finding with an example, the verdict is about the trace, and no
    performance finding is reported (a timeline with holes would be read as idle).

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
    advice_neutral = (
        "Mark each iteration with an NVTX range named step_N (nvtxRangePushA / nvtxRangePop) "
        "or pass --step-pattern for the ranges the program has, and capture a few iterations "
        "past start-up (nsys --capture-range=cudaProfilerApi with cudaProfilerStart/Stop)."
    )
    claims = "none"
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
        max_dropped_gpu_share: float = field(
            default=0.01,
            metadata={
                "help": "share of the GPU events that could not be read above which the trace "
                "is damaged: a critical finding, and no performance finding"
            },
        )
        min_startup_share: float = field(
            default=0.10,
            metadata={"help": "one-time work as a share of the window that is named"},
        )
        startup_dominates_share: float = field(
            default=0.50,
            metadata={"help": "one-time work share of the window at which it is a warning"},
        )

    example_bad: ClassVar[list[Event]] = _steps(1)
    example_good: ClassVar[list[Event]] = _steps(3)

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        q = ctx.meta.quality
        yield from self.damaged_finding(ctx, t)
        span = span_ns(ctx.metrics.steps.windows)
        if q.truncated_files:
            yield self.finding(
                ctx,
                f"{len(q.truncated_files)} trace file(s) cut off mid-event: "
                f"{', '.join(q.truncated_files)}; the events before the cut were kept "
                f"({ctx.metrics.kernels.count} kernels over {span / 1e6:.1f} ms of GPU time); "
                "what came after the cut is missing from every figure",
                {
                    "truncated_files": list(q.truncated_files),
                    "notes": list(q.notes),
                    "kernels_read": ctx.metrics.kernels.count,
                    "read_span_ns": span,
                },
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
        yield from self._startup(ctx, t)
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
        if ctx.metrics.basis == "iterations":
            yield self.finding(
                ctx,
                "no step markers: the iterations are the repeats of "
                f"{ctx.metrics.iterations} (found from what repeats), and every impact is per "
                "iteration",
                {"step_markers": 0, "iterations_from": ctx.metrics.iterations},
                severity=Severity.INFO,
                advice="Call prof.step() every iteration (ProfilerStep#N), or wrap steps in "
                "NVTX ranges named step_N for Nsight, for a window the trace itself marks.",
            )
        for rank, n in sorted(ctx.metrics.steps.counts.ranks.items()):
            if n < t.min_steps:
                yield self.finding(
                    ctx,
                    f"rank {rank}: only {n} profiled {_unit(ctx)}(s); per-{_unit(ctx)} numbers "
                    f"rest on a small sample (at least {t.min_steps} wanted)",
                    {"steps": n, "threshold_steps": t.min_steps},
                    Scope(rank=rank),
                    severity=Severity.INFO,
                )

    def damaged_finding(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        """GPU events the reader could not read (bad or text timestamps, negative durations,
        no device): above `max_dropped_gpu_share` of them, the timeline has holes, and a
        finding priced on it would be about the holes. Run whatever rules are selected:
        `run_rules` keeps only this when the trace is damaged."""
        q = ctx.meta.quality
        lost = q.dropped_gpu
        read = q.gpu_events
        if not damaged(q, t.max_dropped_gpu_share):
            return
        reasons = {k: n for k, n in q.dropped.items() if k not in BENIGN_DROPS}
        why = ", ".join(f"{n} {k}" for k, n in sorted(reasons.items(), key=lambda x: -x[1]))
        yield self.finding(
            ctx,
            f"{lost} GPU events (kernels, copies, memsets) could not be read, against "
            f"{read} read ({why})"
            + (f"; e.g. {q.dropped_gpu_example[:120]}" if q.dropped_gpu_example else "")
            + ": the GPU timeline has holes, so no performance finding is reported",
            {
                "damaged": True,
                "dropped_gpu": lost,
                "gpu_events_read": read,
                "dropped": reasons,
                "example": q.dropped_gpu_example,
                "threshold_share": t.max_dropped_gpu_share,
            },
            severity=Severity.CRITICAL,
            advice="Re-export the trace with the profiler (timestamps and durations must be "
            "JSON numbers, in µs, durations not negative), or fix the converter that wrote it.",
        )

    def _startup(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        """One-time work inside the window (analyses/timeline/startup.py), per device."""
        for d in ctx.metrics.startup_model:
            rank, device, window, once = d.rank, d.device, d.window_ns, d.startup_ns
            if not window or once < t.min_startup_share * window:
                continue
            named = "; ".join(
                f"{c['dur_ns'] / 1e6:.1f} ms in {c['name']}"
                + (f" inside {c['op_name']}" if c["op_name"] and c["op_name"] != c["name"] else "")
                for c in d.calls
            )
            dominates = once >= t.startup_dominates_share * window
            stepped = ctx.metrics.basis != "trace"
            yield self.finding(
                ctx,
                f"rank {rank} GPU {device}: the window holds start-up: "
                f"{once / 1e6:.1f} ms of the {window / 1e6:.1f} ms window is one-time work "
                f"({named}); the GPU idles {d.idle_ns / 1e6:.1f} ms of it"
                + ("; the trace shows start-up, not the loop" if dominates else "")
                + "; no price here counts it",
                {
                    "window_ns": window,
                    "startup_ns": once,
                    "startup_share": once / window,
                    "startup_idle_ns": d.idle_ns,
                    "calls": list(d.calls),
                    "dominates": dominates,
                    "threshold_share": t.min_startup_share,
                },
                Scope(rank, device),
                severity=Severity.WARNING if dominates else Severity.INFO,
                advice=(
                    "Profile steady steps: torch.profiler.schedule(wait=1, warmup=1, active=3) "
                    "with prof.step() every iteration"
                    + ("" if stepped else " (this trace has no step markers)")
                    + ", or start the profiler after a few iterations; the first iteration's "
                    "library loading, autotuning and compilation happen once."
                ),
            )

    def _clock(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for r in ctx.metrics.early_starts.summary.iter_rows(named=True):
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


def damaged(q: DataQuality, share: float) -> bool:
    """Whether the reader lost at least `share` of the trace's GPU events (and one)."""
    return q.dropped_gpu > 0 and q.dropped_gpu >= share * (q.dropped_gpu + q.gpu_events)


def _unit(ctx: Context) -> str:
    """What a step is called: an iteration where repeated calls are the steps."""
    return "iteration" if ctx.metrics.basis == "iterations" else "step"
