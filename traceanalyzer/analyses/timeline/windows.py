"""Windows: the analysed span of each device, and each step projected onto GPU work.

The contract's default window runs from the first to the last step marker (torch's
`ProfilerStep#N`), projected onto each device's GPU work. Projection: a GPU operation belongs
to the step during which the host *launched* it (the runtime call with the same correlation
id started inside the step's host range). On each device, step N then ends when the last GPU
operation launched in it ends, and starts where step N-1 ended (the first step starts at its
marker's start, or once the GPU work queued before it is done, and never after its first GPU
operation). Steps therefore tile the window, and the idle time while the GPU
waits for a step's launches (a slow input pipeline, a sleep, a sync) is charged to the step
that waited: step time is the time between two step completions on the GPU.

Without step markers the window of a device runs from its first to its last GPU operation
(`basis = "trace"`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.model import GPU_KINDS, Kind, Timeline

_HOST_RANGE_KINDS = [Kind.ANNOTATION.value, Kind.CPU_OP.value]
DEVICE_KEY = ["rank", "device"]

#: torch.profiler's step markers: the default for Chrome traces.
PROFILER_STEP_PATTERN = r"^ProfilerStep#\d+$"
#: NVTX ranges that mark steps in an Nsight export: `step_12`, `step 3`, `iteration 3`,
#: `iter_7`, `ProfilerStep#5`, `train_step`, `training_step 4` (case-insensitive).
NVTX_STEP_PATTERN = (
    r"(?i)^(?:ProfilerStep#\d+|(?:train(?:ing)?[ _-]?)?step(?:[ _#:-]*\d+)?"
    r"|iter(?:ation)?[ _#:-]*\d+)$"
)


def default_step_pattern(source_format: str) -> str:
    """The step pattern used when the user gives none."""
    return PROFILER_STEP_PATTERN if source_format == "chrome" else NVTX_STEP_PATTERN


def step_markers(timeline: Timeline, pattern: str) -> pl.LazyFrame:
    """Host ranges whose name matches `pattern`: rank, step, name, start_ns, end_ns.

    The step number is the first number in the name; ranges without one (`train_step`) are
    numbered in order of start per rank. Ranges with the same (rank, number) (a ProfilerStep
    recorded both as an annotation and as an operator) merge into one.
    """
    name = pl.col("name").cast(pl.String)
    found = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(_HOST_RANGE_KINDS))
        .select("rank", "name", "start_ns", "end_ns")
        .filter(name.str.contains(pattern))
        .with_columns(name=name, number=name.str.extract(r"(\d+)", 1).cast(pl.Int64))
        .sort("rank", "start_ns")
    )
    numbered = found.with_columns(
        step=pl.coalesce(
            pl.col("number"),
            pl.int_range(pl.len(), dtype=pl.Int64).over("rank") + 1,
        )
    )
    return (
        numbered.group_by("rank", "step")
        .agg(pl.col("name").first(), pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort("rank", "start_ns")
    )


#: Launch columns `linked_work` keeps besides `launch_ns` (for the critical path and the
#: clock check).
LAUNCH_EXTRA = ("launch_end_ns", "launch_pid", "launch_tid")
#: The columns `linked_work` adds to the GPU work, in order.
LINK_COLUMNS = ("launch_ns", *LAUNCH_EXTRA, "step")

#: The optimizer's ranges (`Optimizer.step#...`, `Optimizer.zero_grad#...`): the host phase
#: (analyses/host/host_phases.py) and the kernels outside it (analyses/gpu/casts.py).
OPTIMIZER_RANGE = r"^Optimizer\.(?:step|zero_grad)#"


#: The GPU work columns the critical path reads (critical_graph.gpu_ops), besides the launch.
CRITICAL_PATH_COLUMNS = (
    "rank",
    "device",
    "stream",
    "kind",
    "name",
    "start_ns",
    "end_ns",
    "correlation",
    "collective",
)


def launch_keys(timeline: Timeline, markers: pl.LazyFrame) -> pl.DataFrame | None:
    """The rows of `linked_work` without their columns: `_row` (the GPU operation's row
    in the events), `_call` (its launch call's row; null where none), `launch_ns` and
    `step`, in the final order. None where a GPU operation matches several calls (then the
    grouped table, the earliest call, is used: see `linked_work`).

    The join, the sort and the join_asof run on row numbers and keys only: the launch
    columns and the (wide) GPU work columns are gathered by `linked_work`, once.
    """
    events = timeline.events
    lo, hi = events.select(lo=pl.col("correlation").min(), hi=pl.col("correlation").max()).row(0)
    # one Int64 key per (rank, correlation) where correlations fit in 32 bits: a join on two
    # columns encodes every row and takes twice the memory
    packed = lo is None or (lo >= 0 and hi < 1 << 32)
    key = (
        [(pl.col("rank").cast(pl.Int64) * (1 << 32) + pl.col("correlation")).alias("_key")]
        if packed
        else [pl.col("correlation")]
    )
    on = "_key" if packed else ["rank", "correlation"]
    calls = (
        events.lazy()
        .with_row_index("_call")
        .filter(
            pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value])
            & pl.col("correlation").is_not_null()
        )
        .select("_call", *key if packed else ["rank", "correlation"])
    )
    gpu = (
        events.lazy()
        .with_row_index("_row")
        .filter(pl.col("kind").is_in([k.value for k in GPU_KINDS]))
        .select("_row", "rank", *key)
    )
    # the in-memory engine runs these plans (a join; a sort and a join_asof) in less than
    # half the time of the streaming one
    joined = (
        gpu.join(calls, on=on, how="left", maintain_order="left")
        .select("_row", "rank", "_call")
        .collect(engine="in-memory")
    )
    if joined.height != gpu.select(pl.len()).collect().item():
        return None
    launch = joined.with_columns(launch_start_ns=events["start_ns"].gather(joined["_call"]))
    return (
        _with_step(launch.lazy(), markers)
        .select("_row", "_call", "launch_ns", "step")
        .collect(engine="in-memory")
    )


def linked_work(
    timeline: Timeline,
    markers: pl.LazyFrame,
    keys: pl.DataFrame | None,
    columns: Sequence[str] | None = None,
) -> pl.DataFrame:
    """The GPU work with its launch (`LINK_COLUMNS`: `launch_ns`, the start of its runtime
    launch call, the call's end, pid and tid, and its `step`, null when none) from
    `launch_keys`; with `columns`, only those GPU work columns
    (plus the launch columns and `step`)."""
    if keys is None:
        work = _with_step(timeline.launch_links().drop("launch_name"), markers).collect(
            engine="in-memory"
        )
        return work if columns is None else work.select(*columns, *LINK_COLUMNS)
    events = timeline.events
    wide = events if columns is None else events.select(columns)
    call = keys["_call"]
    return wide[keys["_row"]].with_columns(
        keys["launch_ns"],
        events["end_ns"].gather(call).alias("launch_end_ns"),
        events["pid"].gather(call).alias("launch_pid"),
        events["tid"].gather(call).alias("launch_tid"),
        keys["step"],
    )


def _with_step(links: pl.LazyFrame, markers: pl.LazyFrame) -> pl.LazyFrame:
    work = links.rename({"launch_start_ns": "launch_ns"})
    linked = (
        work.filter(pl.col("launch_ns").is_not_null())
        .sort("launch_ns")
        .join_asof(
            markers.select("rank", "step", step_start_ns="start_ns", step_end_ns="end_ns").sort(
                "step_start_ns"
            ),
            left_on="launch_ns",
            right_on="step_start_ns",
            by="rank",
            strategy="backward",
            check_sortedness=False,  # both sides are sorted by the key, globally
        )
        .with_columns(
            step=pl.when(pl.col("launch_ns") < pl.col("step_end_ns")).then(pl.col("step"))
        )
        .drop("step_start_ns", "step_end_ns")
    )
    unlinked = work.filter(pl.col("launch_ns").is_null()).with_columns(step=pl.lit(None, pl.Int64))
    return pl.concat([linked, unlinked], how="vertical")


def apart_from_previous(key: list[str]) -> pl.Expr:
    """Whether a step's marker (`m_start`, `m_end`, rows in step order per `key`) starts after
    more host time outside every step than its own range lasts: 5 s of compilation between
    two 12 ms NVTX steps, not the few ms between two ProfilerStep ranges of a training loop
    (that time is the next step's: its input pipeline)."""
    outside = pl.col("m_start") - pl.col("m_end").shift(1).over(key)
    return (outside > pl.col("m_end") - pl.col("m_start")).fill_null(False)


def device_steps(work: pl.LazyFrame, markers: pl.LazyFrame) -> pl.LazyFrame:
    """Each step on each device: rank, device, step, name, start_ns, end_ns (tiling the window).

    A device's first step starts at its marker's start (the host's time before its first
    launch, a slow input pipeline say, is the step's), or later, once the GPU work queued
    before it (not launched in a step) is done, and never after its own first GPU operation.
    A later step starts where the previous one's GPU work ended, except after time outside
    every step on the host (see `apart_from_previous`: a warm-up, an evaluation, a checkpoint
    between NVTX step ranges): then it opens at its own marker the way a first step does,
    and that time belongs to no step.
    """
    per_step = (
        work.filter(pl.col("step").is_not_null())
        .group_by("rank", "device", "step")
        .agg(first_ns=pl.col("start_ns").min(), last_ns=pl.col("end_ns").max())
        .sort("rank", "device", "first_ns")
    )
    first = per_step.group_by(DEVICE_KEY).agg(d_first=pl.col("first_ns").min())
    queued = (
        work.filter(pl.col("step").is_null())
        .join(first, on=DEVICE_KEY)
        .filter(pl.col("start_ns") < pl.col("d_first"))
        .group_by(DEVICE_KEY)
        .agg(pre_end=pl.col("end_ns").max())
    )
    done = pl.col("last_ns").cum_max().over(DEVICE_KEY)  # monotonic completions
    opening = pl.min_horizontal(
        "first_ns", pl.max_horizontal("m_start", pl.col("pre_end").fill_null(pl.col("m_start")))
    )
    return (
        per_step.with_columns(end_ns=done)
        .join(
            markers.select("rank", "step", "name", m_start="start_ns", m_end="end_ns"),
            on=["rank", "step"],
            how="left",
        )
        .join(queued, on=DEVICE_KEY, how="left")
        .sort("rank", "device", "first_ns")  # joins do not keep the order the shift needs
        .with_columns(
            prev_end=pl.col("end_ns").shift(1).over(DEVICE_KEY),
            apart=apart_from_previous(DEVICE_KEY),
        )
        .with_columns(
            start_ns=pl.when(pl.col("apart"))
            .then(pl.max_horizontal("prev_end", pl.min_horizontal("first_ns", pl.col("m_start"))))
            .otherwise(
                pl.coalesce(
                    pl.col("prev_end"),
                    pl.coalesce(opening, pl.col("first_ns")),
                )
            )
        )
        .select("rank", "device", "step", "name", "start_ns", "end_ns", "first_ns")
        .sort("rank", "device", "start_ns")
    )


def device_windows(
    work: pl.LazyFrame, steps: pl.LazyFrame, markers: pl.LazyFrame, by_steps: bool
) -> pl.LazyFrame:
    """The window of each (rank, device): rank, device, start_ns, end_ns."""
    if by_steps:
        projected = steps.group_by(DEVICE_KEY).agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        # a device none of whose work was launched inside a step (unlinked work): fall back
        # to its GPU work that starts inside the host span of the steps
        span = markers.group_by("rank").agg(lo=pl.col("start_ns").min(), hi=pl.col("end_ns").max())
        fallback = (
            work.join(span, on="rank")
            .filter((pl.col("start_ns") >= pl.col("lo")) & (pl.col("start_ns") < pl.col("hi")))
            .group_by(DEVICE_KEY)
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
            .join(projected, on=DEVICE_KEY, how="anti")
        )
        return pl.concat([projected, fallback]).sort(DEVICE_KEY)
    return (
        work.group_by(DEVICE_KEY)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort(DEVICE_KEY)
    )


def outside_window(work: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """GPU work outside each device's window: rank, device, before_count, before_ns (work that
    started before the window, e.g. launched before the first step or in a warm-up step, and
    its time before the window's start), after_count, after_ns (likewise after its end).
    Devices with nothing outside are left out."""
    w = work.select(*DEVICE_KEY, "start_ns", "end_ns").join(
        windows.select(*DEVICE_KEY, w_start="start_ns", w_end="end_ns"), on=DEVICE_KEY
    )
    before = pl.col("start_ns") < pl.col("w_start")
    after = pl.col("end_ns") > pl.col("w_end")
    before_ns = pl.min_horizontal("end_ns", "w_start") - pl.col("start_ns")
    after_ns = pl.col("end_ns") - pl.max_horizontal("start_ns", "w_end")
    return (
        w.filter(before | after)
        .group_by(DEVICE_KEY)
        .agg(
            before_count=before.sum().cast(pl.Int64),
            before_ns=pl.when(before).then(before_ns).otherwise(0).sum().cast(pl.Int64),
            after_count=after.sum().cast(pl.Int64),
            after_ns=pl.when(after).then(after_ns).otherwise(0).sum().cast(pl.Int64),
        )
        .sort(DEVICE_KEY)
    )


@dataclass(frozen=True, slots=True)
class StepCounts:
    """How many steady steps each device's window holds: what the impact models divide a
    window's time by to price a finding per step.

    `by_steps`: whether step markers defined the windows (`Metrics.basis == "steps"`);
    `counts`: (rank, device) -> its rows in `Metrics.steps.steady`; `ranks`: rank -> its distinct
    steady steps (over its devices). Without step markers a window counts as one step, and
    both are empty."""

    by_steps: bool
    counts: Mapping[tuple[int, int], int]
    ranks: Mapping[int, int]

    def on(self, rank: int, device: int) -> int:
        """How many steps the window of (rank, device) holds (1 without step markers; 0 for a
        device without steps in a job whose other devices have them)."""
        return self.counts.get((rank, device), 0) if self.by_steps else 1

    def per_step(self, ns: int, rank: int, device: int) -> int | None:
        """`ns` spread over the steps of (rank, device); None without steps."""
        n = self.on(rank, device)
        return ns // n if n else None

    def most_on(self, rank: int | None = None) -> int | None:
        """The most steps any device of `rank` (of the job when None) holds; None where none
        of them has a step row (and always without step markers, whose steps table is
        empty)."""
        n = [c for (r, _d), c in self.counts.items() if rank is None or r == rank]
        return max(n) if n else None


def step_counts(steps: pl.DataFrame, by_steps: bool) -> StepCounts:
    """The StepCounts of `steps` (Metrics.steps.steady: one row per device and steady step)."""
    counts = steps.group_by(DEVICE_KEY).len()
    ranks = steps.group_by("rank").agg(pl.col("step").n_unique())
    return StepCounts(
        by_steps=by_steps,
        counts={(r, d): n for r, d, n in counts.select(*DEVICE_KEY, "len").iter_rows()},
        ranks=dict(ranks.iter_rows()),
    )


_KEY = {"rank": pl.Int32, "device": pl.Int32}
_SPAN = {"start_ns": pl.Int64, "end_ns": pl.Int64}
_STEP = {"step": pl.Int64, "name": pl.String, **_SPAN, "busy_ns": pl.Int64}


@dataclass(frozen=True, slots=True)
class Steps:
    """The job's windows and steps (Metrics.steps): what every device's analysed span is,
    which steps it holds, and which were left out.

    - `windows`: rank, device, start_ns, end_ns: each device's analysed window
      (`device_windows`).
    - `steady`: rank, device, step, name, start_ns, end_ns, busy_ns, idle_share,
      kernel_count, `<cause>_ns` per idle cause: each device's steady steps, tiling its
      window (`device_steps`, with gpu/devices.step_summary's busy time and the idle gaps'
      causes); empty without step markers.
    - `warmup`: the same rows (without the causes) of the steps left out of the window.
    - `excluded`: rank, step, name, step_ns, reason: the warm-up and outlier steps left out
      of the window (timeline/steady.py).
    - `outside_window`: rank, device, before_count, before_ns, after_count, after_ns: GPU
      work outside each device's window (`outside_window`).
    - `counts`: how many steady steps each device's window holds (`StepCounts`): what the
      impact models divide by.

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "windows": {**_KEY, **_SPAN},
        "steady": {
            **_KEY,
            **_STEP,
            "idle_share": pl.Float64,
            "kernel_count": pl.Int64,
            "host_wait_ns": pl.Int64,
            "sync_ns": pl.Int64,
            "launch_overhead_ns": pl.Int64,
            "other_ns": pl.Int64,
        },
        "warmup": {**_KEY, **_STEP, "idle_share": pl.Float64, "kernel_count": pl.Int64},
        "excluded": {
            "rank": pl.Int32,
            "step": pl.Int64,
            "name": pl.String,
            "step_ns": pl.Int64,
            "reason": pl.String,
        },
        "outside_window": {
            **_KEY,
            "before_count": pl.Int64,
            "before_ns": pl.Int64,
            "after_count": pl.Int64,
            "after_ns": pl.Int64,
        },
    }

    windows: pl.DataFrame
    steady: pl.DataFrame
    warmup: pl.DataFrame
    excluded: pl.DataFrame
    outside_window: pl.DataFrame
    counts: StepCounts

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.steps", self.SCHEMAS)


def span_ns(windows: pl.DataFrame) -> int:
    """The time the windows span together, from the first start to the last end (0 without
    windows)."""
    return int(windows.select(pl.col("end_ns").max() - pl.col("start_ns").min()).item() or 0)
