"""TA008: one rank makes the others wait inside collectives."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import polars as pl

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, launched, on_rank, step

_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def _rank_step(compute_us: float, allreduce_us: float) -> list[Event]:
    """One step of one rank: a GEMM, then an all-reduce that ends when the slowest rank
    arrives (so a fast rank's all-reduce kernel is long: it waits)."""
    return [
        step(1, 100, 500),
        *launched(105, 110, compute_us, 1, _GEMM),
        *launched(106, 110 + compute_us, allreduce_us, 2, _ALLREDUCE, stream=20),
    ]


class RankImbalance(Rule):
    """A slow rank makes every other rank wait inside the collectives.

    ## What it detects
    For a multi-rank trace, the time each rank's communication kernels spend waiting for the
    rank that arrives last (the n-th collective of every rank is matched; a kernel's wait is
    its duration minus the shortest duration of that collective). The rank that waits least
    is the slowest one. The rule fires when the other ranks wait, beyond what the slowest
    rank itself waits, a meaningful share of their window.

    ## Why it matters
    Collectives finish together: a job runs at the speed of its slowest rank. Every other
    rank's NCCL kernels look long, but they are idle, waiting. Speeding up the collective or
    overlapping it does not help; balancing the work does.

    ## How to fix
    Find what the slowest rank does differently: uneven data (variable sequence lengths,
    unbalanced sharding or embedding tables), extra work on one rank (logging, checkpointing,
    evaluation on rank 0), a slower or throttled GPU, a data loader that falls behind. Pack or
    bucket sequences by length, shard evenly, move rank-0 chores off the step.

    ## Known false positives
    A trace holding only some ranks of a job (waits are relative to the ranks present), and
    ranks whose clocks or collectives do not match one to one (pipeline parallelism, where
    send/recv pairs wait by design).

    ## Impact estimate
    The slowest rank's excess step time over the median other rank, per step: ranks finish a
    step together, so each rank's own work is the step time less its wait inside collectives,
    and the job would gain the median other rank's wait less the slowest rank's.
    """

    code = "TA008"
    slug = "rank-imbalance"
    title = "Rank imbalance: ranks wait for a slow rank in collectives"
    category = "rank_imbalance"
    default_severity = Severity.WARNING
    advice = (
        "Balance the ranks: even sharding and sequence-length bucketing, no rank-0-only "
        "chores inside the step, check the slowest rank's GPU and data loader."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_wait_share: float = field(
            default=0.05,
            metadata={"help": "mean wait of the other ranks as a share of their window"},
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
        m = ctx.metrics
        slow = m.slowest_rank
        if slow is None or m.rank_waits.height < 2:
            return
        waits = {r["rank"]: r for r in m.rank_waits.to_dicts()}
        base = waits[slow]["wait_ns"] if slow in waits else 0
        windows = {
            r: int(w)
            for r, w in m.devices.group_by("rank").agg(pl.col("window_ns").sum()).iter_rows()
        }
        others = [r for r in waits if r != slow]
        excess = {r: max(0, waits[r]["wait_ns"] - base) for r in others}
        window = sum(windows.get(r, 0) for r in others)
        total = sum(excess.values())
        if not window or total / window < t.min_wait_share:
            return
        worst = max(others, key=lambda r: (excess[r], -r))
        steps = {
            r: int(n)
            for r, n in m.steps.group_by("rank").agg(pl.col("step").n_unique()).iter_rows()
        }
        # the job gains the slowest rank's excess over the median rank: its own work
        # (step time less waiting in collectives) minus the median other rank's; with equal
        # step times that is the median other rank's wait less the slowest rank's
        per_rank = sorted(waits[r]["wait_ns"] / steps[r] for r in others if steps.get(r))
        impact = None
        if per_rank and steps.get(slow):
            mid = len(per_rank) // 2
            median = per_rank[mid] if len(per_rank) % 2 else (per_rank[mid - 1] + per_rank[mid]) / 2
            impact = max(0, round(median - base / steps[slow]))
        yield self.finding(
            ctx,
            f"rank {slow} is the slowest: the {len(others)} other rank(s) wait "
            f"{total / len(others) / 1e6:.2f} ms on average inside collectives "
            f"({total / window:.0%} of their window); rank {worst} waits most "
            f"({excess[worst] / 1e6:.2f} ms)",
            {
                "slowest_rank": slow,
                "slowest_rank_wait_ns": base,
                "mean_wait_ns": total // len(others),
                "wait_share": total / window,
                "waits": [
                    {
                        "rank": r,
                        "collectives": waits[r]["collectives"],
                        "comm_ns": waits[r]["comm_ns"],
                        "wait_ns": waits[r]["wait_ns"],
                    }
                    for r in sorted(waits)
                ],
                "threshold_share": t.min_wait_share,
            },
            Scope(rank=slow),
            impact,
        )
