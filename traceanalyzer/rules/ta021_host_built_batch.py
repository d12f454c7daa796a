"""TA021: every step builds its inputs on the host from Python data and copies them in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.analyses.causes.host_batch import CONSTRUCTOR, COPY
from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, gpu_op, launch, launched, step


def _step(n: int, t: float, built: bool) -> list[Event]:
    """A step: with `built`, 400 µs turning a list into a tensor (no operator covers it) and
    a blocking pageable copy before the forward's kernels; without, the forward alone."""
    out = [step(n, t, 1000)]
    k = t + 10
    if built:
        out += [
            cpu_op(t + 10, 5, "aten::empty"),
            cpu_op(t + 410, 2, "aten::lift_fresh"),
            cpu_op(t + 420, 60, "aten::copy_"),
            launch(t + 425, 50, 10 * n, name="cudaMemcpyAsync"),
            gpu_op(
                "gpu_memcpy", t + 440, 5, "Memcpy HtoD (Pageable -> Device)", corr=10 * n, bytes=1
            ),
        ]
        k = t + 490
    out += launched(k, k + 10, 450, 10 * n + 1, "gemm")
    return out


class HostBuiltBatch(Rule):
    """The step's inputs are built on the host from Python data and copied in, every step.

    ## What it detects
    Steady steps (at least `min_steps_share` of them) that build a tensor from Python data
    (`torch.tensor(list)`, `torch.as_tensor` of a sequence: the profiler records
    `aten::lift_fresh` at the end of the constructor, and the time spent walking the Python
    objects as host time under no operator before it) and, in the same step, copy a tensor
    to the device from pageable memory (`Memcpy HtoD (Pageable -> Device)`, launched from
    `aten::copy_`: `.cuda()`, `.to(device)`).

    ## Why it matters
    The GPU waits twice: while the host turns lists into tensors (about a millisecond per
    few thousand elements), and at the copy, which from pageable memory is staged and
    blocking, so the host first waits for all the GPU work queued before it and queues
    nothing meanwhile: the next step starts with an empty queue.

    ## How to fix
    Build batches as tensors away from the step: in DataLoader workers (`num_workers > 0`,
    the dataset returning tensors or NumPy arrays, not lists), with `pin_memory=True` and
    `.to(device, non_blocking=True)`, or prefetched on a side stream; where the data is made
    on the fly, make it on the GPU (`torch.randint(..., device="cuda")`) or keep it there.

    ## Known false positives
    A loop that must read fresh host data every step and has nothing to overlap it with (a
    single inference request): then the constructor is the work, though pinned,
    non-blocking copies still help.

    ## Impact estimate
    The GPU idle the constructors and copies explain: the part of each idle gap during which
    the host was inside them, and after each blocking copy the refill until the next launch
    ran, counted as for any sync (analyses/causes/host_batch.py, host_work.py); per steady
    step, at most the device's idle. On an H200 GPT step whose two 8,192-token batches were
    built from lists, this priced 3.4 ms; building them on the GPU saved 4.0 ms without the
    profiler.
    """

    code = "TA021"
    slug = "host-built-batch"
    title = "Inputs built on the host from Python data every step"
    category = "host_built_batch"
    claims = "host_wait_idle"
    default_severity = Severity.WARNING
    advice = (
        "Build batches as tensors outside the step: DataLoader workers (num_workers > 0, "
        "tensors or NumPy arrays, not lists) with pin_memory=True and "
        ".to(device, non_blocking=True), or prefetch on a side stream; data made on the fly "
        "can be made on the GPU."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_steps_share: float = field(
            default=0.5,
            metadata={"help": "share of steady steps building and copying inputs that triggers it"},
        )

    example_bad: ClassVar[list[Event]] = [*_step(1, 100, True), *_step(2, 1100, True)]
    example_good: ClassVar[list[Event]] = [*_step(1, 100, False), *_step(2, 1100, False)]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for rank, m in models(ctx, "host_batch").items():
            if m.every_step_share < t.min_steps_share:
                continue
            steps = m.steps or 1
            names = {n["name"]: n for n in ctx.metrics.causes.names_of(rank, "host_batch", 10)}
            built = names.get(CONSTRUCTOR) or {"count": 0, "total_ns": 0}
            copied = names.get(COPY) or {"count": 0, "total_ns": 0}
            yield self.finding(
                ctx,
                f"rank {rank}: every step builds tensors from Python data on the host "
                f"({built['count'] / steps:.1f} per step, {duration(built['total_ns'] // steps)}"
                f" of host time) and copies them in from pageable memory "
                f"({copied['count'] / steps:.1f} blocking copies, "
                f"{duration(copied['total_ns'] // steps)}) in {m.steps_with} of {m.steps} "
                f"steps: {duration(m.explained_ns)} of GPU {m.device} idle per step",
                {
                    "steps": m.steps,
                    "steps_with_batches": m.steps_with,
                    "constructors_per_step": built["count"] / steps,
                    "constructor_ns_per_step": built["total_ns"] // steps,
                    "pageable_copies_per_step": copied["count"] / steps,
                    "copy_ns_per_step": copied["total_ns"] // steps,
                    "host_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "explains": ["TA001", "TA002", "TA009"],
                    "bound_by": "host",
                    "cause_words": "the inputs are built on the host and copied in every step",
                    "threshold_steps_share": t.min_steps_share,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )
