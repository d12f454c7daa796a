"""TA011: allocated memory grows step over step."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, launched, memory, step


def _leaky(grow: bool) -> list[Event]:
    events: list[Event] = []
    for n in range(4):
        t = 100.0 + 200 * n
        base = 1_000_000_000 + (n * 256_000_000 if grow else 0)
        events += [
            step(n + 1, t, 200),
            *launched(t + 5, t + 10, 50, n + 1, "gemm"),
            memory(t + 20, base + 512_000_000),  # activations allocated
            memory(t + 150, base),  # and freed
        ]
    return events


class MemoryGrowth(Rule):
    """Allocated GPU memory grows from step to step.

    ## What it detects
    Traces recorded with `profile_memory=True` carry an event per allocation and free, with
    the device's total allocated bytes. Within a healthy step the total rises and falls back
    (a sawtooth). This rule compares each step's peak: if it rises in most step-to-step
    changes and the growth is large, memory is being kept alive across steps.

    ## Why it matters
    A leak ends in an out-of-memory error after enough steps, and before that it fragments
    the caching allocator, which then spends time in cudaMalloc/cudaFree and synchronises.

    ## How to fix
    Look for tensors that outlive the step: losses or outputs appended to a Python list
    without `.detach()` or `.item()` (each keeps its whole autograd graph), growing caches,
    hooks that store activations. `torch.cuda.memory._record_memory_history()` and the
    memory snapshot viewer show who allocated what.

    ## Known false positives
    Warm-up: the first steps legitimately grow (optimizer state, cuDNN workspaces, the
    allocator's cache), so traces of the first few steps can look like a leak. Variable
    sequence lengths make peaks move both ways.

    ## Impact estimate
    None in time: growth costs no step time until the device is full. Instead the evidence has
    `bytes_per_step` (the least-squares slope of the step peaks) and `steps_to_oom` (the device's
    memory less the last step peak, over the growth per step), and the severity follows that
    risk: critical within `critical_steps_to_oom` steps, a warning within
    `warning_steps_to_oom`, else info.
    """

    code = "TA011"
    slug = "memory-growth"
    title = "GPU memory grows step over step"
    category = "memory_growth"
    advice_neutral = (
        "Free what each iteration allocates (or reuse buffers allocated once): memory that grows "
        "every iteration runs out."
    )
    claims = "none"
    default_severity = Severity.WARNING
    risk = True  # the job runs out of memory: before costs of the same severity
    advice = (
        "Find what outlives the step: stored losses or outputs without .detach()/.item(), "
        "growing caches, hooks keeping activations; a memory snapshot shows the allocator."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_growth_bytes: int = field(
            default=64 * 1024 * 1024,
            metadata={"help": "growth of the step peak from first to last step, bytes"},
        )
        min_rising_share: float = field(
            default=0.75,
            metadata={"help": "share of step-to-step changes in which the peak must rise"},
        )
        min_steps: int = field(
            default=3, metadata={"help": "steps with memory events needed to judge"}
        )
        critical_steps_to_oom: int = field(
            default=10_000,
            metadata={"help": "critical when the device's memory is full within this many steps"},
        )
        warning_steps_to_oom: int = field(
            default=1_000_000,
            metadata={"help": "a warning within this many steps (info beyond)"},
        )

    example_bad: ClassVar[list[Event]] = _leaky(grow=True)
    example_good: ClassVar[list[Event]] = _leaky(grow=False)

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for g in ctx.metrics.memory.runway:
            if not (
                g.steps >= t.min_steps
                and g.growth_bytes is not None
                and g.growth_bytes >= t.min_growth_bytes
                and g.rising_share is not None
                and g.rising_share >= t.min_rising_share
            ):
                continue
            per_step, total, to_oom = g.per_step_bytes or 0, g.device_memory_bytes, g.steps_to_oom
            if to_oom is None:
                severity = self.default_severity
            elif to_oom <= t.critical_steps_to_oom:
                severity = Severity.CRITICAL
            elif to_oom <= t.warning_steps_to_oom:
                severity = Severity.WARNING
            else:
                severity = Severity.INFO
            yield self.finding(
                ctx,
                f"rank {g.rank} GPU {g.device}: the step peak of allocated memory grew "
                f"by {g.growth_bytes / 2**20:.0f} MiB over {g.steps} steps "
                f"(~{per_step / 2**20:.0f} MiB per step, rising in "
                f"{g.rising_share:.0%} of steps)"
                + (
                    f"; at this rate the {total / 2**30:.0f} GiB of the device is full in "
                    f"~{to_oom} steps"
                    if to_oom is not None and total
                    else ""
                ),
                {
                    "steps": g.steps,
                    "first_peak_bytes": g.first_peak_bytes,
                    "last_peak_bytes": g.last_peak_bytes,
                    "growth_bytes": g.growth_bytes,
                    "per_step_bytes": g.per_step_bytes,
                    "rising_share": g.rising_share,
                    "step_peaks_bytes": list(g.step_peaks_bytes),
                    "bytes_per_step": round(per_step),
                    "device_memory_bytes": total,
                    "steps_to_oom": to_oom,
                },
                Scope(g.rank, g.device),
                None,  # memory growth costs no step time until it runs out
                severity=severity,  # by how soon the job runs out of memory
            )
