"""TA024: DDP all-reduces the gradients after every micro-batch (no_sync missing)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, launched, step


def _step(n: int, t: float, synced: bool) -> list[Event]:
    """An optimizer step of two micro-batches: each a DDP forward and a backward; the
    reducer all-reduces (200 µs of host time) after the first one too unless `synced`."""
    out = [step(n, t, 2000)]
    for m in range(2):
        s = t + 10 + 900 * m
        out += [
            cpu_op(s, 100, "DistributedDataParallel.forward"),
            *launched(s + 10, s + 20, 80, 100 * n + 10 * m, "gemm"),
        ]
        if m == 1 or not synced:
            out.append(cpu_op(s + 300, 200, "c10d::allreduce_"))
        out += launched(s + 600, s + 610, 80, 100 * n + 10 * m + 1, "gemm")
    out.append(cpu_op(t + 1850, 100, "Optimizer.step#AdamW.step"))
    return out


class DdpNoSync(Rule):
    """DDP all-reduces the gradients after every micro-batch of a gradient accumulation.

    ## What it detects
    DistributedDataParallel's reducer (`c10d::allreduce_`, `nccl:all_reduce`, its
    `mul_out` and `copy_bucket_to_grad`) at work after a micro-batch that is not the last of
    its accumulation cycle: a micro-batch is a `DistributedDataParallel.forward` range, a
    cycle the micro-batches between two `Optimizer.step#` ranges. With `model.no_sync()`
    around all but the last micro-batch, DDP all-reduces once per optimizer step.

    ## Why it matters
    Each extra round all-reduces every gradient bucket: the host work of the reducer, the
    scaling and copy kernels, and, across ranks, the communication itself, all for gradients
    that the next micro-batch adds to anyway.

    ## How to fix
    Run the forward and backward of every micro-batch but the last under
    `with model.no_sync():` (FSDP: `no_sync()` too, or `set_requires_gradient_sync(False)`).

    ## Known false positives
    A loop that steps the optimizer every micro-batch records an `Optimizer.step#` each
    time: then there is no accumulation and nothing fires.

    ## Impact estimate
    The GPU idle the extra rounds' reducer work explains, as for any host-side cause
    (analyses/causes/ddp_sync.py, host_work.py); per steady step, at most the device's idle.
    On several ranks the extra rounds' exposed communication adds to it and is not priced
    here. On an H200 GPT of 4 micro-batches per step (one rank), this priced 5.7 ms against
    7.6 ms that no_sync saved without the profiler.
    """

    code = "TA024"
    slug = "ddp-no-sync"
    title = "DDP all-reduces after every micro-batch (no_sync missing)"
    category = "ddp_no_sync"
    claims = "host_wait_idle"
    default_severity = Severity.WARNING
    advice = (
        "Run every micro-batch but the last of an accumulation under `with model.no_sync():`, "
        "so DDP all-reduces the gradients once per optimizer step."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_steps_share: float = field(
            default=0.5,
            metadata={"help": "share of steady steps with extra all-reduce rounds"},
        )

    example_bad: ClassVar[list[Event]] = [*_step(1, 100, False), *_step(2, 2100, False)]
    example_good: ClassVar[list[Event]] = [*_step(1, 100, True), *_step(2, 2100, True)]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for rank, m in models(ctx, "ddp_sync").items():
            if m.every_step_share < t.min_steps_share:
                continue
            names = ctx.metrics.causes.names_of(rank, "ddp_sync", 10)
            steps = m.steps_with or 1
            reduces = sum(n["count"] for n in names if n["name"] == "c10d::allreduce_") / steps
            yield self.finding(
                ctx,
                f"rank {rank}: DDP all-reduces the gradients after micro-batches that are not "
                f"the last of their optimizer step, in {m.steps_with} of {m.steps} steps: "
                f"{reduces:.0f} all-reduces per step in those rounds, "
                f"{duration(m.work_ns)} of the reducer's host time, "
                f"{duration(m.explained_ns)} of GPU {m.device} idle per step",
                {
                    "steps": m.steps,
                    "steps_with_extra_rounds": m.steps_with,
                    "extra_allreduces_per_step": reduces,
                    "host_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "calls": [
                        {"name": n["name"], "count": n["count"], "total_ns": n["total_ns"]}
                        for n in names[:4]
                    ],
                    "explains": ["TA001", "TA003"],
                    "bound_by": "host",
                    "cause_words": "DDP all-reduces after every micro-batch (no_sync missing)",
                    "threshold_steps_share": t.min_steps_share,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )
