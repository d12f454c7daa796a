"""TA020: the optimizer fills every gradient with zeros each step (set_to_none=False)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, launched, step


def _step(n: int, t: float, fill: bool) -> list[Event]:
    """A step: a kernel, then zero_grad, which (with `fill`) zero-fills three gradients."""
    out = [
        step(n, t, 1000),
        *launched(t + 10, t + 15, 100, 10 * n, "gemm"),
        cpu_op(t + 200, 700, "Optimizer.zero_grad#AdamW.zero_grad"),
    ]
    if fill:
        for i in range(3):
            out += [
                cpu_op(t + 210 + 200 * i, 150, "aten::zero_"),
                *launched(t + 220 + 200 * i, t + 225 + 200 * i, 5, 10 * n + 1 + i, "fill"),
            ]
    out += launched(t + 920, t + 925, 50, 10 * n + 5, "gemm")
    return out


class ZeroGradFill(Rule):
    """`zero_grad(set_to_none=False)`: every gradient is filled with zeros each step.

    ## What it detects
    Operators that fill tensors with zeros (`aten::zero_`, `aten::fill_`,
    `aten::_foreach_zero_`) inside the optimizer's `Optimizer.zero_grad#...` range, at least
    `min_fills_per_step` per steady step, and with them the adds into the filled gradients
    in the backward (`aten::add_` under the engine's `AccumulateGrad`, which with None
    gradients takes the new gradient as it is). With `set_to_none=True` (the default since
    PyTorch 2.0) zero_grad sets the gradients to None and runs no kernel.

    ## Why it matters
    Each fill is a launch (one per parameter without foreach) and a pass over every
    gradient's memory; the next backward then adds into the zeros instead of writing the
    gradient once.

    ## How to fix
    Call `optimizer.zero_grad(set_to_none=True)` (or leave the argument out), or
    `model.zero_grad(set_to_none=True)`. Code that reads `.grad` before the next backward
    must then handle None.

    ## Known false positives
    A loop that needs zero gradients on purpose (it reads `.grad` of every parameter after a
    backward that skips some of them).

    ## Impact estimate
    The larger of the fills' and adds' host side (the GPU idle under them, as for any
    host-side cause) and their kernels' time, scaled by the share of the kernel time that
    bounds the step, at most their host and kernel time together (analyses/causes/impact.py).
    On an H200 GPT step this priced 0.64 ms; set_to_none=True saved 1.5 ms without the
    profiler (0.5-2.3 ms across rounds).
    """

    code = "TA020"
    slug = "zero-grad-fill"
    title = "zero_grad(set_to_none=False): gradients zero-filled every step"
    category = "zero_grad_fill"
    default_severity = Severity.WARNING
    advice = (
        "Use optimizer.zero_grad(set_to_none=True) (the default): the gradients are set to "
        "None instead of filled with zeros."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_fills_per_step: float = field(
            default=1.0, metadata={"help": "zero fills inside zero_grad per steady step"}
        )

    example_bad: ClassVar[list[Event]] = [*_step(1, 100, True), *_step(2, 1100, True)]
    example_good: ClassVar[list[Event]] = [*_step(1, 100, False), *_step(2, 1100, False)]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        fills = {
            (r["rank"], r["device"]): r for r in ctx.metrics.causes.zero_fill.iter_rows(named=True)
        }
        for rank, m in models(ctx, "zero_grad_fill").items():
            names = ctx.metrics.causes.names_of(rank, "zero_grad_fill", 10)
            n_fills = sum(n["count"] for n in names if n["name"] != "aten::add_") / (m.steps or 1)
            n_adds = sum(n["count"] for n in names if n["name"] == "aten::add_") / (m.steps or 1)
            if n_fills < t.min_fills_per_step or m.every_step_share < 0.5:
                continue
            r = fills.get((rank, m.device)) or {}
            steps = m.steps or 1
            kernel_ns = (r.get("kernel_ns") or 0) // steps
            host_side = m.explained_ns >= m.unrecorded_ns
            yield self.finding(
                ctx,
                f"rank {rank}: zero_grad fills the gradients with zeros every step "
                f"({n_fills:.0f} fill calls) and the backward adds into them ({n_adds:.0f} adds "
                f"under AccumulateGrad): {duration(m.work_ns)} of host time, "
                f"{duration(m.explained_ns)} of GPU "
                f"{m.device} idle under it, {(r.get('kernels') or 0) // steps} kernels taking "
                f"{duration(kernel_ns)} per step",
                {
                    "fills_per_step": n_fills,
                    "accumulate_adds_per_step": n_adds,
                    "host_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "kernels_per_step": (r.get("kernels") or 0) // steps,
                    "kernel_ns_per_step": kernel_ns,
                    "explains": ["TA001", "TA003"] if host_side else [],
                    "bound_by": "host" if host_side else "gpu_compute",
                    "cause_words": "zero_grad(set_to_none=False) fills every gradient",
                    "threshold_fills_per_step": t.min_fills_per_step,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )
