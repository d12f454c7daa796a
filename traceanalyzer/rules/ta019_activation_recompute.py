"""TA019: activation checkpointing recomputes the forward inside the backward."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, launched, step


def _step(n: int, t: float, recompute: bool) -> list[Event]:
    """A step: a forward linear, then a backward function that (with `recompute`) runs the
    linear again before its own product."""
    out = [
        step(n, t, 1000),
        cpu_op(t + 10, 100, "aten::linear"),
        *launched(t + 20, t + 25, 50, 10 * n + 1, "gemm"),
        cpu_op(t + 200, 700, "autograd::engine::evaluate_function: AddmmBackward0"),
    ]
    if recompute:
        out += [
            cpu_op(t + 210, 400, "aten::linear"),
            *launched(t + 220, t + 600, 50, 10 * n + 2, "gemm"),
        ]
    out += launched(t + 700, t + 705, 50, 10 * n + 3, "gemm")
    return out


class ActivationRecompute(Rule):
    """Activation checkpointing runs the forward again inside the backward pass.

    ## What it detects
    Forward operators (`aten::linear`, `aten::layer_norm`, `aten::scaled_dot_product_attention`,
    convolutions, activations) inside the autograd engine's backward functions, at least
    `min_ops_per_step` per steady step: the recompute of `torch.utils.checkpoint` (the
    non-reentrant kind leaves no range of its own; the reentrant kind runs under
    `CheckpointFunctionBackward`). Their kernels' FLOPs are hardware FLOPs, not model FLOPs:
    the report's MFU counts each forward once and gives the hardware FLOPs utilisation
    beside it.

    ## Why it matters
    Checkpointing trades compute for memory: each checkpointed block's forward runs twice, a
    third more matrix work per step and the host work of a second forward. Where the memory
    is there, the trade buys nothing.

    ## How to fix
    Checkpoint less: only the blocks that need it (every other block), or only the cheap,
    memory-heavy parts (selective activation checkpointing:
    `torch.utils.checkpoint.create_selective_checkpoint_contexts` with a policy that saves the
    matmuls), or none where the memory allows (the evidence gives the step's peak where the
    trace recorded memory). A compiled model can let the compiler choose what to recompute
    (`torch._functorch.config.activation_memory_budget`).

    ## Known false positives
    Checkpointing a model that does not fit otherwise: the finding prices the recompute, but
    removing it needs the memory first. A hand-written backward that calls forward operators
    on purpose.

    A compiled backward (`CompiledFunctionBackward`) recomputes inside its own graph, where
    no forward operator shows: there the recompute is read from the GEMM FLOPs, the
    backward's at least 2.25 times the forward's (a plain backward runs 2x: the gradients of
    the inputs and of the weights; a full recompute 3x). Its FLOPs (`backward - 2 x
    forward`) leave the model FLOPs, and its kernels' time is that share of the forward's.

    ## Impact estimate
    The larger of the recompute's host side (the GPU idle under the recomputed operators, as
    for any host-side cause) and its GPU side (its kernels' time, scaled by the share of the
    kernel time that bounds the step), at most its host and kernel time together
    (analyses/causes/impact.py). On an
    H200 GPT step this priced 5.7 ms; no checkpointing saved 7.3 ms without the profiler.
    """

    code = "TA019"
    slug = "activation-recompute"
    title = "Activation checkpointing: the forward recomputed in the backward"
    category = "activation_recompute"
    default_severity = Severity.WARNING
    advice = (
        "Checkpoint less: only the blocks that need it, or selective activation checkpointing "
        "(torch.utils.checkpoint.create_selective_checkpoint_contexts, saving the matmuls), "
        "or none where the memory allows."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_ops_per_step: float = field(
            default=1.0, metadata={"help": "recomputed forward operators per steady step"}
        )

    example_bad: ClassVar[list[Event]] = [*_step(1, 100, True), *_step(2, 1100, True)]
    example_good: ClassVar[list[Event]] = [*_step(1, 100, False), *_step(2, 1100, False)]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        redone = {
            (r["rank"], r["device"]): r for r in ctx.metrics.causes.recompute.iter_rows(named=True)
        }
        for rank, m in models(ctx, "recompute").items():
            r = redone.get((rank, m.device)) or {}
            compiled = r.get("flops_ratio") is not None
            if not compiled and (m.calls_per_step < t.min_ops_per_step or m.every_step_share < 0.5):
                continue
            steps = m.steps or 1
            flops = next(
                (
                    f
                    for f in ctx.metrics.flops.devices.iter_rows(named=True)
                    if (f["rank"], f["device"]) == (rank, m.device)
                ),
                None,
            )
            mfu = ""
            if flops and flops["mfu"] is not None and flops["hfu"] is not None:
                mfu = (
                    f"; {flops['mfu']:.0%} MFU counting each forward once, "
                    f"{flops['hfu']:.0%} of the hardware's FLOPs"
                )
            peak = _peak_words(ctx, rank, m.device)
            host_side = m.explained_ns >= m.unrecorded_ns
            what = (
                f"the compiled backward runs {r['flops_ratio']:.2f} times the forward's GEMM "
                f"FLOPs (2 without a recompute): it recomputes "
                f"{r['flops_ratio'] - 2:.0%} of the forward, about "
                f"{duration((r.get('kernel_ns') or 0) // steps)} of kernels per step"
                if compiled
                else f"{m.calls_per_step:.0f} forward operators per step run again in "
                f"the backward (most time in {r.get('top_op') or 'them'}): "
                f"{duration(m.work_ns)} of host time, {duration(m.explained_ns)} of GPU "
                f"{m.device} idle under it, {duration((r.get('kernel_ns') or 0) // steps)} of "
                f"kernels per step"
            )
            yield self.finding(
                ctx,
                f"rank {rank}: {what}{mfu}{peak}",
                {
                    "backward_gemm_flops_ratio": r.get("flops_ratio"),
                    "ops_per_step": m.calls_per_step,
                    "host_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "kernel_ns_per_step": (r.get("kernel_ns") or 0) // steps,
                    "gemm_ns_per_step": (r.get("gemm_ns") or 0) // steps,
                    "top_op": r.get("top_op"),
                    "mfu": flops["mfu"] if flops else None,
                    "hfu": flops["hfu"] if flops else None,
                    "explains": ["TA001", "TA003"] if host_side else [],
                    "bound_by": "host" if host_side else "gpu_compute",
                    "cause_words": "activation checkpointing recomputes the forward",
                    "threshold_ops_per_step": t.min_ops_per_step,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )


def _peak_words(ctx: Context, rank: int, device: int) -> str:
    """ "; peak 1.9 of 141 GiB allocated" where the trace recorded memory."""
    peaks = [
        p["peak_bytes"]
        for p in ctx.metrics.memory.peaks.iter_rows(named=True)
        if (p["rank"], p["device"]) == (rank, device)
    ]
    total = next(
        (d.memory_bytes for d in ctx.meta.devices if (d.rank, d.device) == (rank, device)), None
    )
    if not peaks or not total:
        return ""
    return f"; peak {max(peaks) / 2**30:.1f} of {total / 2**30:.0f} GiB allocated"
