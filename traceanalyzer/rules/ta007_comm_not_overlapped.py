"""TA007: communication on the critical path instead of under compute."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, kernel, launch, launched, step

_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


class CommNotOverlapped(Rule):
    """Collectives run while no compute runs: communication is exposed.

    ## What it detects
    Per device, the time communication kernels (NCCL and the like) run with no compute
    kernel beside them (`exposed_comm_ns`), as a share of the analysed window, with the
    share of communication that does overlap compute. TensorBoard's profiler flags
    communication above 10 % of the step; nsys-ai flags NCCL overlap below 30 %. Where the
    ranks' collectives show waiting for a slower rank (TA008), the evidence says how much of
    the communication time was waiting.

    ## Why it matters
    Exposed communication adds straight to step time, and it grows with the number of
    ranks. Data-parallel training can hide most of the gradient all-reduce under the backward
    pass; when it does not, scaling out buys little.

    ## How to fix
    Let DDP overlap: keep its gradient bucketing (`bucket_cap_mb`), do not call a manual
    `all_reduce` after `backward()`, avoid `no_sync` misuse; with FSDP enable
    `backward_prefetch` / `forward_prefetch` and limit all-gathers in flight; larger
    micro-batches give more compute to hide communication under.

    ## Known false positives
    Collectives that must be exposed (the loss all-reduce, a final gather for logging), and
    communication kernels that wait for a slower rank: that time is exposed but is fixed by
    balancing the ranks (TA008), not by overlapping.

    ## Impact estimate
    The exposed transfers per steady step: the collectives are matched across ranks and each
    kernel split into waiting for the last rank to arrive and the transfer after it; the
    transfer time with no compute kernel beside it is what overlap can hide (waiting for a
    slower rank is TA008's: overlap does not hide it). A single rank's collectives cannot be
    split: all of its exposed communication counts. Overlap hides a transfer under compute
    that runs beside it, so the price is never above the compute that runs alone now (busy
    time less communication time, `compute_alone_ns`): 551 ms of exposed NCCL beside 23 ms of
    compute is worth 23 ms of overlap at most; the rest is a transfer to make faster (fewer
    bytes, a faster link), not to hide. It fires when less than
    `max_overlap_share` (30 %) of communication overlaps compute and the exposed transfers
    are at least `min_exposed_comm_share` (3 %) of the window: a DDP run whose all-reduce
    runs under the backward pass stays quiet, and so does a rank whose exposed
    communication is waiting for a slower one.
    """

    code = "TA007"
    slug = "comm-not-overlapped"
    title = "Communication not overlapped with compute"
    category = "comm_not_overlapped"
    advice_neutral = (
        "Overlap communication with compute: issue the collectives on a stream of their own while "
        "independent kernels run, and split them so that the first chunks start early."
    )
    claims = "exposed_transfers"
    default_severity = Severity.WARNING
    advice = (
        "Overlap collectives with compute: keep DDP gradient bucketing (no manual all_reduce "
        "after backward), FSDP backward/forward prefetch, larger micro-batches."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_exposed_comm_share: float = field(
            default=0.03,
            metadata={"help": "exposed communication as a share of the window to trigger"},
        )
        max_overlap_share: float = field(
            default=0.30,
            metadata={"help": "fires only when less than this share of communication overlaps"},
        )

    # the gradient all-reduce runs after the backward GEMM, alone
    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 200, 1, _GEMM),
        *launched(108, 310, 200, 2, _ALLREDUCE),
    ]
    # the same all-reduce runs under the backward GEMM, on its own stream
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 400, 1, _GEMM),
        launch(110, 2, 2),
        kernel(120, 200, _ALLREDUCE, stream=20, corr=2),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for d in ctx.metrics.overlap_model:
            window, comm, exposed = d.window_ns, d.comm_ns, d.exposed_ns
            if not window or not comm or exposed / window < t.min_exposed_comm_share:
                continue
            share = d.overlap_share
            if share is not None and share >= t.max_overlap_share:
                continue  # overlapped as DDP does it: what stays exposed is the tail
            if d.hideable_ns / window < t.min_exposed_comm_share:
                continue  # exposed, but waiting for a slower rank: TA008's
            top, wait = d.collectives, d.wait_ns
            which = ", ".join(f"{c['collective']} {c['exposed_ns'] / 1e6:.2f} ms" for c in top[:3])
            share = share or 0.0
            yield self.finding(
                ctx,
                f"rank {d.rank} GPU {d.device}: {exposed / 1e6:.2f} ms of communication "
                f"({exposed / window:.0%} of the window) runs with no compute beside it; "
                f"{share:.0%} of communication overlaps compute"
                + (f" ({which})" if which else "")
                + (
                    f"; {wait / 1e6:.2f} ms of collective time was waiting for other ranks"
                    if wait
                    else ""
                ),
                {
                    "window_ns": window,
                    "comm_ns": comm,
                    "exposed_comm_ns": exposed,
                    "exposed_comm_share": exposed / window,
                    "overlap_share": share,
                    "collectives": list(top),
                    "rank_wait_ns": wait,
                    "exposed_wait_ns": d.exposed_wait_ns,
                    "exposed_transfer_ns": d.exposed_transfer_ns,
                    "busbw_gbps": d.busbw_gbps,
                    "threshold_share": t.min_exposed_comm_share,
                    "threshold_overlap_share": t.max_overlap_share,
                    "critical_path_saving_ns": d.path_saving_ns,
                    "compute_alone_ns": d.compute_alone_ns,
                },
                Scope(d.rank, d.device),
                d.impact_ns,
                _advice(ctx, top[0]["collective"] if top else ""),
                # overlap hides at most the exposed communication, and no more of it than
                # the compute that runs alone
                ceiling_ns=d.ceiling_ns,
            )


def _advice(ctx: Context, collective: str) -> str:
    lib = "RCCL" if ctx.amd else "NCCL"
    kind = collective.lower()
    if "send" in kind or "recv" in kind:
        return (
            "Most exposed communication is point-to-point: pipeline-parallel activations (use "
            "more micro-batches or an interleaved 1F1B schedule, post sends/receives early on "
            "their own stream), or an all-to-all that NCCL runs as send/receive, such as "
            "TorchRec's sparse data distribution (pipeline it: TrainPipelineSparseDist)."
        )
    if "all_to_all" in kind or "alltoall" in kind:
        return (
            "Most exposed communication is all-to-all (expert dispatch/combine, embedding "
            "exchange): overlap it with compute by splitting the batch into chunks, or pipeline "
            "the exchange one batch ahead (TrainPipelineSparseDist for TorchRec)."
        )
    if ctx.uses("ddp"):
        return (
            f"DDP is in use but its {lib} all-reduce does not overlap the backward pass: check "
            "for find_unused_parameters=True, gradients reduced outside backward (no_sync, "
            "manual all_reduce), and tune bucket_cap_mb; static_graph=True helps."
        )
    if ctx.uses("fsdp"):
        return (
            "FSDP collectives run exposed: enable forward/backward prefetch, limit_all_gathers "
            "off, and check the wrap policy's unit size."
        )
    return (
        f"Overlap {lib} with compute: use DDP/FSDP (which all-reduce gradient buckets during the "
        "backward pass) instead of reducing after backward, or launch collectives async on their "
        "own stream."
    )
