"""TA010: a large share of kernel time in copy and cast kernels."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.analyses.gpu.casts import SOURCES, CastSources
from traceanalyzer.rules import advice as advise
from traceanalyzer.rules.base import Context, Finding, Rule, Severity
from traceanalyzer.rules.examples import Event, cpu_op, launched, step

_CAST = "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda>"
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def _weight_cast(cast_us: float) -> list[Event]:
    """Inference under bf16 autocast with fp32 weights: `aten::linear` casts its fp32 weight
    to bf16 (`aten::copy_`, the cast kernel) before its GEMM."""
    linear = {
        "External id": 1000,
        "Input Dims": [[512, 1024], [4096, 1024], [4096]],
        "Input type": ["float", "float", "float"],
    }
    copy = {
        "External id": 1,
        "Input Dims": [[4096, 1024], [4096, 1024], []],
        "Input type": ["c10::BFloat16", "float", "Scalar"],
    }
    return [
        step(1, 100, 20),
        cpu_op(104, 10, "aten::linear", **linear),
        cpu_op(104.5, 3, "aten::copy_", **copy),
        *launched(105, 110, cast_us, 1, _CAST),
        *launched(110, 110 + cast_us, 200, 2, _GEMM),
    ]


class DtypeCasts(Rule):
    """Copy and dtype-cast kernels take a large share of GPU time, and a named fix removes
    part of it.

    ## What it detects
    The share of compute kernel time (communication left out) in the `copy_cast` class:
    dtype casts (`bfloat16_copy_kernel`, `direct_copy_kernel`), `.contiguous()` copies,
    `torch.cat`, transposes and permutes, (de)quantisation. Each copy/cast kernel is traced
    to the operator that launched it (analyses/gpu/casts.py) and given a source: autocast
    casting fp32 weights to 16 bits under `aten::linear`/matmul/convolution and autograd
    casting their gradients back (`ToCopyBackward`); autocast casting fp32 activations into
    those operators; the logits' upcast before the loss (`.float()` or autocast's for
    `cross_entropy`); DDP's copies of its buckets into the gradients (with the memcpys DDP
    launches for them); other. The finding is a
    warning where the named fixes save at least `min_saving_share` of the step, else info.

    ## Why it matters
    Casts and copies do no useful math: they read and write whole tensors. Under
    `torch.autocast` with fp32 parameters every weight is cast to 16 bits in every forward
    pass and its gradient back to fp32 in every backward pass, and activations that stay in
    fp32 (the residual stream of an fp32 model) are cast into every matmul; under gradient
    accumulation this repeats for each micro-batch. That is the cost of keeping fp32 weights:
    the usual fix, bf16 parameters with an fp32 master copy in the optimizer, pays one cast of
    each parameter and of its gradient per optimizer step instead. With one micro-batch per
    step the two nearly cancel for the weights themselves, which is why healthy autocast
    training gets no warning for them.

    ## How to fix
    Train with bf16 parameters (`model.to(torch.bfloat16)`) and an fp32 master copy in the
    optimizer (or FSDP `MixedPrecision(param_dtype=torch.bfloat16)`); in inference, keep the
    weights in bf16. Compute the loss on the bf16 logits (`F.cross_entropy` accumulates in
    fp32) or with a fused linear-cross-entropy instead of `logits.float()`. Give DDP
    `gradient_as_bucket_view=True`. Let `torch.compile` fuse the remaining layout copies and
    casts into their producers and consumers.

    ## Known false positives
    Copies the algorithm needs (concatenating KV caches, gathering embeddings), and the
    kernel-name heuristics: a kernel whose name contains `copy` or `cast` is counted here
    even if it does more. Sources rest on recorded shapes (`record_shapes=True`): without
    them every kernel is `other` and the finding is info. A weight is recognised by its shape
    matching the operator's weight or bias input; an activation whose shape is the weight's
    would be taken for one. bf16 parameters in fp16 are not safe without loss scaling.

    ## Impact estimate
    What the named fixes remove per steady step, each the time of its kernels per step
    (worst device) scaled by the share of copy/cast time on the critical path: autocast's
    weight, weight-gradient and activation casts, less the fp32 master copy the fix adds
    (estimated as twice one forward pass's weight casts per optimizer step; none in
    inference); the logits' upcast and its gradient's cast back; DDP's bucket copies (copy
    kernels, and the device-to-device memcpys launched in `reducer::copy_bucket_to_grad`,
    which are no cast kernels: their exposed time, while no other GPU work of the device
    runs, unscaled and added to the ceiling; on a recorded 2-GPU DDP job, 0.89 ms measured). bf16
    parameters also halve the traffic autocast leaves in fp32: the memory-bound kernels
    (norms, residual adds, their backward and fp32 gradient accumulation) launched by an
    operator with an fp32 tensor input outside the optimizer and the loss, where weights are
    cast; their saving is the critical path's what-if that halves the memory-bound kernels,
    scaled to these kernels' share of the memory-bound time (half their time without a
    path). These kernels are memory-bound kernels that TA004 may price as well: the two
    prices are alternatives over that time. Measured on recorded GPT pairs (fp32 weights
    under autocast vs bf16 parameters with an fp32 master copy, timed without the
    profiler): 1.82 ms priced for a 1.97 ms saving, and 30.5 ms for 26.3 ms under four
    micro-batches. The copy/cast time on the critical path, the bucket memcpys and the fp32
    memory-bound kernels' time are the ceiling.
    """

    code = "TA010"
    slug = "dtype-casts"
    title = "Much kernel time in copy and dtype-cast kernels"
    category = "dtype_casts"
    advice_neutral = (
        "Convert between precisions less: keep tensors in the precision the kernels use, and fuse "
        "the conversions into the kernels that produce or consume them."
    )
    claims = "cast_kernels"
    default_severity = Severity.WARNING
    advice = (
        "Train with bf16 parameters and an fp32 master copy in the optimizer instead of fp32 "
        "weights under autocast, compute the loss on bf16 logits, give DDP "
        "gradient_as_bucket_view=True, and torch.compile to fuse the remaining casts."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_copy_cast_share: float = field(
            default=0.10,
            metadata={"help": "copy/cast kernel time as a share of compute (non-comm) time"},
        )
        min_saving_share: float = field(
            default=0.03,
            metadata={
                "help": "what the named fixes save, as a share of the steady step, for a "
                "warning (below it the finding is info; as the impact policy's warning share)"
            },
        )

    example_bad: ClassVar[list[Event]] = _weight_cast(100)
    example_good: ClassVar[list[Event]] = _weight_cast(10)

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        c = ctx.metrics.cast_model
        casts, count, compute = c.copy_cast_ns, c.copy_cast_count, c.compute_ns
        if not compute or casts / compute < t.min_copy_cast_share:
            return
        s = ctx.metrics.cast_sources
        half = "fp16" if ctx.run.get("amp_dtype") == "float16" else "bf16"
        fixes = _fixes(s, half)
        named = s.impact_ns
        step_ns = ctx.step_of(s.rank) if s.rank is not None else None
        warn = bool(named and fixes and (not step_ns or named >= t.min_saving_share * step_ns))
        head = (
            f"{casts / compute:.0%} of compute kernel time "
            f"({casts / 1e6:.2f} ms in {count} kernels) is copies and dtype casts"
        )
        if warn:
            priced = "; ".join(f"{_ms(ns)} {what}" for _fix, what, ns in fixes)
            message = f"{head}; named fixes save {_ms(named)} per step: {priced}"
        else:
            message = f"{head}; no named fix removes much of it" + (
                f" ({_ms(named)} per step)" if named else ""
            )
        yield self.finding(
            ctx,
            message,
            {
                "copy_cast_ns": casts,
                "copy_cast_count": count,
                "compute_kernel_ns": compute,
                "copy_cast_share": casts / compute,
                "top_kernels": list(c.top_kernels[:3]),
                "threshold_share": t.min_copy_cast_share,
                "sources_per_step_ns": {k: s.by_source.get(k, 0) for k in SOURCES},
                "fixes_ns": {
                    "bf16_params": s.bf16_params_ns,
                    "logits_upcast": s.logits_ns,
                    "ddp_bucket_view": s.ddp_bucket_ns,
                },
                "master_copy_ns": s.master_copy_ns,
                "fp32_traffic_ns": s.fp32_traffic_ns,
                "fp32_traffic_saving_ns": s.fp32_saving_ns,
                "ddp_bucket_memcpy_ns": s.ddp_memcpy_ns,
                "forward_passes_per_step": s.pass_count,
                "path_share": s.path_share,
                "threshold_saving_share": t.min_saving_share,
            },
            None,
            named,
            _named_advice(s, fixes, half) if warn else _advice(ctx),
            ceiling_ns=s.ceiling_ns,
            severity=None if warn else Severity.INFO,
        )


def _ms(ns: int | None) -> str:
    return f"{(ns or 0) / 1e6:.2f} ms"


def _fixes(s: CastSources, half: str) -> list[tuple[str, str, int]]:
    """The named fixes that save time, most first: (fix, what it removes, ns per step)."""
    out = []
    if s.bf16_params_ns:
        passes = f" in {s.pass_count} forward passes" if (s.pass_count or 1) > 1 else ""
        removed = (s.weights_ns or 0) + (s.activations_ns or 0)
        net = f", less the {_ms(s.master_copy_ns)} master copy" if s.master_copy_ns else ""
        parts = []
        if removed or net:
            parts.append(
                f"autocast's casts of fp32 weights and activations, {_ms(removed)}{passes}{net}"
                if s.training
                else f"autocast's casts of fp32 weights and activations{passes}"
            )
        if s.fp32_saving_ns:
            parts.append(
                f"{_ms(s.fp32_saving_ns)} of the {_ms(s.fp32_traffic_ns)} of memory-bound "
                "kernels autocast leaves in fp32"
            )
        what = (
            f"{half} parameters with an fp32 master copy" if s.training else f"{half} weights"
        ) + (f" ({'; and '.join(parts)})" if parts else "")
        out.append(("bf16_params", what, s.bf16_params_ns))
    if s.logits_ns:
        out.append(("logits_upcast", f"the loss on {half} logits (their upcast)", s.logits_ns))
    if s.ddp_bucket_ns:
        out.append(
            ("ddp_bucket_view", "gradient_as_bucket_view (DDP's bucket copies)", s.ddp_bucket_ns)
        )
    return sorted(out, key=lambda f: -f[2])


def _named_advice(s: CastSources, fixes: list[tuple[str, str, int]], half: str) -> str:
    torch_dtype = "torch.float16" if half == "fp16" else "torch.bfloat16"
    text = {
        "bf16_params": (
            f"train with {half} parameters and an fp32 master copy in the optimizer (one cast "
            "of each weight and gradient per optimizer step instead of autocast's in every "
            "pass" + (", with loss scaling)" if half == "fp16" else ")")
            if s.training
            else f"keep the weights in {half} (model.to({torch_dtype})): without an optimizer "
            "no master copy is needed"
        ),
        "logits_upcast": (
            f"compute the loss on the {half} logits (F.cross_entropy accumulates in fp32) or "
            "with a fused linear-cross-entropy instead of logits.float()"
        ),
        "ddp_bucket_view": "give DDP gradient_as_bucket_view=True",
    }
    first, *rest = [text[f] for f, _what, _ns in fixes]
    said = first[0].upper() + first[1:]
    if rest:
        said += "; " + "; ".join(rest)
    return said + "."


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
