"""Steps that differ: steady steps of two kinds, a fast one and a slow one, and what the slow
steps do that the fast ones do not.

A loop whose steps differ by design (logging, an evaluation, a checkpoint or an optimizer
step every N steps: gradient accumulation) or by accident (a loader that keeps up every
other batch) has no single step time: its mean hides a slow kind that a fix can target.

Each steady step's time is the host's period: from its start to the next step's start (the
last step: its own range). Its tile on the GPU (from the end of the previous step's GPU work
to the end of its own, `windows.device_steps`) would put the idle of host work at a step's
end (a sleep, logging after the last launch) into the next step, which then looks slow: the
GPU catches up there. The GPU tile counts only where a step has no host range. Per rank,
with at least `MIN_STEPS` steady steps:

- the steps split into two kinds where the largest jump between their sorted times is at
  least `SPLIT_RATIO` (slowest fast step to fastest slow one) and `MIN_JUMP_SHARE` of the
  median step;
- the kinds **repeat with a period** `p >= 2` where every step is of the kind of the step
  `p` before it (one slow step every `p`, or several: two slow steps of every four), over at
  least two full cycles (`2 * p` steps or more): the shortest such period, read off the
  steps, never assumed;
- where the slow steps all lead, the host is still warming up (`trend: warm-up`); all
  trailing, the loop slows down (`trend: slowing`); where they are a few (at most a
  quarter) at no period, they are `outliers`; else the kinds are `irregular`.

What the slow steps do: the host ranges and calls (operators, annotations, runtime calls)
by name, counted in each step; a name the slow steps run at least once more per step than
the fast ones (by its mean count), with the extra host time it takes, longest first. None:
the slow steps do the same work, more slowly.

The extra time of the slow kind, spread over the steady steps, is `(slow - fast) * n_slow /
n` (the mean step's excess over the fast kind's).
"""

from __future__ import annotations

import statistics

import polars as pl

from traceanalyzer.analyses.timeline.intervals import in_ranges
from traceanalyzer.model import Kind, Timeline

#: Fewer steady steps than this tell no kinds apart.
MIN_STEPS = 4
#: The slowest fast step to the fastest slow step, at least.
SPLIT_RATIO = 1.25
#: ... and a jump of at least this share of the median step.
MIN_JUMP_SHARE = 0.10
#: Outliers: at most this share of the steps, at no period.
OUTLIER_SHARE = 0.25
#: Names listed as what the slow steps do.
LISTED = 5

#: Per rank with two kinds of steady step (`Causes.step_kinds`).
KINDS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "steps": pl.Int64(),
    "pattern": pl.String(),
    "period": pl.Int64(),
    "slow_steps": pl.List(pl.Int64()),
    "slow_ns": pl.Int64(),
    "fast_ns": pl.Int64(),
    "slow_busy_ns": pl.Int64(),
    "fast_busy_ns": pl.Int64(),
    "extra_ns": pl.Int64(),
}
#: What the slow steps do that the fast ones do not (`Causes.slow_work`).
SLOW_WORK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "name": pl.String(),
    "extra_calls": pl.Float64(),
    "extra_ns": pl.Int64(),
}
_HOST = [Kind.CPU_OP.value, Kind.ANNOTATION.value, Kind.RUNTIME.value, Kind.PYTHON.value]


def kinds_of(times: list[int]) -> tuple[str, int | None, list[int]] | None:
    """(pattern, period, the slow steps' positions) of step times in order, or None where
    they are of one kind (see the module docstring)."""
    n = len(times)
    if n < MIN_STEPS:
        return None
    ordered = sorted(times)
    cut, jump = max(
        ((i, ordered[i] - ordered[i - 1]) for i in range(1, n)), key=lambda c: (c[1], -c[0])
    )
    fast_max, slow_min = ordered[cut - 1], ordered[cut]
    if slow_min < SPLIT_RATIO * fast_max or jump < MIN_JUMP_SHARE * statistics.median(times):
        return None
    slow = [i for i, t in enumerate(times) if t >= slow_min]
    kind = [t >= slow_min for t in times]
    for p in range(2, n // 2 + 1):  # the shortest period over two full cycles, if any
        if all(kind[i] == kind[i + p] for i in range(n - p)):
            return "periodic", p, slow
    if slow == list(range(len(slow))):
        return "trend: warm-up", None, slow
    if slow == list(range(n - len(slow), n)):
        return "trend: slowing", None, slow
    if len(slow) <= OUTLIER_SHARE * n:
        return "outliers", None, slow
    return "irregular", None, slow


def step_kinds(
    timeline: Timeline, markers: pl.LazyFrame, steps: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kinds, slow work): per rank whose steady steps are of two kinds (KINDS_SCHEMA: the
    pattern, its period, the slow steps' numbers, the mean time and GPU busy time of each kind,
    and the slow kind's extra time spread over the steps), and what the slow steps run that
    the fast ones do not (SLOW_WORK_SCHEMA). `markers`: the steady steps' host ranges;
    `steps`: their GPU tiles per device (windows.device_steps, with busy_ns)."""
    # the host's period: start to the next step's start (the last step: its own range)
    host = markers.sort("rank", "start_ns").select(
        "rank",
        "step",
        host_ns=pl.coalesce(pl.col("start_ns").shift(-1).over("rank"), pl.col("end_ns"))
        - pl.col("start_ns"),
    )
    tiles = (
        steps.lazy()
        .group_by("rank", "step")
        .agg(
            gpu_ns=(pl.col("end_ns") - pl.col("start_ns")).max(),
            busy_ns=pl.col("busy_ns").max(),
        )
        .join(host, on=["rank", "step"], how="left")
        .with_columns(time_ns=pl.coalesce("host_ns", "gpu_ns"))
        .sort("rank", "step")
        .collect()
    )
    rows = []
    for rank in tiles["rank"].unique().sort().to_list():  # a loop over ranks, not events
        mine = tiles.filter(pl.col("rank") == rank)
        found = kinds_of(mine["time_ns"].to_list())
        if found is None:
            continue
        pattern, period, slow_at = found
        numbers, times, busy = (mine[c].to_list() for c in ("step", "time_ns", "busy_ns"))
        slow = set(slow_at)
        fast_at = [i for i in range(len(times)) if i not in slow]
        slow_ns = round(statistics.fmean(times[i] for i in slow_at))
        fast_ns = round(statistics.fmean(times[i] for i in fast_at))
        rows.append(
            {
                "rank": rank,
                "steps": len(times),
                "pattern": pattern,
                "period": period,
                "slow_steps": [numbers[i] for i in slow_at],
                "slow_ns": slow_ns,
                "fast_ns": fast_ns,
                "slow_busy_ns": round(statistics.fmean(busy[i] or 0 for i in slow_at)),
                "fast_busy_ns": round(statistics.fmean(busy[i] or 0 for i in fast_at)),
                "extra_ns": (slow_ns - fast_ns) * len(slow_at) // len(times),
            }
        )
    kinds = pl.DataFrame(rows, schema=KINDS_SCHEMA)
    # what the slow steps run is told where a finding or note names it
    told = kinds.filter(pl.col("pattern").is_in(["periodic", "outliers", "trend: warm-up"]))
    if told.height == 0:
        return kinds, pl.DataFrame(schema=SLOW_WORK_SCHEMA)
    return kinds, _slow_work(timeline, markers, told)


def _slow_work(timeline: Timeline, markers: pl.LazyFrame, kinds: pl.DataFrame) -> pl.DataFrame:
    """What the slow steps run that the fast ones do not (see the module docstring)."""
    ranges = markers.select("rank", "step", "start_ns", "end_ns").join(
        kinds.lazy().select("rank"), on="rank", how="semi"
    )
    slow = kinds.select("rank", "slow_steps").explode("slow_steps").rename({"slow_steps": "step"})
    calls = in_ranges(
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(_HOST))
        .select("rank", "start_ns", "end_ns", name=pl.col("name").cast(pl.String))
        .filter(~pl.col("name").str.starts_with("ProfilerStep#")),
        ranges,
        "rank",
    )
    per_step = calls.group_by("rank", "step", "name").agg(
        n=pl.len().cast(pl.Float64), ns=(pl.col("end_ns") - pl.col("start_ns")).sum()
    )
    counts = (
        ranges.group_by("rank")
        .agg(all_steps=pl.len())
        .join(slow.lazy().group_by("rank").agg(slow_steps=pl.len()), on="rank")
    )
    marked = per_step.join(
        slow.lazy().with_columns(slow=pl.lit(True)), on=["rank", "step"], how="left"
    ).with_columns(pl.col("slow").fill_null(False))
    sums = (
        marked.group_by("rank", "name")
        .agg(
            slow_n=pl.col("n").filter(pl.col("slow")).sum(),
            fast_n=pl.col("n").filter(~pl.col("slow")).sum(),
            slow_ns=pl.col("ns").filter(pl.col("slow")).sum(),
            fast_ns=pl.col("ns").filter(~pl.col("slow")).sum(),
        )
        .join(counts, on="rank")
        .with_columns(n_fast=pl.col("all_steps") - pl.col("slow_steps"))
        .with_columns(
            extra_calls=pl.col("slow_n") / pl.col("slow_steps")
            - pl.col("fast_n") / pl.col("n_fast"),
            extra_ns=(
                pl.col("slow_ns") / pl.col("slow_steps") - pl.col("fast_ns") / pl.col("n_fast")
            )
            .round()
            .cast(pl.Int64),
        )
        .filter(pl.col("extra_calls") >= 1)
        .sort(["rank", "extra_ns", "name"], descending=[False, True, False])
        .group_by("rank", maintain_order=True)
        .head(LISTED)
        .select(list(SLOW_WORK_SCHEMA))
    )
    return sums.collect().cast(SLOW_WORK_SCHEMA)  # type: ignore[arg-type]
