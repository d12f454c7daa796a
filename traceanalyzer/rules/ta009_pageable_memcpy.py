"""TA009: copies between the GPU and pageable host memory, in either direction."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, gpu_op, launch, launched, step

_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def _batch_copy(source: str) -> list[Event]:
    """A step that copies a 4 MB batch to the GPU, then computes on it."""
    return [
        step(1, 100, 600),
        launch(105, 200, 1, name="cudaMemcpyAsync"),
        gpu_op("gpu_memcpy", 110, 190, f"Memcpy HtoD ({source} -> Device)", corr=1, bytes=4 << 20),
        *launched(310, 315, 200, 2, _GEMM),
    ]


#: What to do, by the copies' direction.
ADVICE_BY_DIRECTION = {
    "HtoD": (
        "Pin host memory: DataLoader(pin_memory=True) and .to(device, non_blocking=True), or "
        "reuse a pinned buffer, so copies are asynchronous and overlap compute."
    ),
    "DtoH": (
        "Copy into a pinned buffer allocated once (torch.empty(..., pin_memory=True)) with "
        "buffer.copy_(x, non_blocking=True), on a side stream, and wait for it only where "
        "the host reads it; better still, keep the result on the GPU and copy less."
    ),
}


class PageableMemcpy(Rule):
    """Copies between the GPU and pageable host memory: staged and synchronous.

    ## What it detects
    Memcpys whose host side is pageable (not pinned) memory, host to device or device to
    host, where the copies average more than a size threshold (Nsight Systems' `analyze`
    flags synchronous copies above 64 000 bytes). In torch.profiler traces they read
    `Memcpy HtoD (Pageable -> Device)` or `Memcpy DtoH (Device -> Pageable)`; in Nsight
    exports the memory kind says pageable.

    ## Why it matters
    The driver cannot DMA from or to pageable memory: it stages the data through a pinned
    buffer, and the call returns only when the copy is done, whatever `non_blocking` says.
    The host is blocked, the copy cannot overlap compute, and it runs at a fraction of the
    link's bandwidth (`x.cpu()` of a large tensor: 1.4 GB/s against 50 GB/s pinned on an
    H200's PCIe 5.0 link).

    ## How to fix
    Host to device: `DataLoader(..., pin_memory=True)` and
    `tensor.to(device, non_blocking=True)`; for tensors built by hand, `tensor.pin_memory()`
    or allocate them pinned once and reuse them; prefetch the next batch on a side stream.
    Device to host: copy into a pinned buffer allocated once, `non_blocking=True` on a side
    stream, and wait only where the host reads it; or keep the data on the GPU.

    ## Known false positives
    Tiny copies (scalars, shapes) are left out by the size threshold; copies made once at
    start-up are harmless if the window covers them by accident. The size is the mean over
    the copies of one device and direction, not each copy's.

    ## Impact estimate
    The copies' time per step less the time the same bytes take at pinned bandwidth, and no
    more than their time outside kernels (a copy that ran under a kernel costs a GPU-bound
    step nothing): what pinning saves for sure. The pinned bandwidth is measured where the
    trace has pinned copies of 1 MB or more (the same direction first), else assumed from
    the GPU's usual link (PCIe 5.0 x16 for H100/H200/B200, 50 GB/s; PCIe 4.0 x16 for A100,
    25 GB/s; PCIe 3.0 x16 for V100/T4, 12 GB/s); the finding says which. With
    `non_blocking=True` the pinned copy can also run beside compute, which may hide the
    rest; the host's time staging the data is not counted.
    """

    code = "TA009"
    slug = "pageable-memcpy"
    title = "Copies to or from pageable host memory"
    category = "pageable_memcpy"
    advice_neutral = (
        "Copy to and from pinned host memory (cudaMallocHost, or cudaHostRegister on an existing "
        "buffer) with cudaMemcpyAsync on a stream of its own, so that copies run at the link's "
        "speed and overlap kernels; better still, keep the data on the GPU."
    )
    claims = "pageable_copies"
    default_severity = Severity.WARNING
    advice = ADVICE_BY_DIRECTION["HtoD"]

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_copy_bytes: int = field(
            default=64_000,
            metadata={"help": "mean bytes per pageable copy that trigger it (Nsight: 64 000)"},
        )

    example_bad: ClassVar[list[Event]] = _batch_copy("Pageable")
    example_good: ClassVar[list[Event]] = _batch_copy("Pinned")

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for c in ctx.metrics.pageable_model:
            count, size, time, steps = c.count, c.bytes, c.time_ns, c.steps
            if not count or size / count < t.min_copy_bytes:
                continue
            per_step = f", {count / steps:.1f} per step" if steps else ""
            way = "host-to-device" if c.direction == "HtoD" else "device-to-host"
            side = "from" if c.direction == "HtoD" else "to"
            yield self.finding(
                ctx,
                f"rank {c.rank} GPU {c.device}: {count} {way} "
                f"cop{'y' if count == 1 else 'ies'} {side} pageable memory"
                f"{per_step}, {size / 1e6:.1f} MB in {time / 1e6:.2f} ms "
                f"({size / time if time else 0:.1f} GB/s; pinned: {c.pinned_gbps:.0f} GB/s, "
                f"{c.pinned_basis.split(':')[0]})",
                {
                    "count": count,
                    "bytes": size,
                    "mean_bytes": size // count,
                    "time_ns": time,
                    "gbps": size / time if time else None,
                    "copies_per_step": count / steps if steps else None,
                    "pinned_gbps": c.pinned_gbps,
                    "pinned_basis": c.pinned_basis,
                    "direction": c.direction,
                    "under_kernels_ns": c.under_kernels_ns,
                    "threshold_bytes": t.min_copy_bytes,
                    "bound_by": "copy",
                },
                Scope(c.rank, c.device),
                c.impact_ns,
                advice=ADVICE_BY_DIRECTION[c.direction],
                ceiling_ns=c.ceiling_ns,
            )
