"""TA027: kernels wait for unified-memory pages migrated on demand."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration
from traceanalyzer.rules.examples import Event, gpu_op, launched, step, synchronize


def _kernel_over_managed(migrations: int) -> list[Event]:
    """A step: one kernel over a managed buffer, with `migrations` of 64 KiB migrated in on
    demand while it runs (100 us each), and the host waiting for it."""
    out: list[Event] = [
        step(1, 100, 1100),
        *launched(105, 110, 1000, 1, "axpb(float*, unsigned long)"),
        synchronize(108, 1005, "cudaStreamSynchronize"),
    ]
    for i in range(migrations):
        out.append(
            gpu_op(
                "gpu_memcpy",
                120 + 110 * i,
                100,
                "Memcpy HtoD (Managed -> Managed)",
                stream=0,
                bytes=64 << 10,
            )
        )
    return out


class ManagedMemory(Rule):
    """Kernels fault on managed (unified) memory and wait while its pages migrate.

    ## What it detects
    Unified-memory migrations from host to device (Nsight's "Unified Host-to-Device" copies,
    recorded with `nsys profile --cuda-um-gpu-page-faults=true`) under kernels, taking at
    least `min_step_share` of a step: memory allocated with `cudaMallocManaged` that a
    kernel touches while its pages are on the host. Migrations back to the host (the host
    touching pages a kernel left on the GPU) are named beside them, and so are the page
    faults the capture recorded (`--cuda-um-gpu-page-faults`, `--cuda-um-cpu-page-faults`:
    the GPU's fault rows and the faults they hold, the host's faults), counted over the
    whole capture.

    ## Why it matters
    A GPU page fault stalls the warps that touch the page while the driver moves it, a few
    kilobytes to 2 MB at a time: a kernel over a 64 MiB buffer waited 9 ms for 3,000
    migrations that one bulk transfer does in 1.3 ms, and the kernel's own work was a few
    hundredths of that.

    ## How to fix
    Prefetch before the kernel: `cudaMemPrefetchAsync(ptr, bytes, device, stream)` (and
    back to the host with `cudaCpuDeviceId` before the host reads it), or advise the driver
    (`cudaMemAdvise`: `SetPreferredLocation`, `SetAccessedBy`); where the data lives on the
    GPU anyway, allocate it with `cudaMalloc` and copy explicitly, asynchronously.

    ## Known false positives
    Oversubscription (a working set larger than GPU memory) migrates by design: prefetch
    then only moves the order of the faults. The driver's own speculative prefetch around a
    fault counts as a migration too (it is still waited for).

    ## Impact estimate
    The migrations' time under kernels per step less the same bytes at the link's rate (the
    trace's pinned copies where it has them, else the link assumed for the GPU, as TA009):
    what one prefetch of the same bytes costs instead. A migration overlaps the kernel that
    faulted, so its time is counted once, under that kernel, never on top of it. At most the
    migrations' time under kernels.
    """

    code = "TA027"
    slug = "managed-memory"
    title = "Kernels wait for managed-memory pages migrated on demand"
    category = "managed_memory"
    claims = "pageable_copies"
    default_severity = Severity.WARNING
    advice = (
        "Prefetch managed memory before the kernels that use it: cudaMemPrefetchAsync(ptr, "
        "bytes, device, stream) (back to the host with cudaCpuDeviceId before the host reads "
        "it), or cudaMemAdvise its preferred location; for data that lives on the GPU, "
        "cudaMalloc and explicit asynchronous copies."
    )
    advice_neutral = advice

    example_bad: ClassVar[list[Event]] = _kernel_over_managed(8)
    example_good: ClassVar[list[Event]] = _kernel_over_managed(0)

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_step_share: float = field(
            default=0.01,
            metadata={"help": "migration time under kernels per step, as a share of the step"},
        )

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for m in ctx.metrics.managed_model:
            step = ctx.step_of(m.rank)
            under = m.ceiling_ns if m.ceiling_ns is not None else m.under_kernels_ns
            if not m.count or not under or (step and under < t.min_step_share * step):
                continue
            steps = m.steps or 1
            back = (
                f"; and {m.back_count} back to the host ({m.back_bytes / 1e6:.0f} MB, "
                f"{duration(m.back_ns // steps)} per step: the host touching pages left on the "
                "GPU)"
                if m.back_count
                else ""
            )
            faults = next(
                (f for f in ctx.meta.page_faults if (f.rank, f.device) == (m.rank, m.device)),
                None,
            )
            counted = (
                f"; the capture records {faults.gpu_faults} GPU page faults (in "
                f"{faults.gpu_groups} rows) and {faults.cpu_faults} CPU page faults"
                if faults is not None
                else ""
            )
            yield self.finding(
                ctx,
                f"rank {m.rank} GPU {m.device}: {m.count} unified-memory migrations to the GPU "
                f"({m.count / steps:.0f} per step, {m.bytes / steps / 1e6:.0f} MB per step), "
                f"{duration(under)} per step of them under kernels that wait for the pages; "
                f"one prefetch moves the same bytes in "
                f"{duration(m.prefetch_ns)} at {m.link_gbps:.0f} GB/s "
                f"({m.link_basis.split(':')[0]}){back}{counted}",
                {
                    "migrations": m.count,
                    "bytes": m.bytes,
                    "time_ns": m.time_ns,
                    "under_kernels_ns": m.under_kernels_ns,
                    "back_migrations": m.back_count,
                    "back_bytes": m.back_bytes,
                    "back_ns": m.back_ns,
                    "link_gbps": m.link_gbps,
                    "link_basis": m.link_basis,
                    "gpu_page_faults": None if faults is None else faults.gpu_faults,
                    "gpu_fault_rows": None if faults is None else faults.gpu_groups,
                    "cpu_page_faults": None if faults is None else faults.cpu_faults,
                    "bound_by": "copy",
                    "threshold_share": t.min_step_share,
                },
                Scope(m.rank, m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )
