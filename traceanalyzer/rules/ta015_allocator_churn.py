"""TA015: the caching allocator goes to the driver inside every step."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, launch, launched, step


class AllocatorChurn(Rule):
    """The caching allocator calls cudaMalloc and cudaFree inside the steady steps.

    ## What it detects
    `cudaMalloc`/`cudaFree` runtime calls (and the driver's `cuMemAlloc`/`cuMemFree`, the
    virtual-memory calls of expandable segments, HIP's `hipMalloc`/`hipFree`) inside at least
    half of the steady steps, at least `min_calls_per_step` per step. PyTorch's caching
    allocator keeps freed blocks for reuse: once warm, a loop allocates from its pool and
    never calls the driver. Calls every step mean the pool was emptied
    (`torch.cuda.empty_cache()` in the loop) or cannot hold the step's blocks (shapes that
    change every step, fragmentation, memory so tight that the allocator frees its cache and
    retries).

    ## Why it matters
    Each call is a trip to the driver (tens of µs to milliseconds for large blocks), and
    `cudaFree` synchronises the device: the GPU drains, the host stops queueing, and the next
    kernels wait for launches the host could have made long before.

    ## How to fix
    Take `torch.cuda.empty_cache()` (and `gc.collect()` with it) out of the loop. Where memory
    is tight or fragmented, set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`; keep
    shapes stable (pad or bucket lengths) so blocks are reused.

    ## Known false positives
    Allocations that are the loop's by design: a first step at a new size (warm-up), a
    deliberate release of memory before an evaluation or checkpoint every N steps (then not
    every step). Calls from libraries outside PyTorch's allocator (NCCL buffers, cuDNN
    workspaces) recur only when those libraries are re-initialised.

    Where the trace holds memory events (`profile_memory=True`), their reserved totals say
    which: reserved memory that falls and climbs back within the steps (at least
    `min_release_share` of its peak given back to the driver in most steps) is the pool being
    emptied; reserved far above allocated (`fragmented_share` of it unused at the peak) while
    the allocator calls the driver is a fragmented pool that cannot fit the step's blocks.

    ## Impact estimate
    The GPU idle the calls explain: the part of each idle gap during which the host was
    inside an allocator call, and, after a `cudaFree` that synchronised the device, the
    refill until the next launch ran, counted like any sync's (up to how far ahead the host
    was, at least the launch-gap limit); per steady step, at most the device's idle
    (analyses/causes/host_work.py).
    """

    code = "TA015"
    slug = "allocator-churn"
    title = "cudaMalloc/cudaFree inside every step"
    category = "allocator_churn"
    claims = "host_wait_idle"
    default_severity = Severity.WARNING
    advice = (
        "Take torch.cuda.empty_cache() out of the loop; where memory is tight or fragmented, "
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; keep shapes stable so the "
        "caching allocator reuses its blocks."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_steps_share: float = field(
            default=0.5,
            metadata={"help": "share of steady steps holding allocator calls that triggers it"},
        )
        min_calls_per_step: float = field(
            default=2.0, metadata={"help": "allocator calls per steady step that trigger it"}
        )
        min_release_share: float = field(
            default=0.25,
            metadata={"help": "share of a step's reserved peak released within it (emptied)"},
        )
        fragmented_share: float = field(
            default=1 / 3,
            metadata={"help": "share of the reserved peak not allocated: fragmented"},
        )

    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 1000),
        launch(110, 100, 90, name="cudaMalloc"),
        *launched(220, 230, 300, 1, "gemm"),
        launch(560, 200, 91, name="cudaFree"),
        launch(770, 100, 92, name="cudaMalloc"),
        *launched(880, 890, 100, 2, "gemm"),
        step(2, 1100, 1000),
        launch(1110, 100, 93, name="cudaMalloc"),
        *launched(1220, 1230, 300, 3, "gemm"),
        launch(1560, 200, 94, name="cudaFree"),
        launch(1770, 100, 95, name="cudaMalloc"),
        *launched(1880, 1890, 100, 4, "gemm"),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 1000),
        *launched(110, 120, 900, 1, "gemm"),
        step(2, 1100, 1000),
        *launched(1110, 1120, 900, 2, "gemm"),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for rank, m in models(ctx, "allocator").items():
            if m.every_step_share < t.min_steps_share or m.calls_per_step < t.min_calls_per_step:
                continue
            names = ctx.metrics.causes.names_of(rank, "allocator", 4)
            steps = m.steps or 1
            calls = ", ".join(f"{n['count'] / steps:.1f} {n['name']}" for n in names)
            frees = sum(n["count"] for n in names if "Free" in str(n["name"])) / steps
            pool = ctx.metrics.memory.pool(rank, m.device, t.min_release_share, t.fragmented_share)
            advice = self.advice
            said = ""
            if pool and pool.emptied:
                said = (
                    f"; reserved memory falls by {pool.released_per_step_bytes / 2**30:.2f} "
                    f"GiB and climbs back in {pool.steps_released} of {pool.steps} steps "
                    "(the pool is emptied)"
                )
            elif pool and pool.fragmented:
                said = (
                    f"; {pool.reserved_peak_bytes / 2**30:.2f} GiB reserved against "
                    f"{pool.allocated_peak_bytes / 2**30:.2f} GiB allocated at the peak "
                    "(a fragmented pool)"
                )
                advice = (
                    "The pool is fragmented: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                    "and keep shapes stable (pad or bucket lengths) so blocks are reused; no "
                    "torch.cuda.empty_cache() in the loop."
                )
            yield self.finding(
                ctx,
                f"rank {rank}: {m.calls_per_step:.1f} allocator calls per step ({calls}) in "
                f"{m.steps_with} of {m.steps} steps: {duration(m.work_ns)} of host time in "
                f"them per step, {duration(m.explained_ns)} of GPU {m.device} idle{said}",
                {
                    "steps": m.steps,
                    "steps_with_calls": m.steps_with,
                    "calls_per_step": m.calls_per_step,
                    "frees_per_step": frees,
                    "host_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "calls": [
                        {"name": n["name"], "count": n["count"], "total_ns": n["total_ns"]}
                        for n in names
                    ],
                    "explains": ["TA001", "TA002", "TA003"],
                    "bound_by": "host",
                    "cause_words": "the allocator calls cudaMalloc/cudaFree every step"
                    + (" (torch.cuda.empty_cache() in the loop?)" if frees >= 1 else ""),
                    "threshold_calls_per_step": t.min_calls_per_step,
                    "reserved": asdict(pool) if pool else None,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                advice,
                ceiling_ns=m.ceiling_ns,
            )
