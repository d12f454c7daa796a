"""Rank imbalance: each rank's own time per steady step, the slowest rank, why it is slow,
and what a step would save if it were like the others.

Job stage. A rank's **own time** in a step is the step without the time it spent waiting
for its peers: what the step would take if every peer arrived at each collective when this
rank does. Waiting for a peer shortens a rank's step only where both its GPU and its host
had time to spare:

- the GPU's: `exposed_wait_ns`, the time the rank's collectives waited for the last rank
  while no other kernel ran on its device, and `crowded_wait_ns`, the SMs the waiting
  kernels held away from the compute beside them (collectives.split);
- the host's: `host_blocked_ns`, the time the rank's host threads were blocked on the GPU
  (sync calls, and launch calls beyond `LAUNCH_BLOCK_NS`: the launch queue was full). A
  host that never blocks is the rank's bound whatever its GPU waits for.

So own_ns = step_ns - min(exposed_wait_ns + crowded_wait_ns, host_blocked_ns). The per-rank
figures are
medians over the steady steps.

**The slowest rank** has the largest own time. **Why** it is slow: its figures against the
median of the other ranks' per step: GPU work (`gpu_work_ns`: busy time less exposed
communication), the GPU's wait for the host (`host_wait_ns`, of which
`host_between_steps_ns` falls between steps: the input pipeline), and host syncs (`sync_ns`);
the cause is the one that differs most (`gpu`, `host` or `sync`).

**The price** (`impact_model`): what a step would save if the slowest rank were like the
median rank. Extra host time on one rank vanishes with its fix: the step would be the median
other rank's own time, saving own(slowest) - median(own of the others). Extra GPU work is
moved, not removed (even shards, balanced sequence lengths): every rank would do the mean
work, saving own(slowest) - mean(own of all ranks). Either way the price never exceeds the
slowest rank's own time less the median other rank's, and it comes from own times per step,
never from summed waits.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.timeline.intervals import in_ranges, union

#: A launch call (cudaLaunchKernel, cudaMemcpyAsync, ...) longer than this was blocked
#: beyond this point: the launch queue was full, the host was ahead of its GPU.
LAUNCH_BLOCK_NS = 50_000

#: Each rank's figures in `RankBalance.ranks` (after `rank`), medians per steady step.
RANK_FIGURES: tuple[str, ...] = (
    "steps",
    "step_ns",
    "own_ns",
    "gpu_work_ns",
    "host_wait_ns",
    "host_between_steps_ns",
    "sync_ns",
    "wait_ns",
    "exposed_wait_ns",
    "crowded_wait_ns",
    "exposed_transfer_ns",
    "host_blocked_ns",
    "slowest_steps",
)

#: The causes, in the order they are named when they tie.
CAUSES: tuple[str, ...] = ("gpu", "host", "sync")


def host_blocked(linked: pl.DataFrame, syncs: pl.LazyFrame, markers: pl.LazyFrame) -> pl.DataFrame:
    """rank, step, host_blocked_ns: time a rank's host threads were blocked on the GPU in each
    host step: inside sync calls, and inside launch calls beyond LAUNCH_BLOCK_NS (one launch
    call per launching thread and start, however many GPU operations it launched); unioned
    over the rank's threads, charged to the host step in which each blocked interval starts.

    `linked`: the GPU work with its launches (windows.linked_work); `syncs`:
    idle.sync_calls; `markers`: the host step ranges (rank, step, start_ns, end_ns)."""
    thread = ["rank", "pid", "tid"]
    launches = (
        linked.lazy()
        .filter(pl.col("launch_ns").is_not_null() & pl.col("launch_end_ns").is_not_null())
        .select(
            "rank",
            pid=pl.col("launch_pid"),
            tid=pl.col("launch_tid"),
            start_ns=pl.col("launch_ns") + LAUNCH_BLOCK_NS,
            end_ns=pl.col("launch_end_ns"),
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .unique()
    )
    waits = syncs.select(*thread, "start_ns", "end_ns").filter(
        pl.col("end_ns") > pl.col("start_ns")
    )
    # one union per rank: two threads blocked at once block the host once
    blocked = union(
        pl.concat([launches, waits], how="vertical_relaxed").select("rank", "start_ns", "end_ns"),
        ["rank"],
    )
    return (
        in_ranges(blocked, markers.select("rank", "step", "start_ns", "end_ns"), "rank")
        .group_by("rank", "step")
        .agg(host_blocked_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
        .sort("rank", "step")
        .collect()
    )


@dataclass(frozen=True, slots=True)
class RankBalance:
    """Each rank's steady steps compared (see the module docstring).

    - `rank_steps`: rank, step, step_ns, own_ns, gpu_work_ns, host_wait_ns, sync_ns,
      wait_ns, exposed_wait_ns, crowded_wait_ns, exposed_transfer_ns, host_blocked_ns, slowest (this
      rank had the largest own time of the step).
    - `ranks`: per rank, medians over its steps: steps, step_ns, own_ns, gpu_work_ns,
      host_wait_ns, host_between_steps_ns, sync_ns, wait_ns, exposed_wait_ns,
      crowded_wait_ns, exposed_transfer_ns, host_blocked_ns; slowest_steps (steps in which
      it was slowest).
    - `slowest`: the rank with the largest own time (None for fewer than two ranks);
      `others_own_ns`: the median own time of the other ranks; `mean_own_ns`: the mean of
      every rank's; `gap_ns`: own(slowest) - others_own_ns; `slowest_share`: the share of
      steps in which the slowest rank was the slowest.
    - `cause`: `gpu`, `host` or `sync` (what differs most), None where nothing does;
      `differences`: each cause's excess over the median other rank, ns per step.
    - `impact_ns`: the price per step (`impact_model`).
    """

    rank_steps: pl.DataFrame
    ranks: pl.DataFrame
    slowest: int | None
    others_own_ns: int | None
    mean_own_ns: int | None
    gap_ns: int | None
    slowest_share: float | None
    cause: str | None
    differences: dict[str, int]
    impact_ns: int | None


def impact_model(own: dict[int, float], slowest: int, cause: str | None) -> int:
    """What a step saves if rank `slowest` were like the median rank (`own`: each rank's own
    time per step): extra GPU work is spread over every rank (the mean), extra host or sync
    time vanishes (the median of the others). Never below 0, never above own(slowest) less
    the median of the others."""
    others = [v for r, v in own.items() if r != slowest]
    if not others:
        return 0
    ceiling = own[slowest] - statistics.median(others)
    target = statistics.fmean(own.values()) if cause == "gpu" else statistics.median(others)
    return max(0, round(min(ceiling, own[slowest] - target)))


_RANK_STEP_SCHEMA = {
    "rank": pl.Int32,
    "step": pl.Int64,
    "step_ns": pl.Int64,
    "own_ns": pl.Int64,
    "gpu_work_ns": pl.Int64,
    "host_wait_ns": pl.Int64,
    "sync_ns": pl.Int64,
    "wait_ns": pl.Int64,
    "exposed_wait_ns": pl.Int64,
    "crowded_wait_ns": pl.Int64,
    "exposed_transfer_ns": pl.Int64,
    "host_blocked_ns": pl.Int64,
    "slowest": pl.Boolean,
}


def balance(
    steps: pl.DataFrame,
    devices: pl.DataFrame,
    comm_steps: pl.DataFrame,
    blocked: pl.DataFrame,
) -> RankBalance:
    """Compare the ranks of a job. `steps`: Metrics.steps.steady (device steps, steady only);
    `devices`: Metrics.devices.summary (host_wait_between_steps_ns, window totals); `comm_steps`:
    CollectiveSplit.per_step; `blocked`: every rank's `host_blocked`."""
    per_step = (
        steps.group_by("rank", "step")
        .agg(
            step_ns=(pl.col("end_ns") - pl.col("start_ns")).max(),
            busy_ns=pl.col("busy_ns").max(),
            host_wait_ns=pl.col("host_wait_ns").max(),
            sync_ns=pl.col("sync_ns").max(),
        )
        .join(comm_steps, on=["rank", "step"], how="left")
        .join(blocked, on=["rank", "step"], how="left")
        .with_columns(
            pl.col(
                "wait_ns",
                "exposed_wait_ns",
                "crowded_wait_ns",
                "exposed_transfer_ns",
                "host_blocked_ns",
            )
            .fill_null(0)
            .cast(pl.Int64)
        )
        .with_columns(
            own_ns=pl.col("step_ns")
            - pl.min_horizontal(
                pl.col("exposed_wait_ns") + pl.col("crowded_wait_ns"), "host_blocked_ns"
            ),
            gpu_work_ns=(
                pl.col("busy_ns") - pl.col("exposed_wait_ns") - pl.col("exposed_transfer_ns")
            ).clip(lower_bound=0),
        )
        # compared only in steps every rank has (a rank's extra step has no peer to beat)
        .filter(pl.col("rank").n_unique().over("step") == pl.col("rank").n_unique())
        .with_columns(slowest=pl.col("own_ns") == pl.col("own_ns").max().over("step"))
        .sort("rank", "step")
    )
    rank_steps = per_step.select(list(_RANK_STEP_SCHEMA)).cast(_RANK_STEP_SCHEMA)  # type: ignore[arg-type]
    world = rank_steps["rank"].n_unique()
    between = devices.group_by("rank").agg(between=pl.col("host_wait_between_steps_ns").sum())
    med = [
        "step_ns",
        "own_ns",
        "gpu_work_ns",
        "host_wait_ns",
        "sync_ns",
        "wait_ns",
        "exposed_wait_ns",
        "crowded_wait_ns",
        "exposed_transfer_ns",
        "host_blocked_ns",
    ]
    ranks = (
        rank_steps.group_by("rank")
        .agg(
            steps=pl.len().cast(pl.Int64),
            **{c: pl.col(c).median().round().cast(pl.Int64) for c in med},
            slowest_steps=pl.col("slowest").sum().cast(pl.Int64),
        )
        .join(between, on="rank", how="left")
        .with_columns(
            host_between_steps_ns=(pl.col("between").fill_null(0) // pl.col("steps")).clip(
                upper_bound=pl.col("host_wait_ns")
            )
        )
        .drop("between")
        .sort("rank")
    )
    ranks = ranks.select("rank", *RANK_FIGURES)
    if world < 2:
        return RankBalance(rank_steps, ranks, None, None, None, None, None, None, {}, None)
    rows = {r["rank"]: r for r in ranks.iter_rows(named=True)}
    own = {r: float(v["own_ns"]) for r, v in rows.items()}
    slowest = max(own, key=lambda r: (own[r], -r))
    others = [r for r in rows if r != slowest]
    others_own = statistics.median(own[r] for r in others)

    def excess(col: str) -> int:
        values = [float(rows[r][col]) for r in others]
        return round(float(rows[slowest][col]) - statistics.median(values))

    differences = {
        "gpu": excess("gpu_work_ns"),
        "host": excess("host_wait_ns"),
        "sync": excess("sync_ns"),
    }
    top = max(CAUSES, key=lambda c: differences[c])
    cause = top if differences[top] > 0 else None
    steps_n = rows[slowest]["steps"]
    return RankBalance(
        rank_steps=rank_steps,
        ranks=ranks,
        slowest=slowest,
        others_own_ns=round(others_own),
        mean_own_ns=round(statistics.fmean(own.values())),
        gap_ns=round(own[slowest] - others_own),
        slowest_share=rows[slowest]["slowest_steps"] / steps_n if steps_n else None,
        cause=cause,
        differences=differences,
        impact_ns=impact_model(own, slowest, cause),
    )
