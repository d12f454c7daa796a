"""TA009: host-to-device copies from pageable memory."""

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


class PageableMemcpy(Rule):
    """Host-to-device copies read pageable memory: staged and synchronous.

    ## What it detects
    Host-to-device memcpys whose source is pageable (not pinned) host memory, where the
    copies average more than a size threshold (Nsight Systems' `analyze` flags synchronous
    host-to-device copies above 64 000 bytes). In torch.profiler traces they read
    `Memcpy HtoD (Pageable -> Device)`; in Nsight exports the source memory kind says
    pageable.

    ## Why it matters
    The driver cannot DMA from pageable memory: it copies the data into a pinned staging
    buffer first, and the call returns only when the copy is done, whatever
    `non_blocking` says. The host is blocked and the copy cannot overlap compute, and the
    transfer runs at a fraction of the PCIe/NVLink bandwidth.

    ## How to fix
    `DataLoader(..., pin_memory=True)` and `tensor.to(device, non_blocking=True)`; for
    tensors built by hand, `tensor.pin_memory()` or allocate them pinned once and reuse them;
    prefetch the next batch on a side stream.

    ## Known false positives
    Tiny copies (scalars, shapes) are left out by the size threshold; copies made once at
    start-up are harmless if the window covers them by accident. The size is the mean over
    the copies of one device, not each copy's.

    ## Impact estimate
    The copies' time per step less the time the same bytes take at pinned bandwidth (this
    device's pinned host-to-device copies in the trace, else 25 GB/s, a PCIe 4.0 x16 link):
    what pinning saves for sure. With `non_blocking=True` the pinned copy can also run beside
    compute, which may hide the rest; the host's time staging the data is not counted.
    """

    code = "TA009"
    slug = "pageable-memcpy"
    title = "Host-to-device copies from pageable memory"
    category = "pageable_memcpy"
    claims = "pageable_copies"
    default_severity = Severity.WARNING
    advice = (
        "Pin host memory: DataLoader(pin_memory=True) and .to(device, non_blocking=True), or "
        "reuse a pinned buffer, so copies are asynchronous and overlap compute."
    )

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
            yield self.finding(
                ctx,
                f"rank {c.rank} GPU {c.device}: {count} host-to-device "
                f"cop{'y' if count == 1 else 'ies'} from pageable memory"
                f"{per_step}, {size / 1e6:.1f} MB in {time / 1e6:.2f} ms "
                f"({size / time if time else 0:.1f} GB/s)",
                {
                    "count": count,
                    "bytes": size,
                    "mean_bytes": size // count,
                    "time_ns": time,
                    "gbps": size / time if time else None,
                    "copies_per_step": count / steps if steps else None,
                    "pinned_gbps": c.pinned_gbps,
                    "pinned_basis": c.pinned_basis,
                    "threshold_bytes": t.min_copy_bytes,
                },
                Scope(c.rank, c.device),
                c.impact_ns,
                ceiling_ns=c.ceiling_ns,
            )
