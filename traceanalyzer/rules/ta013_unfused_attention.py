"""TA013: attention written by hand, one kernel per step of it, where a fused kernel would do."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from traceanalyzer.analyses.gpu.attention import fused_flops, fused_rate
from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, cpu_op, kernel, launch, step

_BF16 = ["c10::BFloat16", "c10::BFloat16"]


def _op_and_kernel(
    ts: float, dur: float, op: str, dims: list[list[int]], corr: int, name: str
) -> list[Event]:
    """An operator with recorded shapes, its launch and its kernel (External id = corr)."""
    return [
        cpu_op(ts, 6, op, **{"External id": corr, "Input Dims": dims, "Input type": _BF16}),
        launch(ts + 1, 2, corr),
        kernel(ts + 10, dur, name, corr=corr),
    ]


class UnfusedAttention(Rule):
    """Attention computed by hand: Q·Kᵀ, scale, mask, softmax and P·V as separate kernels.

    ## What it detects
    Attention written out in operators (`q @ k.transpose(-2, -1) * scale`, a mask, `softmax`,
    `@ v`) where no fused attention kernel runs: the trace's softmaxes over n x T x S score
    tensors (batch x heads x queries x keys, T and S of 128 or more) made by a batched Q·Kᵀ
    product, and every operator that makes or reads such a tensor, forward and backward
    (analyses/gpu/attention.py; needs `record_shapes=True`). It fires when those kernels take
    at least `min_share` of the step and no FlashAttention, memory-efficient or cuDNN attention
    kernel runs on the device.

    ## Why it matters
    Each of those kernels writes and reads a T x S tensor per head from memory: at T = 2048
    that is 4 M elements per head and kernel, many times the work's own inputs, and the
    softmax, mask and dropout kernels are memory-bound. A fused kernel (FlashAttention) keeps
    the scores in on-chip memory and never writes them: the same attention runs several times
    faster, and its memory does not grow with T².

    ## How to fix
    `torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)` instead of an
    explicit mask and softmax (PyTorch picks FlashAttention, memory-efficient or cuDNN
    attention); or FlashAttention itself. What keeps SDPA off the fast path: an arbitrary
    float mask (use `is_causal=True`, or a boolean mask), fp32 inputs (use bf16/fp16 under
    autocast), a head size the kernels do not take (over 256, or not a multiple of 8), and
    dropout on the attention weights with some backends.

    ## Known false positives
    A softmax over score-shaped tensors that is not attention but is fed by a batched product
    of the same shape; attention that runs a custom fused kernel this tool does not recognise
    by name (it then also counts that kernel's time).

    ## Impact estimate
    The attention kernels' time per step less what a fused kernel needs for the same work:
    4·n·T·S·D FLOPs per forward attention (2.5 times that for its backward, half of both
    where a mask makes it causal: a fused kernel skips the masked half), at
    `FUSED_SHARE_OF_GEMM` (60 %) of the rate this trace's GEMMs reach (or 40 % of the GPU's
    dense 16-bit peak without one). No price where neither is known.
    """

    code = "TA013"
    slug = "unfused-attention"
    title = "Attention computed by hand: no fused attention kernel"
    category = "unfused_attention"
    claims = "attention_kernels"
    default_severity = Severity.WARNING
    advice = (
        "Use torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) instead "
        "of an explicit mask and softmax (FlashAttention, memory-efficient or cuDNN attention); "
        "keep it on the fast path: is_causal or a boolean mask rather than a float mask, "
        "bf16/fp16 inputs, a head size up to 256 and a multiple of 8."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_share: float = field(
            default=0.05,
            metadata={"help": "the attention kernels' time as a share of the step, to trigger"},
        )

    # Q·Kᵀ over 8 heads x 256 x 256, a softmax and P·V, each its own kernel
    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 400),
        *_op_and_kernel(105, 40, "aten::bmm", [[8, 256, 64], [8, 64, 256]], 1, "sm90_gemm_bf16"),
        *_op_and_kernel(
            160, 60, "aten::_softmax", [[8, 256, 256], [], []], 2, "softmax_warp_forward"
        ),
        *_op_and_kernel(230, 40, "aten::bmm", [[8, 256, 256], [8, 256, 64]], 3, "sm90_gemm_bf16"),
    ]
    # the same attention as one FlashAttention kernel
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 400),
        *_op_and_kernel(
            105,
            40,
            "aten::_flash_attention_forward",
            [[1, 256, 8, 64], [1, 256, 8, 64], [1, 256, 8, 64]],
            1,
            "flash_fwd_kernel",
        ),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        att = ctx.metrics.attention.unfused
        if att.height == 0:
            return
        rates = {
            (r["rank"], r["device"]): r for r in ctx.metrics.flops.devices.iter_rows(named=True)
        }
        per_device: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for row in att.iter_rows(named=True):
            per_device.setdefault((row["rank"], row["device"]), []).append(row)
        for (rank, device), rows in sorted(per_device.items()):
            if any(r["fused_ns"] for r in rows):
                continue  # the fast path runs: the hand-written part is something else
            steps = ctx.steps_on(rank, device)
            step_ns = ctx.step_of(rank)
            kernel_ns = sum(r["kernel_ns"] for r in rows)
            if not steps or not step_ns or kernel_ns / steps < t.min_share * step_ns:
                continue
            top = max(rows, key=lambda r: r["kernel_ns"])
            flops = fused_flops(rows)
            rate, basis = fused_rate(rates.get((rank, device)))
            impact = None
            fused_ns = None
            if rate:
                fused_ns = round(flops / rate * 1e-3 / steps)  # TFLOP/s = 1e3 FLOP/ns
                impact = max(0, kernel_ns // steps - fused_ns)
            yield self.finding(
                ctx,
                f"rank {rank} GPU {device}: attention over {top['n']} x {top['t']} x "
                f"{top['s']} score tensors (head size {top['d']}) runs as "
                f"{sum(r['ops'] for r in rows) // steps} operators' kernels per step, "
                f"{kernel_ns / steps / 1e6:.2f} ms per step "
                f"({kernel_ns / steps / step_ns:.0%} of it), with no fused attention kernel"
                + (
                    f"; a fused kernel would need about {fused_ns / 1e6:.2f} ms ({basis})"
                    if fused_ns is not None
                    else ""
                ),
                {
                    "kernel_ns_per_step": kernel_ns // steps,
                    "ops_per_step": sum(r["ops"] for r in rows) // steps,
                    "shapes": [
                        {k: r[k] for k in ("n", "t", "s", "d", "causal", "backward", "calls")}
                        for r in rows
                    ],
                    "fused_flops_per_step": flops / steps,
                    "fused_ns_per_step": fused_ns,
                    "fused_rate_tflops": rate,
                    "fused_rate_basis": basis,
                    "threshold_share": t.min_share,
                },
                Scope(rank, device),
                impact,
                ceiling_ns=kernel_ns // steps,
            )
