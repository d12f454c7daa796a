"""TA026: the GPU's clock held below its maximum while it works (Nsight GPU metrics)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.analyses.counters.gpu_metrics import ClockImpact
from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, gpu_metrics, launched, step

_KERNEL = "fused_compute_kernel"
_CHECK = "`nvidia-smi -q -d PERFORMANCE` shows which (its Clocks Event Reasons)"


def _loop(clock_mhz: int) -> list[Event]:
    """Five 2 ms steps, each a compute kernel that keeps the GPU busy, sampled at 10 kHz
    with the SMs busy, no tensor pipes, and the clock at `clock_mhz` (the GPU's maximum is
    1980 MHz)."""
    events: list[Event] = []
    for n in range(1, 6):
        t = 2000.0 * n
        events += [step(n, t, 2000), *launched(t + 1, t + 5, 1990, n, _KERNEL)]
    readings = {"sm_active": 95, "sm_issue": 60, "tensor_active": 0, "dram_read": 8,
                "dram_write": 3}  # fmt: skip
    return [*events, gpu_metrics(2000, 10_000, clock_mhz=clock_mhz, **readings)]


class ClockBelowMax(Rule):
    """The GPU's SM (GPC) clock runs below the device's maximum while the GPU works.

    ## What it detects
    From Nsight Systems' GPU metrics (`nsys profile --gpu-metrics-devices=all`): the GPC
    clock's mean over the busy samples of a device's steady window (GPU work covers 90 % of
    the ~100 µs sample) against the device's maximum (the export's `clockRate`, else the
    highest sample of the capture), where it is `min_clock_deficit_share` or more below it
    and the busy samples cover at least `min_sampled_busy_ns`. Idle samples are left out:
    an idle GPU lowers its clock by design. The message gives the likely reason from the
    load the counters saw: a power limit under a heavy Tensor Core load, a power or thermal
    limit under load, or, with few SMs at work, a thermal limit or clocks locked low.

    ## Why it matters
    A kernel the SMs bound (GEMMs, compute-heavy and latency-bound kernels) takes time
    inversely to the clock: at 1500 of 1980 MHz it runs 32 % longer. The timeline cannot
    show it: the kernels are simply slower. A GPU lowers its clock at its power limit (a
    dense bf16 GEMM load draws the board's limit: H100 and H200 then run at about 1.6-1.8
    GHz, by design), when hot (thermal slowdown: cooling, a neighbour's heat, a failing
    fan), under a power cap set below the default, or where clocks are locked below the
    maximum (application clocks, `nvidia-smi -lgc`).

    ## How to fix
    Ask the GPU why: `nvidia-smi -q -d PERFORMANCE` lists the active Clocks Event Reasons
    (SW Power Cap, HW Slowdown, SW/HW Thermal Slowdown, Applications Clocks Setting);
    `nvidia-smi -q -d POWER,TEMPERATURE,CLOCK` gives the power limit, temperature and clocks.
    A power cap under a heavy Tensor Core load is normal: nothing to fix. A thermal
    slowdown wants cooling (airflow, the data centre's inlet temperature, the GPU's
    neighbours); a power limit set below the default wants `nvidia-smi -pl` (by an
    administrator); clocks locked low want `nvidia-smi -rgc` (reset) or `-lgc` to the maximum.

    ## Known false positives
    The counters are the whole GPU's: another process's work on the same GPU counts. A short
    capture with few busy samples is noisy (the floor leaves it out). Where the maximum comes
    from the highest sample (the export names no `clockRate`), the clock is judged against
    what the capture saw, never against a higher one. Memory-bound work barely speeds up
    with the clock: the price leaves it out, the message does not.

    ## Impact estimate
    A kernel the SM clock bounds takes time inversely to it, so at the maximum its time would
    shrink by 1 - clock/max: the price is the device's busy time per step x (1 - busy clock /
    maximum) x the clock-bound share of its kernel time (every kernel but memory-bound,
    copy/cast and communication ones, which wait for DRAM, links or peers); the ceiling the
    same with all the busy time sped up, never above the busy time
    (`analyses/counters/gpu_metrics.py`: `clock_impact`). Under a heavy Tensor Core load
    (busy tensor active at least `heavy_tensor_active_share`) the finding is an unpriced
    info: a dense GEMM load at the power limit is the GPU working as designed, and no fix the
    user can make changes it (the model's figure stays in `evidence.clock_cost_ns`).
    """

    code = "TA026"
    slug = "clock-below-max"
    title = "GPU clock held below its maximum while busy"
    category = "clock_throttling"
    claims = "clock_bound_kernels"
    default_severity = Severity.WARNING
    advice = (
        "Ask the GPU why: `nvidia-smi -q -d PERFORMANCE` shows the clock event reasons (power "
        "cap, thermal slowdown, application clocks). A power cap under a heavy GEMM load is "
        "normal; a thermal slowdown wants cooling; clocks locked low want `nvidia-smi -rgc`."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_clock_deficit_share: float = field(
            default=0.05,
            metadata={"help": "how far below the maximum the busy clock must be (a share of it)"},
        )
        min_sampled_busy_ns: int = field(
            default=2_000_000,
            metadata={"help": "busy time the busy samples must cover (20 samples at 10 kHz)"},
        )
        heavy_tensor_active_share: float = field(
            default=0.5,
            metadata={
                "help": "busy tensor active at which the clock is the power limit of a dense "
                "GEMM load: info, whatever the price"
            },
        )

    example_bad: ClassVar[list[Event]] = _loop(1400)
    example_good: ClassVar[list[Event]] = _loop(1980)

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for c in ctx.metrics.clock_model:
            share, top, clock = c.clock_share, c.max_clock_hz, c.clock_hz
            if share is None or top is None or clock is None:
                continue
            if share > 1 - t.min_clock_deficit_share or c.sampled_busy_ns < t.min_sampled_busy_ns:
                continue
            heavy = (c.tensor_active_share or 0) >= t.heavy_tensor_active_share
            low = f", lowest {c.min_clock_hz / 1e6:.0f} MHz" if c.min_clock_hz else ""
            yield self.finding(
                ctx,
                f"rank {c.rank} GPU {c.device}: GPC clock {clock / 1e6:.0f} MHz of its "
                f"{top / 1e6:.0f} MHz maximum ({share:.0%}) while busy ({c.busy_samples} busy "
                f"samples{low}); {_reason(c, heavy)}; {_CHECK}",
                {
                    "clock_hz": round(clock),
                    "min_clock_hz": c.min_clock_hz,
                    "max_clock_hz": top,
                    "max_clock_source": c.max_clock_source,
                    "clock_share": share,
                    "busy_samples": c.busy_samples,
                    "busy_ns": c.busy_ns,
                    "sm_active_share": c.sm_active_share,
                    "sm_issue_share": c.sm_issue_share,
                    "tensor_active_share": c.tensor_active_share,
                    "clock_bound_share": c.clock_bound_share,
                    "heavy_tensor_load": heavy,
                    # what the clock's deficit costs by the model; unpriced where it is the
                    # power limit of a dense GEMM load: no fix the user can make changes it
                    "clock_cost_ns": c.impact_ns,
                    "measured": "gpu_metrics",
                    # the verdict's words (report.verdict)
                    "clock_words": f"GPC clock {clock / 1e6:.0f} of {top / 1e6:.0f} MHz while "
                    f"busy: {_short_reason(c, heavy)}",
                    "threshold_deficit_share": t.min_clock_deficit_share,
                },
                Scope(c.rank, c.device),
                None if heavy else c.impact_ns,
                advice=_advice(c, heavy) or None,
                severity=Severity.INFO if heavy else None,
                ceiling_ns=None if heavy else c.ceiling_ns,
            )


def _reason(c: ClockImpact, heavy: bool) -> str:
    """The likely reason, from the load the counters saw while busy."""
    if heavy:
        return (
            f"under this heavy Tensor Core load (tensor active {c.tensor_active_share:.0%}) "
            "that is the power limit at work, normal for dense GEMMs"
        )
    sm = c.sm_active_share
    if sm is not None and sm < 0.5:
        return (
            f"with {sm:.0%} of the SMs active this is no power limit: likely a thermal limit "
            "or clocks locked below the maximum (application clocks, `nvidia-smi -lgc`)"
        )
    return "likely a power or thermal limit under load"


def _short_reason(c: ClockImpact, heavy: bool) -> str:
    """The likely reason in a few words, for the verdict."""
    if heavy:
        return "the power limit of a dense GEMM load"
    if c.sm_active_share is not None and c.sm_active_share < 0.5:
        return "a thermal limit or clocks locked low"
    return "a power or thermal limit"


def _advice(c: ClockImpact, heavy: bool) -> str:
    if heavy:
        return (
            "Nothing to fix for a dense GEMM load at the power limit; to confirm, "
            "`nvidia-smi -q -d PERFORMANCE` shows SW Power Cap active while it runs."
        )
    return ""
