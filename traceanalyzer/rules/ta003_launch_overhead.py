"""TA003: kernels too short to keep the GPU fed one launch at a time."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules import advice as advise
from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, launched, step

_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>"


class LaunchOverhead(Rule):
    """Many tiny kernels issued one at a time: the GPU waits for each launch.

    ## What it detects
    Idle time whose cause is `launch_overhead`: short gaps (up to the launch-gap limit, 50 µs
    by default) between kernels, each ended by a kernel that was launched only after the gap
    began. The CPU issues work one launch at a time and the GPU finishes each kernel before
    the next arrives. The finding reports the mean kernel duration and the share of kernels
    shorter than 10 µs (nsys-ai flags an average under 10 µs over at least 100 launches).
    Where the device's kernels average under 10 µs (over at least 100), a launch costs the
    host more than its kernel takes, so the waits for the host inside steps are the cost of
    issuing the next operator, whatever the length of each (an eager operator with the
    profiler on takes 50-200 µs of host time): where they average at most 100 µs per kernel,
    they count here too, not as starvation (TA001). Not in a run that replays CUDA graphs: a
    replayed kernel costs no launch.

    ## Why it matters
    A launch costs about 5–10 µs of host time, and an eager PyTorch operator 10–50 µs. Below
    that kernel duration the host cannot keep ahead of the GPU, so step time is set by Python
    and the dispatcher, not by the GPU: a faster GPU would not help at all.

    ## How to fix
    Launch fewer, larger kernels: `torch.compile` (fuses pointwise chains into one kernel and,
    with `mode="reduce-overhead"`, replays CUDA graphs), CUDA graphs for static step loops,
    fused operators (fused optimizers, fused layer norms), and larger batches so each kernel
    does more work. Move per-element Python loops into tensor operations.

    Where at least 30 % of the rank's tiny kernels are launched inside `optimizer.step`
    (analyses/host/host_phases.py attributes each kernel to the phase of the host step that
    launched it), the optimizer's per-parameter loop is named and the advice is a fused
    optimizer.

    ## Known false positives
    Profiler overhead inflates host time per launch (stacks and shapes recording most), so
    the gaps look longer than in an unprofiled run. Short gaps after a host-side sync that
    the sync analysis did not see are counted here too.

    ## Impact estimate
    The impact is the critical path's `host_gaps_closed` what-if (host time costing nothing),
    capped by the launch-overhead idle per step: removing launch overhead cannot save more
    than the GPU waited for launches. Where the optimizer's tiny kernels lead and the advice
    is a fused optimizer, the impact is their share of it: what that fix removes.
    """

    code = "TA003"
    slug = "launch-overhead"
    title = "Launch-overhead bound: tiny kernels, GPU waits for each launch"
    category = "launch_overhead"
    advice_neutral = (
        "Fewer, larger launches: fuse the small kernels, give each more work (batching), and "
        "capture the repeated launch sequence in a CUDA graph (cudaStreamBeginCapture, "
        "cudaGraphLaunch)."
    )
    claims = "launch_idle"
    default_severity = Severity.WARNING
    advice = (
        "Launch fewer, larger kernels: torch.compile (fusion, CUDA graphs with "
        'mode="reduce-overhead"), CUDA graphs for static loops, fused ops, larger batches.'
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_launch_idle_share: float = field(
            default=0.10,
            metadata={"help": "launch-overhead idle as a share of the window that triggers it"},
        )
        min_kernels: int = field(
            default=100,
            metadata={"help": "kernels a device must run in the window (nsys-ai: 100 launches)"},
        )

    # 120 one-microsecond kernels, each launched only after the previous one ended
    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 700),
        *[ev for i in range(120) for ev in launched(108 + 5 * i, 110 + 5 * i, 1, i + 1, _ADD)],
    ]
    # the same launches feed 40 µs kernels: the queue never runs dry
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 5000),
        *[ev for i in range(120) for ev in launched(108 + 5 * i, 110 + 40 * i, 40, i + 1, _ADD)],
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for d in ctx.metrics.launch_model:
            window, count, inside = d.window_ns, d.kernel_count, d.inside_steps_ns
            share = d.launch_overhead_share
            if share is None or count < t.min_kernels or share < t.min_launch_idle_share:
                continue
            where = f"in {d.gap_count} short launch gaps"
            if inside:
                where = (
                    f"waiting for launches ({d.short_gap_ns / window:.0%} in short "
                    f"launch gaps, {inside / window:.0%} in longer waits for the host between "
                    "its kernels)"
                )
            impact = d.impact_ns
            advice = advise.host_overhead(ctx)
            origin = d.optimizer_share
            from_optimizer = ""
            if origin is not None and origin >= OPTIMIZER_SHARE:
                # the fix is the optimizer's: it saves those launches' share
                from_optimizer = f"; {origin:.0%} of its tiny kernels come from optimizer.step"
                advice = advise.tiny_optimizer_kernels(ctx, origin)
                impact = d.optimizer_impact_ns
            yield self.finding(
                ctx,
                f"rank {d.rank} GPU {d.device}: idle {share:.0%} of a "
                f"{window / 1e6:.1f} ms window {where}; "
                f"{count} kernels averaging {d.mean_kernel_ns / 1e3:.1f} µs" + from_optimizer,
                {
                    "window_ns": window,
                    "launch_overhead_ns": d.launch_overhead_ns,
                    "launch_overhead_share": share,
                    "short_gap_ns": d.short_gap_ns,
                    "host_wait_inside_steps_ns": inside,
                    "kernel_count": count,
                    "mean_kernel_ns": d.mean_kernel_ns,
                    "small_kernel_count_share": ctx.metrics.kernels.small_count_share,
                    "small_kernel_time_share": ctx.metrics.kernels.small_time_share,
                    "tiny_kernel_share_from_optimizer": origin,
                    "threshold_share": t.min_launch_idle_share,
                },
                Scope(d.rank, d.device),
                impact,
                advice,
                # fewer launches save at most the GPU's idle
                ceiling_ns=d.ceiling_ns,
            )


#: Where at least this share of a rank's tiny kernels were launched inside optimizer.step,
#: the optimizer's per-parameter loop is the launch overhead to fix first (a fused optimizer
#: removes that share at once; the rest is spread over the model's operators).
OPTIMIZER_SHARE = 0.3
