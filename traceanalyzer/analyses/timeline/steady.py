"""Steady state: warm-up and outlier steps, found before the other analyses and left out of
the analysed window.

A capture that starts with the process (Nsight, or torch.profiler without a warm-up phase)
holds one-time work in its first step: CUDA module loading, cuBLAS/cuDNN handle creation,
allocator growth (`cudaMalloc`), NCCL communicator init, torch.compile's compilation. A step
like that can take ten times a steady step; averaged in, it makes every per-step figure
(idle, impact, the critical path) describe start-up instead of the job.

Each step's time is the longer of its host range and its GPU tile (the time between the
completion of the previous step's GPU work and of its own, as `windows.device_steps`
defines it; the longest over the rank's devices). Per rank, in order of start:

- a **leading** step is *warm-up* when it holds one-time work (`ONE_TIME_WORK`), or launches
  `EXTRA_WORK` times the median step's GPU operations, and takes at least `WARMUP_FACTOR`
  times the median of the other steps kept, or an *outlier* when it takes at least
  `OUTLIER_FACTOR` times that median; the next step is then tried;
- a **trailing** step is an *outlier* by the same factor (a checkpoint or evaluation at the
  end of the capture);
- at least `MIN_STEADY` steps always stay, and nothing is excluded from a rank with fewer
  than `MIN_STEADY + 1` steps;
- a leading or trailing step that launched no GPU work at all is *empty* (a last
  `ProfilerStep` closed by the profiler's stop) and is left out while another step has work.

Steps are matched across ranks by number: a step excluded on one rank is excluded on every
rank (NCCL init on one rank makes the others wait in the same step). Interior outliers stay in
the window: the window of a device is one span, and a slow step in the middle of a run is part
of the job's behaviour. `--all-steps` keeps every step.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.timeline import windows
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import in_ranges, union
from traceanalyzer.model import Kind, Timeline

#: Host ranges of torch.compile's compilation: Dynamo's tracing, AOTAutograd, Inductor's
#: lowering and code generation, Triton's compile and autotuning. torch >= 2.4 names every
#: timed phase `<phase> (dynamo_timed)` and records the bare phase beside it; older versions
#: name the phases alone. Running a compiled graph (`Torch-Compiled Region: 0/1`, `## Call
#: CompiledFxGraph`, `TorchDynamo Cache Lookup`, `CompiledFunction`) is not compilation.
COMPILE_WORK = (
    r"\(dynamo_timed\)$"
    r"|^(?:dynamo$|entire_frame_compile|entire_backward_compile|_compile\.compile_inner"
    r"|compile_attempt_\d+|backend_compile|inductor_compile|compile_fx(?:_inner)?\b"
    r"|fx_codegen_and_compile|create_aot_dispatcher_function|aot_trace_joint_graph"
    r"|aot_collect_metadata|bytecode_tracing|OutputGraph\.|GraphLowering\.|Scheduler\."
    r"|async_compile\.|PyCodeCache\.|CachingAutotuner\.|code_gen$|TritonBundler\."
    r"|compile_file|_recursive_(?:pre|post|joint)_grad_passes|min_cut_rematerialization)"
)
#: Host calls and ranges that happen once per process (or per new shape), not every step.
ONE_TIME_WORK = (
    r"^(?:cuModuleLoad\w*|cuLibraryLoad\w*|cuModuleGetFunction|cuLibraryGetKernel"
    r"|cudaMalloc|cudaMallocHost|cudaHostAlloc|cuMemAlloc\w*|cuMemCreate|cuMemMap"
    r"|cuCtxCreate\w*|cuDevicePrimaryCtxRetain|cudaStreamCreate\w*|cudaEventCreate\w*"
    r"|hipMalloc|hipModuleLoad\w*|hipStreamCreate\w*"
    r"|cublas\w*Create\w*|cublasLt\w*Create\w*|cudnnCreate\w*|miopenCreate\w*"
    r"|nccl\w*CommInit\w*|ncclCommSplit|rccl\w*Init\w*"
    r"|_compile\.compile_inner|compile_fx\b.*|OutputGraph\.call_user_compiler|.*autotune.*"
    r")(?:_v\d+)?$|" + COMPILE_WORK
)
#: A leading step with one-time work is warm-up at this multiple of the median step.
WARMUP_FACTOR = 1.5
#: A leading step that launches this multiple of the median step's GPU operations (and takes
#: WARMUP_FACTOR of its time) is warm-up too.
EXTRA_WORK = 1.5
#: Any leading or trailing step at this multiple of the median step is an outlier.
OUTLIER_FACTOR = 2.0
#: Steps always kept per rank.
MIN_STEADY = 2

_HOST = [Kind.RUNTIME.value, Kind.DRIVER.value, Kind.CPU_OP.value, Kind.ANNOTATION.value]


@dataclass(frozen=True, slots=True)
class SteadyState:
    """The steady steps' markers, the excluded steps and their per-device rows.

    - `markers`: the step markers of the steady steps (rank, step, name, start_ns, end_ns);
    - `excluded`: rank, step, name, step_ns, reason, one per excluded step and rank;
    - `warmup_rows`: rank, device, step, name, start_ns, end_ns, busy_ns, idle_share,
      kernel_count of the excluded steps on each device (for `steps[]` with `warmup: true`).
    """

    markers: pl.DataFrame
    excluded: pl.DataFrame
    warmup_rows: pl.DataFrame


@dataclass(frozen=True, slots=True)
class StepTable:
    """What the steady state is decided on, per rank (see `step_table`): `tiles` (each step's
    GPU tile per device) and `per_step` (rank, step, name, start_ns, dev_ns, ops, host_ns,
    step_ns, one_time; sorted by rank and start). Each rank's is its own: the steps matched
    across ranks are decided on the tables of all ranks (`flag`)."""

    tiles: pl.DataFrame
    per_step: pl.DataFrame
    markers: int


def find(timeline: Timeline, markers: pl.DataFrame, ops: pl.DataFrame) -> SteadyState:
    """Warm-up and outlier steps of each rank. `ops`: the GPU work launched inside steps
    (rank, device, kind, start_ns, end_ns, step)."""
    table = step_table(timeline, markers, ops)
    return settle(markers, ops, table.tiles, excluded_rows(table.per_step, flag([table])))


def _excluded_schema() -> dict[str, pl.DataType]:
    return {
        "rank": pl.Int32(),
        "step": pl.Int64(),
        "name": pl.String(),
        "step_ns": pl.Int64(),
        "reason": pl.String(),
    }


def step_table(timeline: Timeline, markers: pl.DataFrame, ops: pl.DataFrame) -> StepTable:
    """The tiles and per-step rows of the ranks of `timeline` (see `StepTable`)."""
    tiles = _tiles(ops, markers)
    per_step = (
        tiles.group_by("rank", "step")
        .agg(dev_ns=pl.col("tile_ns").max(), ops=pl.col("ops").max())
        .join(
            markers.select(
                "rank", "step", "name", "start_ns", host_ns=pl.col("end_ns") - pl.col("start_ns")
            ),
            on=["rank", "step"],
            how="right",
        )
        .with_columns(step_ns=pl.max_horizontal(pl.col("dev_ns").fill_null(0), "host_ns"))
        .join(_one_time(timeline, markers).collect(), on=["rank", "step"], how="left")
        .sort("rank", "start_ns")
    )
    return StepTable(tiles, per_step, markers.height)


def flag(tables: list[StepTable]) -> dict[int, tuple[str, int, str]]:
    """The steps to leave out on every rank: step -> (reason, rank, name) where first found,
    ranks in order. `tables`: every rank's, in order of rank (one table may hold several)."""
    if sum(t.markers for t in tables) < 2 or sum(t.tiles.height for t in tables) == 0:
        return {}
    flagged: dict[int, tuple[str, int, str]] = {}
    for table in tables:
        by_rank = table.per_step.partition_by("rank", as_dict=True, maintain_order=True)
        for (rank,), frame in by_rank.items():  # per rank: a few summary rows, not events
            found = _flag(
                frame["step_ns"].to_list(),
                frame["one_time"].to_list(),
                frame["dev_ns"].is_null().to_list(),
                frame["ops"].fill_null(0).to_list(),
            )
            for i, reason in found.items():
                step = frame["step"][i]
                flagged.setdefault(step, (reason, int(rank), frame["name"][i]))
    return flagged


def excluded_rows(per_step: pl.DataFrame, flagged: dict[int, tuple[str, int, str]]) -> pl.DataFrame:
    """rank, step, name, step_ns, reason: one row per flagged step on each rank that has it."""
    rows: list[dict[str, object]] = []
    if flagged:
        for r in per_step.iter_rows(named=True):
            if r["step"] not in flagged:
                continue
            reason, where, _ = flagged[r["step"]]
            if where != r["rank"]:
                reason = f"left out on every rank (rank {where}: {reason})"
            rows.append(
                {
                    "rank": r["rank"],
                    "step": r["step"],
                    "name": r["name"],
                    "step_ns": int(r["step_ns"]),
                    "reason": reason,
                }
            )
    return pl.DataFrame(rows, schema=_excluded_schema())


def settle(
    markers: pl.DataFrame, ops: pl.DataFrame, tiles: pl.DataFrame, excluded: pl.DataFrame
) -> SteadyState:
    """The steady state once the steps to leave out (`excluded`, see `excluded_rows`) are
    known: the other steps' markers, and the excluded steps' device rows."""
    if excluded.height == 0:
        return SteadyState(markers, excluded, _warmup_rows(ops, tiles.clear(), markers))
    keys = excluded.select("rank", "step")
    return SteadyState(
        markers.join(keys, on=["rank", "step"], how="anti"),
        excluded,
        _warmup_rows(ops, tiles.join(keys, on=["rank", "step"], how="semi"), markers),
    )


def _flag(
    durations: list[int],
    one_time: list[str | None],
    empty: list[bool] | None = None,
    ops: list[int] | None = None,
) -> dict[int, str]:
    """Indexes of the leading and trailing steps to leave out, with the reason. `empty`: the
    steps that launched no GPU work (left out at either end while another step has some);
    `ops`: GPU operations each step launched (a leading step that launches EXTRA_WORK times
    the median is doing one-time work too: lazy init, graph capture, optimizer state)."""
    n = len(durations)
    out: dict[int, str] = {}
    lo, hi = 0, n - 1
    if empty and not all(empty):
        while empty[lo]:
            out[lo] = "empty: no GPU work launched in it"
            lo += 1
        while empty[hi]:
            out[hi] = "empty: no GPU work launched in it"
            hi -= 1
    if hi - lo + 1 < MIN_STEADY + 1:
        return out

    def ratio(i: int) -> float:
        """Step i against the median of the other steps still kept."""
        med = statistics.median(durations[j] for j in range(lo, hi + 1) if j != i)
        return durations[i] / med if med > 0 else 0.0

    def extra(i: int) -> float:
        """Step i's GPU operations against the median of the other steps kept."""
        if not ops:
            return 0.0
        med = statistics.median(ops[j] for j in range(lo, hi + 1) if j != i)
        return ops[i] / med if med > 0 else 0.0

    while hi - lo + 1 > MIN_STEADY:
        r = ratio(lo)
        if one_time[lo] and r >= WARMUP_FACTOR:
            out[lo] = f"warm-up: one-time work ({one_time[lo]}); {r:.1f}x the median step"
        elif r >= WARMUP_FACTOR and extra(lo) >= EXTRA_WORK:
            out[lo] = (
                f"warm-up: {extra(lo):.1f}x the median step's GPU operations; "
                f"{r:.1f}x the median step"
            )
        elif r >= OUTLIER_FACTOR:
            out[lo] = f"outlier: {r:.1f}x the median step"
        else:
            break
        lo += 1
    while hi - lo + 1 > MIN_STEADY:
        r = ratio(hi)
        if r < OUTLIER_FACTOR:
            break
        out[hi] = f"outlier: {r:.1f}x the median step"
        hi -= 1
    return out


def _tiles(ops: pl.DataFrame, markers: pl.DataFrame) -> pl.DataFrame:
    """Each step's GPU tile per device: rank, device, step, begin_ns, end_ns, tile_ns (as in
    windows.device_steps: from the previous step's completion to this one's; after long host
    time outside every step, from its own marker or first GPU operation)."""
    return (
        ops.lazy()
        .filter(pl.col("step").is_not_null())
        .group_by("rank", "device", "step")
        .agg(
            first_ns=pl.col("start_ns").min(),
            last_ns=pl.col("end_ns").max(),
            ops=pl.len().cast(pl.Int64),
        )
        .join(
            markers.lazy().select("rank", "step", m_start="start_ns", m_end="end_ns"),
            on=["rank", "step"],
            how="left",
        )
        .sort("rank", "device", "first_ns")
        .with_columns(end_ns=pl.col("last_ns").cum_max().over("rank", "device"))
        .with_columns(
            prev_end=pl.col("end_ns").shift(1).over("rank", "device"),
            apart=windows.apart_from_previous(["rank", "device"]),
        )
        .with_columns(
            begin_ns=pl.when(pl.col("apart"))
            .then(pl.max_horizontal("prev_end", pl.min_horizontal("first_ns", "m_start")))
            .otherwise(pl.coalesce("prev_end", "first_ns"))
        )
        .with_columns(tile_ns=pl.col("end_ns") - pl.col("begin_ns"))
        .select("rank", "device", "step", "begin_ns", "end_ns", "tile_ns", "ops")
        .collect()
    )


def _one_time(timeline: Timeline, markers: pl.DataFrame) -> pl.LazyFrame:
    """rank, step, one_time: the one-time host calls inside each step, as text
    (`cudaMalloc x12, cuModuleLoadData x3`): calls of ONE_TIME_WORK that at most half of the
    rank's other steps make; steps without any are absent."""
    host = timeline.events.lazy().filter(pl.col("kind").is_in(_HOST))
    names = (
        host.select(pl.col("name").unique().cast(pl.String))
        .filter(pl.col("name").str.contains(ONE_TIME_WORK))
        .collect()["name"]
        .to_list()
    )
    schema = {"rank": pl.Int32(), "step": pl.Int64(), "one_time": pl.String()}
    if not names:
        return pl.LazyFrame(schema=schema)
    calls = (
        host.filter(pl.col("name").is_in(names))
        .select("rank", "start_ns", name=pl.col("name").cast(pl.String))
        .pipe(in_ranges, markers.lazy(), "rank")
        .group_by("rank", "step", "name")
        .agg(n=pl.len())
        # one-time: a call that at most half of the rank's other steps make (cudaMalloc in a
        # leak, or an event created every step, is the job's steady behaviour, not warm-up)
        .join(markers.lazy().group_by("rank").agg(steps=pl.len()), on="rank")
        .filter(pl.len().over("rank", "name") - 1 <= (pl.col("steps") - 1) / 2)
        .sort(["rank", "step", "n", "name"], descending=[False, False, True, False])
    )
    return (
        calls.group_by("rank", "step", maintain_order=True)
        .agg(
            one_time=pl.concat_str(pl.col("name"), pl.lit(" x"), pl.col("n").cast(pl.String))
            .head(3)
            .str.join(", ")
        )
        .select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), "one_time")
    )


def _warmup_rows(ops: pl.DataFrame, tiles: pl.DataFrame, markers: pl.DataFrame) -> pl.DataFrame:
    """The excluded steps' device rows: busy time and kernel count inside each tile."""
    inside = (
        ops.lazy()
        .join(
            tiles.lazy().select("rank", "device", "step", "begin_ns", "end_ns"),
            on=["rank", "device", "step"],
            suffix="_t",
        )
        .with_columns(
            start_ns=pl.max_horizontal("start_ns", "begin_ns"),
            end_ns=pl.min_horizontal("end_ns", "end_ns_t"),
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
    )
    busy = (
        union(
            inside.select("rank", "device", "step", "start_ns", "end_ns"),
            ["rank", "device", "step"],
        )
        .group_by("rank", "device", "step")
        .agg(busy_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    )
    kernels = (
        inside.filter(pl.col("kind") == Kind.KERNEL.value)
        .group_by("rank", "device", "step")
        .agg(kernel_count=pl.len().cast(pl.Int64))
    )
    span = pl.col("end_ns") - pl.col("start_ns")
    return (
        tiles.lazy()
        .select("rank", "device", "step", start_ns="begin_ns", end_ns="end_ns")
        .join(busy, on=["rank", "device", "step"], how="left")
        .join(kernels, on=["rank", "device", "step"], how="left")
        .join(markers.lazy().select("rank", "step", "name"), on=["rank", "step"], how="left")
        .with_columns(pl.col("busy_ns", "kernel_count").fill_null(0))
        .with_columns(idle_share=pl.when(span > 0).then((span - pl.col("busy_ns")) / span))
        .select(
            "rank",
            "device",
            "step",
            "name",
            "start_ns",
            "end_ns",
            "busy_ns",
            "idle_share",
            "kernel_count",
        )
        .sort("rank", "device", "start_ns")
        .collect()
    )


#: `loop_periods`' columns.
PERIOD_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "steps": pl.Int64(),
    "host_period_ns": pl.Int64(),
    "gpu_period_ns": pl.Int64(),
    "period_ns": pl.Int64(),
    "min_ns": pl.Int64(),
    "max_ns": pl.Int64(),
}


def host_steps(markers: pl.LazyFrame) -> pl.LazyFrame:
    """rank, step, host_ns: each steady step's host range (its marker's length)."""
    return markers.select("rank", "step", host_ns=pl.col("end_ns") - pl.col("start_ns"))


def loop_periods(hosts: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank, the loop's period over its steady steps (PERIOD_SCHEMA): the host's
    (`host_period_ns`, the mean step marker) or the GPU's (`gpu_period_ns`: from the first
    step's GPU completion to the last's, over the steps between, the slowest device),
    whichever is longer; `min_ns` / `max_ns` the shortest and longest single step by the
    same measure, so that the range holds the period: the distances between consecutive
    steps' GPU completions where the GPU side is the period, else the steps' host ranges.

    A step's tile (`windows.device_steps`) runs from its GPU completion back to the
    previous one's, but the first step's from its host marker's start: where the GPU runs
    behind the host, it carries that lag (20.6 ms against a loop of 12.3 ms), and a mean of
    tiles over three steps is the lag's as much as the loop's. The period leaves it out.
    `hosts`: rank, step, host_ns (`host_steps`); `steps`: the steady device steps (rank,
    device, step, end_ns)."""
    done = (
        steps.group_by("rank", "step")
        .agg(gpu_end=pl.col("end_ns").max())
        .join(hosts, on=["rank", "step"], how="left")
        .sort("rank", "gpu_end")
        .with_columns(gap=pl.col("gpu_end").diff().over("rank"))
    )
    host_mean = pl.col("host_ns").mean().over("rank")
    gpu_mean = (pl.col("gpu_end").max() - pl.col("gpu_end").min()).over("rank") / (
        pl.len().over("rank") - 1
    )
    done = done.with_columns(
        # a step after the first: the longer of its host range and its GPU completion's
        # distance from the previous one; the first step's GPU side is not known apart from
        # the lag, so it counts by its host range where the host bounds the loop (or it is
        # the one step)
        each=pl.when(pl.col("gap").is_not_null())
        .then(pl.max_horizontal(pl.col("host_ns").fill_null(0), "gap"))
        .when((pl.len().over("rank") == 1) | (host_mean >= gpu_mean))
        .then(pl.col("host_ns"))
    )
    per = done.group_by("rank").agg(
        steps=pl.len().cast(pl.Int64),
        host_period_ns=pl.col("host_ns").mean().round().cast(pl.Int64),
        gpu_period_ns=pl.when(pl.len() > 1)
        .then((pl.col("gpu_end").max() - pl.col("gpu_end").min()) / (pl.len() - 1))
        .round()
        .cast(pl.Int64),
        _each_min=pl.col("each").min(),
        _each_max=pl.col("each").max(),
        _host_min=pl.col("host_ns").min(),
        _host_max=pl.col("host_ns").max(),
        _gap_min=pl.col("gap").min(),
        _gap_max=pl.col("gap").max(),
    )
    # the range by the measure the period is: the GPU completions' distances where the GPU
    # side is the period (their mean is it), else the host ranges; the range holds the period
    gpu_side = pl.col("gpu_period_ns").fill_null(0) > pl.col("host_period_ns").fill_null(0)
    host_known = pl.col("_host_min").is_not_null()
    per = per.with_columns(
        min_ns=pl.when(gpu_side & pl.col("_gap_min").is_not_null())
        .then("_gap_min")
        .when(host_known)
        .then("_host_min")
        .otherwise("_each_min"),
        max_ns=pl.when(gpu_side & pl.col("_gap_max").is_not_null())
        .then("_gap_max")
        .when(host_known)
        .then("_host_max")
        .otherwise("_each_max"),
    )
    return (
        per.with_columns(
            period_ns=pl.max_horizontal(
                pl.col("host_period_ns").fill_null(0), pl.col("gpu_period_ns").fill_null(0)
            )
        )
        .select(list(PERIOD_SCHEMA))
        .sort("rank")
        .cast(PERIOD_SCHEMA)  # type: ignore[arg-type]
    )


@dataclass(frozen=True, slots=True)
class Periods:
    """The loop's period per rank (Metrics.periods).

    - `per_rank`: rank, steps, host_period_ns, gpu_period_ns, period_ns, min_ns, max_ns:
      the period over the steady steps, host or GPU side, with the shortest and longest
      step (`loop_periods`, PERIOD_SCHEMA).

    Its frame is checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {"per_rank": PERIOD_SCHEMA}

    per_rank: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.periods", self.SCHEMAS)
