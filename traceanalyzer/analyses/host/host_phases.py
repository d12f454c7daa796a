"""Where a step's host time goes: the host step cut into phases from the profiler's own
annotations and operator tree.

Rank stage. Each host step (its marker's range) is cut into elementary segments at every
boundary of the phases' intervals; a segment belongs to the first phase, in `PHASES` order,
whose intervals cover it, else to `other`:

- `data_loading`: `enumerate(DataLoader)...` ranges (the loader's `__next__`);
- `optimizer`: `Optimizer.step#...` and `Optimizer.zero_grad#...` ranges;
- `backward`: the autograd engine's operators (`autograd::engine::evaluate_function: ...`,
  on the autograd thread; the main thread waits in `.backward()` meanwhile; older profilers'
  autograd nodes, `CudnnConvolutionBackward`, `torch::autograd::AccumulateGrad`);
- `forward`: CPU operators that start before the step's first backward operator (all of
  them in a step without backward);
- `other`: the rest of the step: Python between operators, host time the profiler did not
  record as an operator (a `time.sleep`, an input pipeline without an annotation), and work
  after the backward pass outside the optimizer.

The phases of a step add up to its host range. Without CPU operators (an Nsight export
without them, a trace recorded without CPU activity) there are no phases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames, per_distinct
from traceanalyzer.analyses.timeline.intervals import in_ranges
from traceanalyzer.analyses.timeline.windows import OPTIMIZER_RANGE
from traceanalyzer.model import Kind, Timeline

#: The phases, by priority where they overlap, then `other`.
PHASES: tuple[str, ...] = ("data_loading", "optimizer", "backward", "forward")
ALL_PHASES: tuple[str, ...] = (*PHASES, "other")

_DATA = r"^enumerate\(DataLoader\)"
#: The autograd engine's operators; older profilers (torch < 1.10) name the autograd nodes
#: themselves (`CudnnConvolutionBackward`, `torch::autograd::AccumulateGrad`)
_BACKWARD = r"^autograd::engine::evaluate_function|^[A-Z]\w*Backward\d*$|^torch::autograd::"

_RANGE_KINDS = [Kind.ANNOTATION.value, Kind.CPU_OP.value]


@dataclass(frozen=True, slots=True)
class HostPhases:
    """Where the job's host time goes, by phase (Metrics.host_phases; empty without CPU
    operators).

    - `steps`: rank, step, step_ns and `<phase>_ns` of each steady host step (data_loading,
      optimizer, backward, forward, other; `host_phases`).
    - `kernels`: rank, phase, kernels, kernel_ns, tiny: the steady steps' kernels by the host
      phase that launched them (`kernel_phases`).

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "steps": {
            "rank": pl.Int32,
            "step": pl.Int64,
            "step_ns": pl.Int64,
            "data_loading_ns": pl.Int64,
            "optimizer_ns": pl.Int64,
            "backward_ns": pl.Int64,
            "forward_ns": pl.Int64,
            "other_ns": pl.Int64,
        },
        "kernels": {
            "rank": pl.Int32,
            "phase": pl.String,
            "kernels": pl.Int64,
            "kernel_ns": pl.Int64,
            "tiny": pl.Int64,
        },
    }

    steps: pl.DataFrame
    kernels: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.host_phases", self.SCHEMAS)


def _phase_of_name(name: pl.Expr) -> pl.Expr:
    """The phase a range's name alone tells (data loading, optimizer, backward), else null."""
    text = name.cast(pl.String)
    return (
        pl.when(text.str.contains(_DATA))
        .then(pl.lit("data_loading"))
        .when(text.str.contains(OPTIMIZER_RANGE))
        .then(pl.lit("optimizer"))
        .when(text.str.contains(_BACKWARD))
        .then(pl.lit("backward"))
    )


def segments(timeline: Timeline, markers: pl.LazyFrame) -> pl.LazyFrame:
    """The host steps cut into segments: rank, step, t (start), seg (length), phase."""
    host = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(_RANGE_KINDS))
        .select(
            "rank",
            "kind",
            # the regexes once per distinct name (as text per row, they took most of this)
            named=per_distinct(pl.col("name"), _phase_of_name, pl.String()),
            start_ns="start_ns",
            end_ns="end_ns",
        )
    )
    steps = markers.select("rank", "step", "start_ns", "end_ns")
    # the step marker itself (ProfilerStep#N, recorded as an operator by old profilers) is
    # no phase
    host = host.join(
        steps.select("rank", "start_ns", "end_ns"), on=["rank", "start_ns", "end_ns"], how="anti"
    )
    phased = in_ranges(
        host.with_columns(
            phase=pl.when(pl.col("named").is_not_null())
            .then(pl.col("named"))
            .when(pl.col("kind") == Kind.CPU_OP.value)
            .then(pl.lit("forward"))
        ).filter(pl.col("phase").is_not_null()),
        steps,
        "rank",
    )
    first_bwd = (
        phased.filter(pl.col("phase") == "backward")
        .group_by("rank", "step")
        .agg(bwd_start=pl.col("start_ns").min())
    )
    ranges = steps.rename({"start_ns": "s_start", "end_ns": "s_end"})
    # one join of the ranges to the steps' bounds and first backward operator
    bounds = ranges.join(first_bwd, on=["rank", "step"], how="left")
    spans = (
        phased.join(bounds, on=["rank", "step"])
        .filter(
            (pl.col("phase") != "forward")
            | pl.col("bwd_start").is_null()
            | (pl.col("start_ns") < pl.col("bwd_start"))
        )
        .with_columns(
            start_ns=pl.max_horizontal("start_ns", "s_start"),
            end_ns=pl.min_horizontal("end_ns", "s_end"),
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
    )
    # every boundary +1/-1 per phase; the step's own start and end bound the segments
    delta = {p: pl.when(pl.col("phase") == p).then(pl.col("d")).otherwise(0) for p in PHASES}
    edges = pl.concat(
        [
            spans.select("rank", "step", "phase", t="start_ns", d=pl.lit(1)),
            spans.select("rank", "step", "phase", t="end_ns", d=pl.lit(-1)),
            ranges.select("rank", "step", phase=pl.lit(None, pl.String), t="s_start", d=pl.lit(0)),
            ranges.select("rank", "step", phase=pl.lit(None, pl.String), t="s_end", d=pl.lit(0)),
        ]
    )
    # Each span's +1 and -1 fall in its own step, so every step's sums end at 0: one running
    # sum over the edges sorted by step and time is each step's own, and its value at the last
    # edge of a time is the cover from that time on (no group-by of the edges by time). A
    # segment runs to the step's next time.
    same_step = (pl.col("rank").shift(-1) == pl.col("rank")) & (
        pl.col("step").shift(-1) == pl.col("step")
    )
    key = ["rank", "step", "t"]
    last_at_t = ((pl.col("t").shift(-1) != pl.col("t")) | ~same_step.fill_null(False)).fill_null(
        True
    )
    cover = (
        edges.with_columns(**{f"_{p}": delta[p] for p in PHASES})
        .select(*key, *(f"_{p}" for p in PHASES))
        .sort(key)
        .with_columns(pl.col(f"_{p}").cum_sum() for p in PHASES)
        .filter(last_at_t)
        .with_columns(seg=pl.when(same_step).then(pl.col("t").shift(-1) - pl.col("t")).otherwise(0))
    )
    owner = pl.lit("other")
    for p in reversed(PHASES):
        owner = pl.when(pl.col(f"_{p}") > 0).then(pl.lit(p)).otherwise(owner)
    return cover.with_columns(phase=owner).select("rank", "step", "t", "seg", "phase")


def host_phases(
    timeline: Timeline, markers: pl.LazyFrame, segs: pl.LazyFrame | None = None
) -> pl.DataFrame:
    """rank, step, step_ns (the host range), and `<phase>_ns` for ALL_PHASES (adding up to
    step_ns); no rows without CPU operators. `markers`: rank, step, start_ns, end_ns;
    `segs`: `segments(timeline, markers)` where already made."""
    steps = markers.select("rank", "step", "start_ns", "end_ns")
    per_phase = (
        (segments(timeline, markers) if segs is None else segs)
        .group_by("rank", "step")
        .agg(**{f"{p}_ns": pl.col("seg").filter(pl.col("phase") == p).sum() for p in ALL_PHASES})
    )
    has_ops = (
        timeline.events.lazy().filter(pl.col("kind") == Kind.CPU_OP.value).select("rank").unique()
    )
    return (
        steps.join(has_ops, on="rank", how="semi")
        .join(per_phase, on=["rank", "step"], how="left")
        .select(
            "rank",
            "step",
            step_ns=pl.col("end_ns") - pl.col("start_ns"),
            **{f"{p}_ns": pl.col(f"{p}_ns").fill_null(0).cast(pl.Int64) for p in ALL_PHASES},
        )
        .sort("rank", "step")
        .collect()
    )


def host_phase_medians(phases: pl.DataFrame, rank: int) -> dict[str, int] | None:
    """A rank's host time per steady step by phase (medians over its steps; null without
    CPU operators): analyses/host/host_phases.py."""
    mine = phases.filter(pl.col("rank") == rank)
    if mine.height == 0:
        return None
    return {p: round(float(mine[f"{p}_ns"].median() or 0)) for p in ALL_PHASES}  # type: ignore[arg-type]


#: A kernel shorter than this is tiny: it runs faster than a launch costs the host.
TINY_KERNEL_NS = 10_000


def kernel_phases(segs: pl.LazyFrame, linked: pl.DataFrame) -> pl.DataFrame:
    """rank, phase, kernels, kernel_ns, tiny (kernels under TINY_KERNEL_NS): the kernels of
    the steady steps by the phase of the host step in which they were launched (their launch
    call's start). `segs`: `segments`; `linked`: the GPU work with its launches
    (windows.linked_work)."""
    segs = segs.with_columns(t_end=pl.col("t") + pl.col("seg"))
    launched = (
        linked.lazy()
        .filter((pl.col("kind") == Kind.KERNEL.value) & pl.col("launch_ns").is_not_null())
        .select("rank", "launch_ns", dur=pl.col("end_ns") - pl.col("start_ns"))
        .sort("launch_ns")
    )
    return (
        launched.join_asof(
            segs.sort("t"),
            left_on="launch_ns",
            right_on="t",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("launch_ns") < pl.col("t_end"))
        .group_by("rank", "phase")
        .agg(
            kernels=pl.len().cast(pl.Int64),
            kernel_ns=pl.col("dur").sum(),
            tiny=(pl.col("dur") < TINY_KERNEL_NS).sum().cast(pl.Int64),
        )
        .sort("rank", "phase")
        .collect()
    )


def optimizer_tiny_share(kernel_phases: pl.DataFrame, rank: int) -> float | None:
    """The share of `rank`'s tiny kernels (steady steps) launched inside optimizer.step
    (`kernel_phases`' rows); None where it has none (no CPU operators, no tiny kernel)."""
    rows = kernel_phases.filter(pl.col("rank") == rank)
    tiny = int(rows["tiny"].sum() or 0)
    if not tiny:
        return None
    return int(rows.filter(pl.col("phase") == "optimizer")["tiny"].sum() or 0) / tiny
