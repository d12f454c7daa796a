"""TA028: direct copies (pinned, device to device, peer to peer) hold the GPU."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration
from traceanalyzer.rules.examples import Event, gpu_op, launch, launched, step


def _copies_then_kernel(copy_us: float) -> list[Event]:
    """A step: a pinned host-to-device copy of `copy_us`, then a 100 µs kernel after it."""
    return [
        step(1, 100, copy_us + 200),
        launch(102, 3, 2, name="cudaMemcpyAsync"),
        gpu_op(
            "gpu_memcpy",
            105,
            copy_us,
            "Memcpy HtoD (Pinned -> Device)",
            stream=8,
            corr=2,
            bytes=round(copy_us * 50_000),
        ),
        *launched(110, 110 + copy_us, 100, 1, "k(float*)"),
    ]


class CopyBound(Rule):
    """Direct copies hold the GPU: it is busy moving data, not computing.

    ## What it detects
    A device whose busy time is mostly copies (its busy time without a kernel over half of
    it) whose copies are direct: pinned host memory, device to device, peer to peer (copies
    to or from pageable memory are TA009's, managed-memory migrations TA027's). The copies
    run at the link's speed already: pinning would change nothing.

    ## Why it matters
    The link is the wall. A GPU that spends most of its time receiving inputs (an inference
    server copying every request's tensors, a loop that moves its whole dataset each
    iteration) is bound by PCIe or NVLink bandwidth, and faster kernels do not shorten the
    step.

    ## How to fix
    Keep the data on the device: load the dataset or the weights once and reuse device
    buffers between iterations. Overlap what must move with compute: copies with
    `non_blocking=True` on a side stream, double-buffered inputs, the next batch copied
    while this one computes. Move fewer bytes: a smaller dtype, compressed or quantised
    inputs, only the part that changed.

    ## Known false positives
    A benchmark of the copies themselves, and a program whose job is moving data (a
    checkpoint writer, a data-loading stage).

    ## Impact estimate
    What overlapping the copies with the device's compute saves: the smaller of the busy time
    that is copies alone and the kernel time with no copy beside it, per step (the shorter
    hides under the longer); at most that kernel time (`impact_ceiling_ns`). Keeping the data
    on the device would save up to the copies' time alone (`evidence.resident_ns`), not
    priced: whether it fits is the program's to say.
    """

    code = "TA028"
    slug = "copy-bound"
    title = "Direct copies hold the GPU: it is busy moving data, not computing"
    category = "copy_bound"
    claims = "copy_time"
    default_severity = Severity.WARNING
    advice = (
        "The copies are direct already (pinning changes nothing): keep the data on the GPU "
        "between iterations (load it once, reuse device buffers), overlap what must move "
        "with compute (non_blocking copies on a side stream, double-buffered inputs), or "
        "move fewer bytes (a smaller dtype, only what changed)."
    )
    advice_neutral = (
        "The copies are direct already (pinning changes nothing): keep the data on the GPU "
        "between iterations (load it once, reuse device buffers), overlap what must move "
        "with compute (cudaMemcpyAsync on a second stream, double buffering), or move fewer "
        "bytes (a smaller type, only what changed)."
    )

    example_bad: ClassVar[list[Event]] = _copies_then_kernel(900)
    example_good: ClassVar[list[Event]] = _copies_then_kernel(20)

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_copy_share: float = field(
            default=0.5,
            metadata={"help": "the device's busy time that is copies alone, as a share of it"},
        )

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for m in ctx.metrics.copy_overlap_model:
            share = m.copy_only_share
            if share <= t.min_copy_share:
                continue
            steps = m.steps or 1
            rate = f" at {m.gbps:.1f} GB/s" if m.gbps else ""
            yield self.finding(
                ctx,
                f"rank {m.rank} GPU {m.device}: copies alone fill {share:.0%} of its busy "
                f"time ({duration(m.copy_only_ns // steps)} per step; "
                f"{m.bytes / steps / 1e6:.0f} MB per step in direct copies{rate}) against "
                f"{duration(m.kernel_ns // steps)} of kernels; overlapping them saves "
                f"{duration(m.overlap_ns // steps)} per step, keeping the data on the device "
                f"up to {duration(m.copy_only_ns // steps)}",
                {
                    "busy_ns": m.busy_ns,
                    "kernel_ns": m.kernel_ns,
                    "copy_only_ns": m.copy_only_ns,
                    "copy_only_share": share,
                    "copy_ns": m.copy_ns,
                    "bytes": m.bytes,
                    "gbps": m.gbps,
                    "under_kernels_ns": m.under_kernels_ns,
                    "kernel_alone_ns": m.kernel_alone_ns,
                    "resident_ns": m.resident_ns,
                    "bound_by": "copy",
                    "threshold_share": t.min_copy_share,
                },
                Scope(m.rank, m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )
