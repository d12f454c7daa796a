"""TA004: kernel time dominated by memory-bandwidth-bound kernels."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.rules import advice as advise
from traceanalyzer.rules.base import Context, Finding, Rule, Severity
from traceanalyzer.rules.examples import Event, launched, step

_POINTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>"
_NORM = "void at::native::layer_norm_kernel<float>"


class MemoryBound(Rule):
    """Most GPU compute time goes to memory-bandwidth-bound kernels.

    ## What it detects
    The share of compute kernel time (communication kernels left out) spent in the
    `memory_bound` class: pointwise/elementwise, normalisation, softmax, reductions,
    optimizer `multi_tensor_apply`, embedding and index kernels. Copy and cast kernels are
    reported by TA010. Where the trace records operator shapes (`record_shapes=True`), the
    evidence lists the top operators' achieved bandwidth and its share of the GPU's peak.

    ## Why it matters
    These kernels do under one FLOP per byte: their speed is set by memory bandwidth, not by
    the Tensor Cores. A step dominated by them uses a small part of the GPU's compute, and
    each separate kernel reads and writes its tensors from HBM again. An operator near 100 %
    of peak bandwidth cannot get faster on its own; only doing fewer passes over memory helps.

    ## How to fix
    Fuse: `torch.compile` fuses chains of pointwise and reduction ops into single kernels;
    use fused optimizers (`torch.optim.AdamW(fused=True)`), fused layer norm / RMSNorm,
    FlashAttention (`scaled_dot_product_attention`) instead of an explicit softmax; keep
    activations in 16-bit to halve the bytes moved.

    ## Known false positives
    Small models and small batches are memory-bound by nature; so are embedding-heavy models
    (recommenders). The share alone does not say the time matters: the impact does.

    ## Impact estimate
    The critical path's `memory_bound_2x` what-if: memory-bound kernels twice as fast, as
    fusion that halves their memory traffic would make them. Where host time bounds the step,
    the saving is small however large the share.
    """

    code = "TA004"
    slug = "memory-bound"
    title = "Memory-bandwidth bound: most kernel time in pointwise/normalisation kernels"
    category = "memory_bound"
    default_severity = Severity.WARNING
    advice = (
        "Fuse memory-bound ops: torch.compile, fused optimizers (fused=True), fused norms, "
        "FlashAttention via scaled_dot_product_attention; keep activations in 16-bit."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_memory_bound_share: float = field(
            default=0.50,
            metadata={
                "help": "memory-bound kernel time as a share of compute (non-comm) kernel time"
            },
        )
        top_operators: int = field(
            default=3, metadata={"help": "operators listed with their achieved bandwidth"}
        )

    # the host queues the step's work in 20 µs; the GPU then runs it back to back
    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 40, 1, "sm90_xmma_gemm_bf16bf16_bf16f32"),
        *launched(110, 150, 150, 2, _POINTWISE),
        *launched(115, 300, 150, 3, _NORM),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 300, 1, "sm90_xmma_gemm_bf16bf16_bf16f32"),
        *launched(110, 410, 40, 2, _POINTWISE),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        classes = {r["kernel_class"]: r["total_ns"] for r in ctx.metrics.kernel_classes.to_dicts()}
        compute = sum(ns for c, ns in classes.items() if c != "comm")
        bound = classes.get("memory_bound", 0)
        if not compute or bound / compute < t.min_memory_bound_share:
            return
        top = _top_operators(ctx.metrics.bandwidth, t.top_operators)
        seen = "; ".join(
            f"{o['op_name']} {o['gbps']:.0f} GB/s"
            + (f" ({o['share_of_peak']:.0%} of peak)" if o["share_of_peak"] is not None else "")
            for o in top
        )
        yield self.finding(
            ctx,
            f"{bound / compute:.0%} of compute kernel time ({bound / 1e6:.2f} ms) is in "
            f"memory-bound kernels; copy/cast kernels add "
            f"{classes.get('copy_cast', 0) / compute:.0%}"
            + (f"; top operators: {seen}" if seen else ""),
            {
                "memory_bound_ns": bound,
                "compute_kernel_ns": compute,
                "memory_bound_share": bound / compute,
                "copy_cast_share": classes.get("copy_cast", 0) / compute,
                "operators": top,
                "threshold_share": t.min_memory_bound_share,
            },
            None,
            _impact(ctx, bound),
            advise.fusion(ctx),
        )


def _top_operators(bandwidth: pl.DataFrame, n: int) -> list[dict[str, Any]]:
    """The memory-bound operators with the most kernel time (the analysis sorts them)."""
    cols = ["rank", "device", "op_name", "ops", "kernel_ns", "gbps", "share_of_peak"]
    return bandwidth.head(n).select(cols).to_dicts()


def _impact(ctx: Context, bound_ns: int) -> int | None:
    """The critical path's `memory_bound_2x` what-if; without a critical path (no step
    markers), half the memory-bound kernel time per step (the window counts as one)."""
    saving = ctx.saving(None, "memory_bound_2x")
    if saving is not None or ctx.metrics.basis == "steps":
        return saving
    return bound_ns // 2
