"""TA008: one rank is slower than the others, and they wait for it inside collectives."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from traceanalyzer.analyses.distributed.imbalance import RankBalance
from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, launch, launched, on_rank, step

_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def _rank_step(compute_us: float, allreduce_us: float) -> list[Event]:
    """One step of one rank: a GEMM, then an all-reduce that ends when the slowest rank
    arrives (so a fast rank's all-reduce kernel is long: it waits), then the host waits for
    the step's end (`loss.item()`: a sync)."""
    end = 110 + compute_us + allreduce_us
    return [
        step(1, 100, 500),
        *launched(105, 110, compute_us, 1, _GEMM),
        *launched(106, 110 + compute_us, allreduce_us, 2, _ALLREDUCE, stream=20),
        launch(108, end - 108, 3, name="cudaStreamSynchronize"),
    ]


#: What bounds the slowest rank, by the cause of its slowness (the verdict's `bound_by`).
BOUND_OF_CAUSE = {"host": "host", "gpu": "gpu_compute", "sync": "sync"}


class RankImbalance(Rule):
    """One rank is slower than the others, and they wait for it inside collectives.

    ## What it detects
    For a multi-rank job, each rank's **own time** per steady step: its step without the
    time it spent waiting for its peers (the collectives are matched across ranks, and a
    rank's wait for the last arrival costs its step only where its GPU ran nothing else
    beside it, or as the SMs the waiting kernel held from the compute beside it, and where
    its host was blocked on the GPU meanwhile; `docs/report.md`, Ranks). The rank with the
    largest own time is the slowest. It fires when that rank is the slowest in most steady
    steps (`min_slowest_share`) and its own time exceeds the median other rank's by at least
    `min_gap_share` of a step. Where no rank is the slowest most of the time, or the ranks
    differ by less than that, it is jitter, not imbalance: no finding.

    The finding says why the slow rank is slow, from its figures per step against the
    median other rank's: its GPU waiting for its host (between steps: the input pipeline;
    inside steps: CPU work), its GPU doing more work (uneven shards or sequence lengths), or
    its host syncing more. The advice follows the cause.

    ## Why it matters
    Collectives finish together: a job runs at the speed of its slowest rank. Every other
    rank's NCCL kernels look long, but they are waiting. Speeding up the collective or
    overlapping it does not help; fixing what makes the slow rank slow does.

    ## How to fix
    Slow on the host between steps: the slow rank's input pipeline (more DataLoader workers,
    pinned memory and prefetching, the same preprocessing on every rank) or rank-only chores
    between steps (logging, checkpointing, evaluation on rank 0). Slow on the host inside
    steps: CPU work that only that rank does, or CPU contention on its cores. More GPU work:
    even shards, sequence-length bucketing or packing to equal tokens per rank, balanced
    embedding tables; where the work is equal, a throttled or slower GPU.

    ## Known false positives
    A trace holding only some ranks of a job (waits are relative to the ranks present), and
    ranks whose collectives do not match one to one (pipeline parallelism, where send/recv
    pairs wait by design). With three steady steps or fewer, which rank is the slowest is
    weak evidence (two ranks give "slowest in 2 of 3" by chance every time): the finding is
    an info that says so ("not sure: ... by chance 100% of the time"; `evidence.sure`,
    `evidence.chance_share`) unless the rank is the slowest in every step by twice the gap
    threshold.

    ## Impact estimate
    What a step would save if the slowest rank were like the median rank, from each rank's
    own time per steady step (medians over the steps), never from summed waits. Extra host
    or sync time vanishes with its fix: the step would be the median other rank's own time,
    saving own(slowest) - median(others). Extra GPU work is moved, not removed: with even
    shards every rank does the mean work, saving own(slowest) - mean(all ranks). The price
    never exceeds own(slowest) - median(others).
    """

    code = "TA008"
    slug = "rank-imbalance"
    title = "Rank imbalance: ranks wait for a slow rank in collectives"
    category = "rank_imbalance"
    claims = "rank_gap"
    default_severity = Severity.WARNING
    advice = (
        "Balance the ranks: even sharding and sequence-length bucketing, no rank-0-only "
        "chores inside the step, check the slowest rank's GPU and data loader."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_gap_share: float = field(
            default=0.05,
            metadata={
                "help": "the slowest rank's own time over the median other rank's, as a share "
                "of the step, to trigger"
            },
        )
        min_slowest_share: float = field(
            default=0.5,
            metadata={
                "help": "fires only when the same rank is the slowest in more than this share "
                "of the steady steps (else it is jitter)"
            },
        )

    # rank 1 computes 300 µs, rank 0 only 100 µs: rank 0 waits 200 µs in the all-reduce
    example_bad: ClassVar[list[Event]] = [
        *on_rank(0, _rank_step(100, 250)),
        *on_rank(1, _rank_step(300, 50)),
    ]
    example_good: ClassVar[list[Event]] = [
        *on_rank(0, _rank_step(300, 50)),
        *on_rank(1, _rank_step(300, 50)),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        b = ctx.metrics.balance
        slow = b.slowest
        if slow is None or b.gap_ns is None or b.slowest_share is None or b.others_own_ns is None:
            return
        rows = {r["rank"]: r for r in b.ranks.iter_rows(named=True)}
        step = rows[slow]["step_ns"]
        if not step or b.slowest_share <= t.min_slowest_share:
            return
        if b.gap_ns < t.min_gap_share * step:
            return
        others = [r for r in sorted(rows) if r != slow]
        waiting = sum(rows[r]["wait_ns"] for r in others) / len(others)
        exposed = sum(rows[r]["exposed_wait_ns"] for r in others) / len(others)
        steps_n = rows[slow]["steps"]
        slowest_n = rows[slow]["slowest_steps"]
        chance = chance_share(len(rows), steps_n, slowest_n)
        # with few steps, an order a coin would give is no evidence: the rank must be the
        # slowest in every step, by a wide margin, for more than an info
        sure = steps_n > FEW_STEPS or (
            slowest_n == steps_n and b.gap_ns >= SURE_GAP_FACTOR * t.min_gap_share * step
        )
        how_sure = (
            ""
            if sure
            else f"not sure: with {steps_n} steps this order comes by chance "
            f"{chance:.0%} of the time; "
        )
        yield self.finding(
            ctx,
            how_sure + f"rank {slow} is the slowest of {len(rows)} ranks (in {slowest_n} "
            f"of {steps_n} steady steps): {rows[slow]['own_ns'] / 1e6:.2f} ms of its own per "
            f"step against {b.others_own_ns / 1e6:.2f} ms for the median other rank; "
            + _why(b, rows, slow)
            + f"; the others wait for it {_ms(waiting)} per step inside collectives "
            f"({_ms(exposed)} of it with nothing else on their GPU)",
            {
                "slowest_rank": slow,
                "cause": b.cause,
                "bound_by": BOUND_OF_CAUSE.get(b.cause or "", "mixed"),
                "own_ns": {str(r): rows[r]["own_ns"] for r in sorted(rows)},
                "others_own_ns": b.others_own_ns,
                "mean_own_ns": b.mean_own_ns,
                "gap_ns": b.gap_ns,
                "slowest_share": b.slowest_share,
                "differences_ns": dict(b.differences),
                "impact_model": "mean" if b.cause == "gpu" else "median_others",
                "slowest_rank_wait_ns": rows[slow]["wait_ns"],
                "mean_wait_ns": round(waiting),
                "waits": [
                    {
                        "rank": r,
                        "wait_ns": rows[r]["wait_ns"],
                        "exposed_wait_ns": rows[r]["exposed_wait_ns"],
                        "crowded_wait_ns": rows[r]["crowded_wait_ns"],
                        "host_blocked_ns": rows[r]["host_blocked_ns"],
                    }
                    for r in sorted(rows)
                ],
                "threshold_gap_share": t.min_gap_share,
                "threshold_slowest_share": t.min_slowest_share,
                "chance_share": chance,
                "sure": sure,
            },
            Scope(rank=slow),
            b.impact_ns,
            _advice(b, rows, slow),
            severity=None if sure else Severity.INFO,
            ceiling_ns=b.gap_ns,
        )


#: With this many steady steps or fewer, the slowest rank's order is weak evidence.
FEW_STEPS = 3
#: ... and it takes the slowest in every step, by this many times the gap threshold, to be
#: more than an info.
SURE_GAP_FACTOR = 2


def chance_share(ranks: int, steps: int, slowest: int) -> float:
    """The chance that some rank is the slowest in `slowest` of `steps` steps or more where
    every rank is equally likely the slowest in each (a binomial tail, times the ranks,
    capped at 1): 2 ranks, 2 of 3 steps: 1.0; 3 of 3: 0.25; 8 of 8: 0.008."""
    if ranks < 2 or steps < 1:
        return 1.0
    p = 1 / ranks
    tail = sum(
        math.comb(steps, k) * p**k * (1 - p) ** (steps - k) for k in range(slowest, steps + 1)
    )
    return min(1.0, ranks * tail)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _median_of(rows: dict[int, dict[str, Any]], slow: int, col: str) -> float:
    values = sorted(float(rows[r][col]) for r in rows if r != slow)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _why(b: RankBalance, rows: dict[int, dict[str, Any]], slow: int) -> str:
    """Why the slowest rank is slow, in words, from the cause that differs most."""
    r = rows[slow]
    if b.cause == "host":
        between = r["host_between_steps_ns"]
        where = (
            f"{_ms(between)} of it between steps: the input pipeline"
            if between >= r["host_wait_ns"] / 2
            else f"{_ms(r['host_wait_ns'] - between)} of it inside steps: CPU work"
        )
        return (
            f"it is slow on the host: its GPU waits {_ms(r['host_wait_ns'])} per step for its "
            f"host ({where}), the median other rank's "
            f"{_ms(_median_of(rows, slow, 'host_wait_ns'))}"
        )
    if b.cause == "gpu":
        other = _median_of(rows, slow, "gpu_work_ns")
        ratio = f"{r['gpu_work_ns'] / other:.1f}x" if other else "more than"
        return (
            f"its GPU does {ratio} the work of the median other rank per step "
            f"({_ms(r['gpu_work_ns'])} against {_ms(other)} of kernels): uneven shards or "
            "sequence lengths, or a slower GPU"
        )
    if b.cause == "sync":
        return (
            f"its GPU waits {_ms(r['sync_ns'])} per step for host syncs, the median other "
            f"rank's {_ms(_median_of(rows, slow, 'sync_ns'))}"
        )
    return "its host, GPU work and syncs do not explain it alone"


def _advice(b: RankBalance, rows: dict[int, dict[str, Any]], slow: int) -> str:
    if b.cause == "host":
        r = rows[slow]
        if r["host_between_steps_ns"] >= r["host_wait_ns"] / 2:
            return (
                f"Rank {slow}'s host is late between steps: look at its input pipeline (more "
                "DataLoader workers, pin_memory and prefetching, the same preprocessing on every "
                "rank) and at chores only it does between steps (logging, checkpointing, "
                "evaluation)."
            )
        return (
            f"Rank {slow}'s host is slower inside the step: look for CPU work only it does "
            "(logging, metrics, rank-0 chores) and CPU contention on its cores (other "
            "processes, too many threads); cutting host work on every rank (torch.compile, "
            "CUDA graphs, a fused optimizer) helps too."
        )
    if b.cause == "gpu":
        return (
            f"Give every rank the same work: rank {slow} gets more (uneven shards, longer "
            "sequences): shard evenly, bucket or pack sequences to equal tokens per rank, "
            "balance embedding tables; where the work is equal, check its GPU's clocks and "
            "temperature."
        )
    if b.cause == "sync":
        return (
            f"Remove the host syncs only rank {slow} makes (.item(), .cpu(), printing or "
            "logging tensors on one rank) or move them out of the step."
        )
    return RankImbalance.advice
