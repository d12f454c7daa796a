"""TA002: host-device syncs in the step loop."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, cpu_op, launch, launched, py_frame, step


class HostSync(Rule):
    """A host-device synchronisation in every step drains the GPU queue.

    ## What it detects
    Blocking host calls (`cudaStreamSynchronize`, `cudaDeviceSynchronize`,
    `cudaEventSynchronize`, blocking `cudaMemcpy`) made inside steps, at least once per step
    from the same place: the CPU operator around the call (`aten::item`,
    `aten::_local_scalar_dense`, `aten::to`) and, where the trace has Python stacks, the
    user's source line. The idle they cause directly is measured, but the finding is raised
    even when that is small.

    ## Why it matters
    While the host waits, it queues nothing: the GPU runs dry, and every host delay after the
    sync (Python, the data loader) becomes GPU idle instead of being hidden behind queued
    work. One `.item()` per step is enough to serialise host and device.

    ## How to fix
    Remove `.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `print(tensor)` and Python `if` on
    GPU values from the step; accumulate metrics on the GPU and read them every N steps; use
    `non_blocking=True` copies into pinned memory; avoid `torch.cuda.synchronize()` outside
    benchmarking.

    ## Known false positives
    A sync that the algorithm needs (dynamic shapes decided on the host, early stopping
    checks) and syncs that torch itself issues for correctness, e.g. in some indexing ops.

    ## Impact estimate
    The GPU idle the syncs cause, per steady step: in each idle gap during which a sync call was
    in progress, the idle while it waited plus the refill after it returned (the host queued
    nothing while it waited), the refill counted up to the launch-gap limit (a longer wait after
    the sync is the host's own, TA001). CPU time blocked in the call while the GPU is busy is not
    counted: removing the sync does not give it back. A sync every step is reported even when
    this is under the 1 % floor (at info): it keeps the host from running ahead and CUDA graphs
    from capturing the step, so the fixes for host overhead stall on it.
    """

    code = "TA002"
    slug = "host-sync"
    title = "Host-device sync in the step loop"
    category = "host_sync"
    advice_neutral = (
        "Take the host-device synchronisations out of the loop (cudaDeviceSynchronize, "
        "cudaStreamSynchronize, blocking copies, reading results back each iteration): wait on "
        "events only where the host needs the result."
    )
    claims = "sync_idle"
    default_severity = Severity.WARNING
    # a sync every step costs little while the host is slower than the GPU, but it keeps the
    # host from running ahead and CUDA graphs from capturing the step: the fixes for host
    # overhead (TA001, TA003) stall on it. Reported at the severity its impact gives.
    below_floor = True
    advice = (
        "Take .item()/.cpu()/print(tensor) out of the step: keep metrics on the GPU and read "
        "them every N steps; use non_blocking copies."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_per_step: float = field(
            default=1.0, metadata={"help": "sync calls per step from one place that trigger it"}
        )

    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 300),
        *launched(110, 120, 100, 1, "gemm"),
        py_frame(150, 100, "train.py(88): train_step"),
        cpu_op(155, 90, "aten::item"),
        launch(160, 80, 90, name="cudaStreamSynchronize"),
        *launched(245, 250, 50, 2, "gemm"),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 300),
        *launched(110, 120, 100, 1, "gemm"),
        *launched(115, 225, 50, 2, "gemm"),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for model in ctx.metrics.sync_model:  # one finding per rank
            sites = model.frequent(t.min_per_step)
            if not sites.rows:
                continue
            rank, per_step, idle = model.rank, sites.per_step, sites.idle_ns
            where = [
                f"{s['name']} {s['per_step']:.1f}x from "
                + (" <- ".join(x for x in (s["op"], s["site"]) if x) or "(no call stack recorded)")
                for s in sites.rows[:3]
            ]
            yield self.finding(
                ctx,
                f"rank {rank}: {per_step:.1f} host syncs per step ({'; '.join(where)}); "
                f"{idle / 1e6:.2f} ms of GPU idle while they waited, "
                f"{model.idle_with_refill_ns / 1e6:.2f} ms with the refill after them",
                {
                    "per_step": per_step,
                    "idle_ns": idle,
                    "idle_with_refill_ns": model.idle_with_refill_ns,
                    "sites": [
                        {k: s[k] for k in ("name", "op", "site", "count", "per_step", "idle_ns")}
                        for s in sites.rows
                    ],
                    "top_call": sites.rows[0]["name"],
                    "threshold_per_step": t.min_per_step,
                },
                Scope(rank=rank),
                model.impact_ns,
                _advice(ctx),
                ceiling_ns=model.ceiling_ns,  # removing syncs saves at most the GPU's idle
            )


#: GradScaler's step reads `found_inf` on the host (one sync per step) unless the optimizer
#: unscales and skips on the device itself (fused Adam/AdamW/SGD: `_step_supports_amp_scaling`).
_SCALER = (
    "GradScaler syncs once per step to read found_inf unless the optimizer is fused: "
    "AdamW(fused=True) (Adam and SGD take fused=True too) keeps that check on the GPU. "
)


def _advice(ctx: Context) -> str | None:
    scaler = _SCALER if ctx.uses("grad_scaler") and ctx.run.get("fused_optimizer") is False else ""
    if ctx.amd:
        return (
            scaler + "Take .item()/.cpu()/print(tensor) out of the step (each is a hipMemcpy or "
            "hipStreamSynchronize on ROCm): keep metrics on the GPU and read them every N "
            "steps; use non_blocking copies."
        )
    if scaler:
        return scaler + "Take any other .item()/.cpu()/print(tensor) out of the step."
    return None
