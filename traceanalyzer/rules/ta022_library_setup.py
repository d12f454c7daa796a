"""TA022: cuDNN sets itself up again inside every step (new input shapes)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, launch, launched, step


def _step(n: int, t: float, tuning: bool) -> list[Event]:
    """A step: a convolution; with `tuning`, it runs three candidate kernels and synchronises
    after each (cudnn.benchmark on a new shape), 2 ms in all, before the step's own kernel."""
    dur = 2000 if tuning else 60
    out = [step(n, t, dur + 500), cpu_op(t + 10, dur, "aten::cudnn_convolution")]
    if tuning:
        for i in range(3):
            out += [
                *launched(t + 20 + 600 * i, t + 30 + 600 * i, 100, 100 * n + i, "candidate"),
                launch(t + 140 + 600 * i, 400, 100 * n + 50 + i, name="cudaDeviceSynchronize"),
            ]
    out += launched(t + dur, t + dur + 10, 400, 100 * n + 99, "conv")
    return out


class LibrarySetup(Rule):
    """cuDNN sets itself up for a new input shape inside every step.

    ## What it detects
    cuDNN (or MIOpen) operators inside at least `min_steps_share` of the steady steps, and
    at least two of them (set-up seen in one step is a first call's, done once), that
    either synchronise the device inside them, a convolution timing its candidate
    algorithms (`torch.backends.cudnn.benchmark = True` meeting a shape it has not seen),
    or hold the host for a millisecond or more, cuDNN choosing and building its kernels
    (an execution plan) for a shape it has not seen: convolutions
    (`aten::cudnn_convolution`, `aten::convolution_backward`) and cuDNN attention
    (`aten::_cudnn_attention_forward`). A warm cuDNN call returns in tens of microseconds.

    ## Why it matters
    The set-up runs on the host while the GPU waits; autotuning also runs every candidate
    algorithm and synchronises after each. Input shapes that change every step (images of
    varying size, a new sequence length per batch) make cuDNN set up every step, often for
    longer than the step's own work.

    ## How to fix
    Keep input shapes to a few sizes (resize, pad or bucket them) so that each is set up
    once; where shapes must keep changing, set `torch.backends.cudnn.benchmark = False`
    (no autotuning) and, for attention, pick a backend that needs no plan per shape
    (`torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)`).

    ## Known false positives
    The first steps at each new shape of a loop that then settles (a few sizes seen once
    each): warm-up, not every step. A trace of a loop that revisits a few shapes shows
    set-up only in the steps that meet one for the first time.

    ## Impact estimate
    The GPU idle the set-up explains: the part of each idle gap during which the host was
    inside such an operator, and after an autotuning one (it synchronises) the refill until
    the next launch ran (analyses/causes/host_work.py); per steady step, at most the
    device's idle. On an H200 ResNet-18 fed a new resolution every step with
    cudnn.benchmark on, this priced 1.63 s per step against 1.87 s saved by benchmark=False;
    on a GPT with cuDNN attention fed a new length every step, 123 ms against 140 ms saved by
    lengths seen before.
    """

    code = "TA022"
    slug = "library-setup"
    title = "cuDNN sets up again every step (new input shapes)"
    category = "library_setup"
    claims = "host_wait_idle"
    default_severity = Severity.WARNING
    advice = (
        "Keep input shapes to a few sizes (resize, pad or bucket them) so cuDNN sets each up once."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_steps_share: float = field(
            default=0.5,
            metadata={"help": "share of steady steps holding cuDNN set-up that triggers it"},
        )

    example_bad: ClassVar[list[Event]] = [*_step(1, 100, True), *_step(2, 3100, True)]
    example_good: ClassVar[list[Event]] = [*_step(1, 100, False), *_step(2, 3100, False)]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for rank, m in models(ctx, "library_setup").items():
            if m.every_step_share < t.min_steps_share or m.steps_with < 2:
                # set-up in one step is a first call's, done once (start-up: TA012 names
                # it): "every step" takes two steps to see
                continue
            steps = m.steps or 1
            names = ctx.metrics.causes.names_of(rank, "library_setup", 20)
            tuning = ctx.metrics.causes.syncing_calls(rank, "library_setup") / steps
            attention = any("attention" in str(n["name"]).lower() for n in names)
            advice = self.advice
            if tuning:
                advice += (
                    " torch.backends.cudnn.benchmark = True times every candidate algorithm "
                    "for each new shape: set it to False where shapes keep changing."
                )
            if attention:
                advice += (
                    " cuDNN attention builds a plan for each new sequence length: pad or "
                    "bucket lengths, or use torch.nn.attention.sdpa_kernel("
                    "SDPBackend.FLASH_ATTENTION)."
                )
            top = ", ".join(f"{n['count'] / steps:.1f} {n['name']}" for n in names[:3])
            autotuning = (
                f", {tuning:.1f} of them autotuning (they synchronise the device)" if tuning else ""
            )
            yield self.finding(
                ctx,
                f"rank {rank}: cuDNN sets up for new input shapes in {m.steps_with} of "
                f"{m.steps} steps: {m.calls_per_step:.1f} calls per step ({top}){autotuning}, "
                f"{duration(m.work_ns)} of host time in them, {duration(m.explained_ns)} of "
                f"GPU {m.device} idle per step",
                {
                    "steps": m.steps,
                    "steps_with_setup": m.steps_with,
                    "calls_per_step": m.calls_per_step,
                    "autotuning_calls_per_step": tuning,
                    "attention": attention,
                    "host_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "calls": [
                        {"name": n["name"], "count": n["count"], "total_ns": n["total_ns"]}
                        for n in names[:5]
                    ],
                    "explains": ["TA001", "TA002", "TA003", "TA018"],
                    "bound_by": "host",
                    "cause_words": "cuDNN sets up again for new input shapes every step",
                    "threshold_steps_share": t.min_steps_share,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                advice,
                ceiling_ns=m.ceiling_ns,
            )
