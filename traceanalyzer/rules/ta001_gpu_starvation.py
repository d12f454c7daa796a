"""TA001: the GPU waits for the host."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules import advice as advise
from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, launched, step


class GpuStarvation(Rule):
    """The GPU sits idle because nothing is queued: the host is late.

    ## What it detects
    Idle time inside the analysed window whose cause is `host_wait`: the work that ended
    each gap was launched only after the gap began, and the gap was longer than launch
    overhead. Idle under one-time host work (initialisation, a first launch that loads a
    library, compilation: analyses/timeline/startup.py) is start-up, not the loop's: it is
    left out here and named by TA012. Waits that end at a step's first GPU operation are counted
    apart: they point at what happens between steps (the input pipeline, logging,
    checkpointing); the rest happen inside steps (CPU-side work between launches). On a
    device whose kernels average under 10 µs and whose waits inside steps average at most
    100 µs per kernel, those waits are
    the launches' own cost and TA003 reports them (unless the run replays CUDA graphs); only
    the waits between steps count here.

    ## Why it matters
    A starved GPU does nothing, however fast its kernels are. Every millisecond the host is
    late is a millisecond of step time, unless other work hides it.

    ## How to fix
    Between steps: more DataLoader workers, `pin_memory=True`, prefetching
    (`prefetch_factor`, a CUDA-stream prefetcher), moving preprocessing to the GPU, logging
    less often. Inside steps: less Python per step (torch.compile, CUDA graphs), no CPU-side
    tensor work in the loop, fewer host round trips.

    Where the host waits inside steps, the finding splits the host's step by phase (data
    loading, forward, backward, optimizer.step, outside operators:
    analyses/host/host_phases.py) and advises on the phase that holds most of it (a fused or
    compiled optimizer step, a compiled model, FSDP units).

    ## Known false positives
    Deliberate pauses (evaluation, checkpointing) inside the window, and profiler overhead:
    torch.profiler with stacks or shapes slows the host, so waits look longer than in an
    unprofiled run.
    """

    code = "TA001"
    slug = "gpu-starvation"
    title = "GPU starved: idle while waiting for the host"
    category = "gpu_starvation"
    advice_neutral = (
        "Keep the GPU fed: overlap the host's work with the GPU's (asynchronous copies from "
        "pinned memory, work queued ahead on streams), move host-side preprocessing off the "
        "critical thread, and capture repeated launch sequences in CUDA graphs."
    )
    claims = "host_wait_idle"
    default_severity = Severity.WARNING
    advice = (
        "Feed the GPU faster: more DataLoader workers, pin_memory and prefetching for waits "
        "between steps; torch.compile or CUDA graphs for host overhead inside steps."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_host_wait_share: float = field(
            default=0.10,
            metadata={"help": "host-wait idle as a share of the window that triggers it"},
        )

    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 400),
        *launched(110, 120, 50, 1, "gemm"),
        # the host spends 200 µs elsewhere before launching the next kernel
        *launched(370, 375, 50, 2, "gemm"),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 400),
        *launched(110, 120, 50, 1, "gemm"),
        *launched(112, 170, 50, 2, "gemm"),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for d in ctx.metrics.host_wait_model:
            window, wait, share = d.window_ns, d.host_wait_ns, d.host_wait_share
            between, inside = d.between_steps_ns, d.inside_steps_ns
            if share is None or share < t.min_host_wait_share:
                continue
            stepped = ctx.metrics.basis != "trace"
            where = []
            if between:
                where.append(f"{between / 1e6:.2f} ms between steps (input pipeline)")
            if inside:
                where.append(
                    f"{inside / 1e6:.2f} ms "
                    + ("inside steps (CPU-side work)" if stepped else "between launches")
                )
            advice = None
            phases = d.phases
            if between > inside:
                advice = advise.input_pipeline(ctx)
            elif inside > 0:
                advice = advise.host_overhead(ctx)
                top = _top_phase(phases)
                if top is not None and phases:
                    advice = advise.host_phase(ctx, *top) or advice
                    where.append(
                        "the host's step: "
                        + ", ".join(
                            f"{PHASE_WORDS[p]} {ns / 1e6:.1f} ms"
                            for p, ns in sorted(phases.items(), key=lambda kv: -kv[1])
                            if ns
                        )
                    )
            if d.startup_idle_ns:
                where.append(
                    f"{d.startup_idle_ns / 1e6:.2f} ms more is one-time start-up work, left out"
                )
            yield self.finding(
                ctx,
                f"rank {d.rank} GPU {d.device}: idle {d.idle_share:.0%} of a "
                f"{window / 1e6:.1f} ms window, {share:.0%} waiting for the host "
                f"({'; '.join(where)})",
                {
                    "window_ns": window,
                    "idle_share": d.idle_share,
                    "host_wait_ns": wait,
                    "host_wait_share": share,
                    "host_wait_between_steps_ns": between,
                    "host_wait_inside_steps_ns": inside,
                    "longest_gap_ns": d.longest_gap_ns,
                    "host_phases": phases,
                    "startup_idle_ns": d.startup_idle_ns,
                    "threshold_share": t.min_host_wait_share,
                },
                Scope(d.rank, d.device),
                d.impact_ns,
                advice,
                ceiling_ns=d.ceiling_ns,
            )


#: The phases of a host step (analyses/host/host_phases.py) in a finding's words.
PHASE_WORDS = {
    "data_loading": "data loading",
    "optimizer": "optimizer.step",
    "backward": "backward",
    "forward": "forward",
    "other": "outside operators",
}


def _top_phase(phases: dict[str, int] | None) -> tuple[str, int] | None:
    """The phase that holds most of the host's step, among those with advice of their own
    and over a quarter of the step (`other` is Python and unrecorded host time: no phase)."""
    if not phases:
        return None
    total = sum(phases.values())
    named = {p: ns for p, ns in phases.items() if p != "other"}
    phase = max(named, key=lambda p: named[p], default=None)
    if phase is None or not total or named[phase] < total / 4:
        return None
    return phase, named[phase]
