"""TA010: a large share of kernel time in copy and cast kernels."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules import advice as advise
from traceanalyzer.rules.base import Context, Finding, Rule, Severity
from traceanalyzer.rules.examples import Event, launched, step

_CAST = "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda>"
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


class DtypeCasts(Rule):
    """Copy and dtype-cast kernels take a large share of GPU time.

    ## What it detects
    The share of compute kernel time (communication left out) in the `copy_cast` class:
    dtype casts (`bfloat16_copy_kernel`, `direct_copy_kernel`), `.contiguous()` copies,
    `torch.cat`, transposes and permutes, (de)quantisation. The evidence names the top
    copy/cast kernels among the trace's top kernels.

    ## Why it matters
    Casts and copies do no useful math: they read and write whole tensors. Under
    `torch.autocast` every FP32 weight is cast to 16-bit on every use, every step, and
    outputs often go back to FP32 (the loss, the logits). At small batch sizes that traffic
    can rival the matmuls themselves.

    ## How to fix
    Keep weights in bf16 where it is numerically safe (bf16 parameters with an FP32 master
    copy in the optimizer, or FSDP `MixedPrecision(param_dtype=torch.bfloat16)`), leave
    autocast's weight-cast cache on, avoid `.float()` round trips, avoid `.contiguous()` after
    permutes the next op accepts anyway, and let `torch.compile` fuse casts into their
    producers and consumers.

    ## Known false positives
    Copies the algorithm needs (concatenating KV caches, gathering embeddings), and the
    kernel-name heuristics: a kernel whose name contains `copy` or `cast` is counted here
    even if it does more.

    ## Impact estimate
    The copy/cast kernel time on the critical path per step (mean over steps, worst rank):
    an honest upper bound, since removing the casts cannot save more than they take on the
    path. Where host time bounds the step, it is near zero.
    """

    code = "TA010"
    slug = "dtype-casts"
    title = "Much kernel time in copy and dtype-cast kernels"
    category = "dtype_casts"
    claims = "cast_kernels"
    default_severity = Severity.WARNING
    advice = (
        "Cut casts and copies: keep weights in bf16 where safe (FP32 master copy in the "
        "optimizer), keep autocast's cast cache, avoid .float()/.contiguous() round trips, "
        "torch.compile to fuse casts."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_copy_cast_share: float = field(
            default=0.10,
            metadata={"help": "copy/cast kernel time as a share of compute (non-comm) time"},
        )

    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 100, 1, _CAST),
        *launched(110, 210, 200, 2, _GEMM),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 10, 1, _CAST),
        *launched(110, 120, 300, 2, _GEMM),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        c = ctx.metrics.cast_model
        casts, count, compute = c.copy_cast_ns, c.copy_cast_count, c.compute_ns
        if not compute or casts / compute < t.min_copy_cast_share:
            return
        yield self.finding(
            ctx,
            f"{casts / compute:.0%} of compute kernel time "
            f"({casts / 1e6:.2f} ms in {count} kernels) is copies and dtype casts",
            {
                "copy_cast_ns": casts,
                "copy_cast_count": count,
                "compute_kernel_ns": compute,
                "copy_cast_share": casts / compute,
                "top_kernels": list(c.top_kernels[:3]),
                "threshold_share": t.min_copy_cast_share,
            },
            None,
            c.impact_ns,
            _advice(ctx),
            ceiling_ns=c.ceiling_ns,
        )


def _advice(ctx: Context) -> str | None:
    if ctx.meta.devices and all(
        advise.arch(ctx, d.rank, d.device) == "volta_turing" for d in ctx.meta.devices
    ):
        return (
            "Cut casts and copies: this GPU (Volta/Turing) has no bf16, so keep fp16 copies of "
            "the weights under autocast with its cast cache on, avoid .float()/.contiguous() "
            "round trips, and fuse the rest with torch.compile."
        )
    half = "fp16" if ctx.run.get("amp_dtype") == "float16" else "bf16"
    if ctx.uses("cuda_graphs"):
        return (
            "Graph replays re-run every cast they captured (autocast's cast cache is off under "
            f"capture): keep {half} copies of the weights (cast once after each optimizer step, "
            f"or train in {half} with an FP32 master copy), and fuse the rest with torch.compile."
        )
    if half == "fp16":
        return (
            "Cut casts and copies: keep autocast's cast cache, avoid .float()/.contiguous() "
            "round trips, fuse layout copies and casts with torch.compile (fp16 weights need "
            "an FP32 master copy and loss scaling)."
        )
    return None
