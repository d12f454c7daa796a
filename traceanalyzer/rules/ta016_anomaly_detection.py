"""TA016: autograd's anomaly detection left on in the loop."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, launch, launched, step


def _bwd(ts: float, corr: int) -> list[Event]:
    """One backward function with anomaly mode's NaN check after its kernel."""
    return [
        cpu_op(ts, 100, "autograd::engine::evaluate_function: MmBackward0"),
        *launched(ts + 2, ts + 5, 20, corr, "gemm"),
        cpu_op(ts + 10, 8, "aten::isnan"),
        cpu_op(ts + 20, 8, "aten::_is_any_true"),
        cpu_op(ts + 30, 60, "aten::item"),
        cpu_op(ts + 31, 58, "aten::_local_scalar_dense"),
        launch(ts + 32, 55, 500 + corr, name="cudaStreamSynchronize"),
    ]


class AnomalyDetection(Rule):
    """`torch.autograd.set_detect_anomaly(True)` is on: every backward function syncs.

    ## What it detects
    Anomaly mode's NaN check after backward functions: `aten::isnan`, `_is_any_true` and
    `item` (a device sync) inside the autograd engine's `evaluate_function` ranges, at least
    `min_checked_per_step` checked functions per steady step. The signature is the check
    under the engine's ranges, not the number of syncs: logging `.item()` per layer syncs as
    often, in the forward and without the NaN check.

    ## Why it matters
    Anomaly mode is a debugging aid: it records a traceback for every forward operator and,
    after every backward function, reads its outputs' NaN check on the host. Each read is a
    device sync, so the backward pass runs one function at a time, the GPU idling while the
    host launches the next: steps several times slower.

    ## How to fix
    Turn it off outside debugging: remove `torch.autograd.set_detect_anomaly(True)` or the
    `with torch.autograd.detect_anomaly():` block around the loop (or guard it with a debug
    flag). To find where NaNs start, run a few steps with it on, not the whole job.

    ## Known false positives
    A run that profiles anomaly mode on purpose while debugging a NaN.

    ## Impact estimate
    The GPU idle the checks explain: the part of each idle gap during which the host was
    inside a check, and, where a gap began inside the check's `item` (its sync), the refill
    after it, counted like any sync's (analyses/causes/host_work.py); plus the tracebacks the
    forward records, one per autograd node: the backward functions per step times one
    capture's cost, read off an operator that runs on both threads (its median time on the
    forward thread less its median on the backward thread, which creates no nodes:
    analyses/causes/anomaly.py). Per steady step, at most the device's idle. On an H200
    GPT step this priced 40.2 ms of a 70.2 ms profiled step; turning the mode off saved
    47.5 ms under the profiler and 35.3 of 45.5 ms without it.
    """

    code = "TA016"
    slug = "anomaly-detection"
    title = "Anomaly detection on: a NaN check and a sync after every backward function"
    category = "anomaly_detection"
    claims = "sync_idle"
    default_severity = Severity.WARNING
    advice = (
        "Turn anomaly detection off outside debugging: remove "
        "torch.autograd.set_detect_anomaly(True) / detect_anomaly() from the training loop, "
        "or guard it with a debug flag."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_checked_per_step: float = field(
            default=1.0,
            metadata={"help": "backward functions with a NaN check per steady step"},
        )

    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 600),
        *_bwd(110, 1),
        *_bwd(230, 2),
        *_bwd(350, 3),
        step(2, 700, 600),
        *_bwd(710, 4),
        *_bwd(830, 5),
        *_bwd(950, 6),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 600),
        cpu_op(110, 100, "aten::linear"),
        *launched(112, 115, 20, 1, "gemm"),
        cpu_op(140, 60, "aten::item"),
        cpu_op(141, 58, "aten::_local_scalar_dense"),
        launch(142, 55, 501, name="cudaStreamSynchronize"),
        cpu_op(230, 100, "autograd::engine::evaluate_function: MmBackward0"),
        *launched(232, 235, 20, 2, "gemm"),
        step(2, 700, 600),
        cpu_op(710, 100, "aten::linear"),
        *launched(712, 715, 20, 3, "gemm"),
        cpu_op(740, 60, "aten::item"),
        cpu_op(741, 58, "aten::_local_scalar_dense"),
        launch(742, 55, 502, name="cudaStreamSynchronize"),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for rank, m in models(ctx, "anomaly_checks").items():
            names = ctx.metrics.causes.names_of(rank, "anomaly_checks", 10_000)
            steps = m.steps or 1
            checked = sum(n["count"] for n in names if n["name"] == "aten::isnan") / steps
            if checked < t.min_checked_per_step or m.every_step_share < 0.5:
                continue
            by_fn: dict[str, int] = {}
            for n in names:
                if n["name"] == "aten::isnan" and n["parent"]:
                    by_fn[str(n["parent"])] = by_fn.get(str(n["parent"]), 0) + int(n["count"])
            top = sorted(by_fn.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
            capture = next(
                (c for c in ctx.metrics.causes.anomaly.iter_rows(named=True) if c["rank"] == rank),
                None,
            )
            forward = (
                f"; the forward records a traceback for each autograd node "
                f"({capture['capture_ns'] / 1e3:.0f} µs each: {capture['reference_op']} takes "
                f"{capture['forward_median_ns'] / 1e3:.0f} µs there against "
                f"{capture['backward_median_ns'] / 1e3:.0f} µs in the backward), "
                f"{duration(m.unrecorded_ns)} per step"
                if capture and m.unrecorded_ns
                else ""
            )
            yield self.finding(
                ctx,
                f"rank {rank}: anomaly detection is on: {checked:.0f} backward functions per "
                f"step check their outputs for NaN and sync ("
                + ", ".join(f"{fn} {n / steps:.0f}x" for fn, n in top)
                + f"); {duration(m.explained_ns)} of GPU {m.device} idle per step under them"
                + forward,
                {
                    "steps": m.steps,
                    "checked_per_step": checked,
                    "check_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "forward_capture_ns_per_step": m.unrecorded_ns,
                    "capture_ns": capture["capture_ns"] if capture else None,
                    "reference_op": capture["reference_op"] if capture else None,
                    "functions": [{"name": fn, "count": n} for fn, n in top],
                    "explains": ["TA001", "TA002", "TA003"],
                    "bound_by": "sync",
                    "cause_words": "anomaly detection is on (a sync after every backward function)",
                    "threshold_checked_per_step": t.min_checked_per_step,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )
