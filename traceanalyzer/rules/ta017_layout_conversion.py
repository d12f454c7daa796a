"""TA017: convolutions in NCHW pay layout transposes around every call."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, launch, step

_T = "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16>"
_B = "void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16>"
_CONV = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc"


def _conv(ts: float, gpu_ts: float, corr: int, transposes: bool) -> list[Event]:
    """One convolution operator launched at `ts` and its kernels from `gpu_ts` on, back to
    back (with the transposes around it, or not): the GPU is the bottleneck."""
    names = [_T, _CONV, _B] if transposes else [_CONV]
    out: list[Event] = [cpu_op(ts, 40, "aten::cudnn_convolution", **{"External id": corr})]
    for i, name in enumerate(names):
        c = corr * 10 + i
        out.append(launch(ts + 2 + 10 * i, 5, c))
        out[-1]["args"]["External id"] = corr
        kernel_ts = gpu_ts + 90 * i
        out.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": kernel_ts,
                "dur": 90,
                "args": {"device": 0, "stream": 7, "correlation": c, "External id": corr},
            }
        )
    return out


class LayoutConversion(Rule):
    """Convolutions run in NCHW: cuDNN transposes to NHWC and back around each of them.

    ## What it detects
    cuDNN's layout-transposing kernels (`nchwToNhwcKernel`, `nhwcToNchwKernel`,
    `convertTensor_kernel` in older cuDNN, MIOpen's `batched_transpose`) launched by
    convolution operators, forward and backward, taking at least `min_kernel_share` of the
    kernel time. On Tensor Cores cuDNN's fast convolutions work in NHWC (channels-last): a
    network kept in PyTorch's default NCHW layout pays two transposes per convolution.

    ## Why it matters
    The transposes read and write every activation and gradient once more and compute
    nothing: memory-bound kernels that grow with the activations, often a fifth of a CNN's
    kernel time under bf16 or fp16.

    ## How to fix
    Convert the model and its inputs to channels-last once:
    `model = model.to(memory_format=torch.channels_last)` and
    `x = x.to(memory_format=torch.channels_last)` for each batch (torch.compile and autocast
    keep the layout). cuDNN then runs the same convolutions without the transposes.

    ## Known false positives
    Networks where channels-last does not help: FP32 convolutions on GPUs without Tensor
    Cores for them (cuDNN then runs NCHW kernels and inserts no transposes, so no finding),
    or networks with depthwise convolutions: PyTorch runs those on kernels of its own in NCHW,
    and in channels-last they can get slower than the transposes save (a network of every
    kind of convolution ran 2.8 ms per step slower in channels-last, tests/data/gpu/README.md,
    `conv_train`). Where depthwise kernels take more than `max_depthwise_share` of the
    transposes' time, no finding.

    ## Impact estimate
    The GPU time channels-last removes per steady step: the transposes, and the part of batch
    normalisation's NCHW kernels that its channels-last kernels do not need (they took 0.43 of
    the time on an H200 ResNet), scaled by the share of the GPU's kernel time that bounds the
    step (the critical path's `gpu_compute_2x` what-if, doubled, over the
    kernel time per step: 1 for a GPU-bound step, less where the host bounds it); at most
    their time (analyses/causes/impact.py).
    """

    code = "TA017"
    slug = "layout-conversion"
    title = "NCHW convolutions: layout transposes around every convolution"
    category = "layout_conversion"
    default_severity = Severity.WARNING
    advice = (
        "Use channels-last: model.to(memory_format=torch.channels_last) and "
        "x.to(memory_format=torch.channels_last) for the inputs; cuDNN then skips the "
        "transposes."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_kernel_share: float = field(
            default=0.02, metadata={"help": "transposes' share of the kernel time that triggers it"}
        )
        max_depthwise_share: float = field(
            default=0.25,
            metadata={
                "help": "depthwise convolutions' NCHW kernel time over the transposes' time "
                "above which channels-last is not advised (it can be slower)"
            },
        )

    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 150),
        *_conv(110, 115, 1, True),
        *_conv(160, 385, 2, True),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 150),
        *_conv(110, 115, 1, False),
        *_conv(160, 385, 2, False),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        rows = {
            (r["rank"], r["device"]): r for r in ctx.metrics.causes.layout.iter_rows(named=True)
        }
        for rank, m in models(ctx, "layout").items():
            r = rows[(rank, m.device)]
            share = r["transpose_ns"] / r["kernel_ns"] if r["kernel_ns"] else 0.0
            if share < t.min_kernel_share:
                continue
            if r["depthwise_ns"] > t.max_depthwise_share * r["transpose_ns"]:
                continue  # channels-last may slow the depthwise convolutions more than it saves
            yield self.finding(
                ctx,
                f"rank {rank} GPU {m.device}: {m.calls_per_step:.0f} layout transposes per step "
                f"around the convolutions (most under {r['top_op']}), "
                f"{duration(r['transpose_ns'] // (m.steps or 1))} per step, {share:.0%} of kernel "
                "time"
                + (
                    f", and {duration(r['nchw_norm_ns'] // (m.steps or 1))} of batch norm in "
                    "its slower NCHW kernels"
                    if r["nchw_norm_ns"]
                    else ""
                )
                + f": channels-last removes {duration(m.work_ns)} of GPU time per step",
                {
                    "transposes_per_step": m.calls_per_step,
                    "transpose_ns_per_step": r["transpose_ns"] // (m.steps or 1),
                    "nchw_norm_ns_per_step": r["nchw_norm_ns"] // (m.steps or 1),
                    "gpu_ns_removed_per_step": m.work_ns,
                    "kernel_share": share,
                    "conv_ns": r["conv_ns"],
                    "top_kernel": r["top_kernel"],
                    "top_op": r["top_op"],
                    "conv_dtype": r["conv_dtype"],
                    "explains": ["TA004", "TA010"],
                    "bound_by": "gpu_compute",
                    "cause_words": "convolutions in NCHW pay layout transposes",
                    "threshold_share": t.min_kernel_share,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )
