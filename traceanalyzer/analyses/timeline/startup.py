"""One-time work inside the analysed window: start-up that is not the loop.

A trace profiled from a process's first iteration, without a schedule or step markers to
leave the warm-up out, holds initialisation inside its window: the CUDA context, module
loading, cuBLAS/cuDNN handles, the first convolution's library load and autotuning (one
`cudaLaunchKernel` that takes 675 ms), a first `cudaFree` that creates the context. While
the host does it the GPU idles, and a report would read that idle as starvation and price
it per step ("saves ~1.02 s/step, use CUDA graphs"), though it happens once.

A call or range inside a device's window is **one-time work** when it takes at least
`MIN_NS`, every such call of its name comes among the name's first half of calls
(`EARLY_SHARE`: a `cudaMalloc`, a `cudaFree` (`empty_cache()`) or a blocking copy every
step is the loop's), and it is one of:

- a runtime or driver call that is initialisation by name (`steady.ONE_TIME_WORK`: module
  loads, allocations, handle and stream creation, NCCL init; `LONG_ONCE`: `cudaFree`, which
  synchronises and, first called, creates the context);
- a host range of compilation or autotuning (torch.compile's, Inductor's);
- a runtime call or an operator's call `FACTOR` times the median call of its name (called
  twice or more): a first launch among thousands of µs launches, cudnn.benchmark's first
  convolution (390 ms against 50 µs later);
- the only call in the trace of an operator that sets a library up when first called
  (`LIBRARY_FIRST_CALLS`: cuDNN's convolutions and batch norm, cuBLAS's matrix products,
  attention, the first collective's NCCL communicator), or, where the window holds one
  pass of the program (one step, or no step markers), its first call with its input
  shapes: a trace of one cold call (a CNN's first inference in a fresh
  process) has no later call to compare it with, and the GPU idling inside it, with no
  launch, is the library's set-up (cuDNN's plans, cuBLAS's handle), done once. Where the
  shapes change every step, several steps show it as the loop's (TA022).

One found by its length, and `cudaFree`, counts only where the GPU idles at least half of
it: a long call with the GPU busy is a sync, not start-up. The GPU idle they cover
(`idle_ns`: the device's idle gaps while they run) is start-up, not the loop's: TA001
leaves it out of its price, and TA012 names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import clipped_ns, union
from traceanalyzer.analyses.timeline.steady import ONE_TIME_WORK
from traceanalyzer.model import Kind, Timeline

#: A call shorter than this is not worth naming as start-up (1 ms).
MIN_NS = 1_000_000
#: A call this many times its name's median call on the rank is one-time work.
FACTOR = 50
#: Names that are one-time work when long, besides ONE_TIME_WORK: cudaFree synchronises the
#: device and, first called, initialises the context (the `cudaFree(0)` idiom).
LONG_ONCE = (
    r"^(?:cudaFree|cuMemFree\w*|hipFree|cudaFreeHost|cuInit|cudaSetDevice|cudaGetDeviceCount)"
    r"(?:_v\d+)?$"
)

#: Operators that set up a library the first time they run (cuDNN handles, plans and
#: autotuning; cuBLAS handles and workspaces; attention backends; the NCCL communicator).
LIBRARY_FIRST_CALLS = (
    r"^aten::(?:conv\w*|_convolution|cudnn_\w+|miopen_\w+|convolution\w*|batch_norm|"
    r"_batch_norm_impl_index|native_batch_norm|linear|addmm|mm|bmm|baddbmm|matmul|"
    r"_scaled_\w*attention\w*|scaled_dot_product_attention)$|^c10d::|^nccl:"
)

SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "name": pl.String(),
    "op_name": pl.String(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "idle_ns": pl.Int64(),
}


def long_calls(events: pl.LazyFrame, kinds: list[str]) -> pl.LazyFrame:
    """The calls of `kinds` of at least MIN_NS (rank, pid, tid, start_ns, end_ns, name as
    text), with their place among their name's calls on the rank (`order`, from 1 by start,
    ties in the events' order, of `n`) and those calls' median duration (`median`).

    Only the calls of names with such a call are ranked (all of them, so the places, counts
    and medians are those among every call of the name): on a 727 MB training trace, 904 of
    its 1.16 million operator and annotation calls. Ranking them all made start-up the
    report's largest analysis in memory (144 MB at its peak, against 42 MB now). Names are
    matched as text only on the long calls."""
    dur = pl.col("end_ns") - pl.col("start_ns")
    by = ["rank", "name"]
    calls = events.filter(pl.col("kind").is_in(kinds)).select(
        "rank", "pid", "tid", "start_ns", "end_ns", "name"
    )
    long_names = calls.filter(dur >= MIN_NS).select(by).unique()
    return (
        calls.join(long_names, on=by, how="semi", maintain_order="left")
        .with_columns(
            order=pl.col("start_ns").rank("ordinal").over(by),
            n=pl.len().over(by),
            median=dur.median().over(by),
        )
        .filter(dur >= MIN_NS)
        .with_columns(pl.col("name").cast(pl.String))
    )


def one_time_calls(
    timeline: Timeline, windows: pl.DataFrame, gaps: pl.DataFrame, single_pass: bool = False
) -> pl.DataFrame:
    """rank, device, name, op_name, start_ns, end_ns (clipped to the window), dur_ns (the
    whole call), idle_ns: each one-time host call
    inside a device's window (one row per call and device of its rank), with the operator
    that made it (the innermost CPU operator around it on its thread, null where none) and
    the device's idle time while it ran. Longest first.

    `windows`: rank, device, start_ns, end_ns; `gaps`: the idle gaps (rank, device,
    start_ns, end_ns); `single_pass`: the window holds one step or none (a single call of a
    model: every operator's call is its first with its shapes, see the module docstring)."""
    events = timeline.events.lazy()
    dur = pl.col("end_ns") - pl.col("start_ns")
    by = ["rank", "name"]

    def early(flag: pl.Expr) -> pl.Expr:
        """`flag` where every flagged call of the name comes among its first EARLY_SHARE."""
        last = pl.when(flag).then(pl.col("order")).max().over(by)
        return flag & (last <= pl.max_horizontal(pl.lit(1.0), EARLY_SHARE * pl.col("n")))

    long = (dur >= FACTOR * pl.col("median")) & (pl.col("n") > 1)
    named = pl.col("name").str.contains(ONE_TIME_WORK)
    calls = (
        long_calls(events, [Kind.RUNTIME.value, Kind.DRIVER.value])
        .filter(early(named | pl.col("name").str.contains(LONG_ONCE)) | early(long))
        # only a name's initialisation counts whatever the GPU does; a call that is long
        # for its name must leave the GPU idle (a long sync is the GPU's work, not start-up)
        .with_columns(first_call=~named)
    )
    # host ranges of compilation and autotuning (torch.compile's, Inductor's)
    ranges = (
        long_calls(events, [Kind.ANNOTATION.value, Kind.CPU_OP.value, Kind.PYTHON.value])
        .filter(early(named))
        .with_columns(first_call=pl.lit(False))
    )
    # operators whose call takes FACTOR times their usual one while the GPU idles: a first
    # call that initialises a library or autotunes (cudnn.benchmark's first convolution)
    library = pl.col("name").str.contains(LIBRARY_FIRST_CALLS)
    first = (
        long_calls(events, [Kind.CPU_OP.value])
        .filter((early(long) | (library & (pl.col("n") == 1))) & ~named)
        .with_columns(first_call=pl.lit(True))
    )
    cols = ["rank", "pid", "tid", "start_ns", "end_ns", "name", "first_call"]
    parts = [calls, ranges, first]
    if single_pass:
        parts.append(_first_with_shapes(events))
    found = pl.concat([f.select(cols) for f in parts]).unique(maintain_order=True).collect()
    if found.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    found = found.with_row_index("_call")
    ops = (
        timeline.events.lazy()
        .filter(pl.col("kind") == Kind.CPU_OP.value)
        .join(found.lazy().select("rank").unique(), on="rank", how="semi")
        .select(
            "rank",
            "pid",
            "tid",
            o_start="start_ns",
            o_end="end_ns",
            op_name=pl.col("name").cast(pl.String),
        )
    )
    pairs = (
        found.lazy()
        .select("_call", "rank", "pid", "tid", "start_ns", "end_ns")
        .join_where(
            ops.rename({"rank": "_rank", "pid": "_pid", "tid": "_tid"}),
            pl.col("o_start") <= pl.col("start_ns"),
            pl.col("o_end") >= pl.col("end_ns"),
        )
        .filter(
            (pl.col("rank") == pl.col("_rank"))
            & (pl.col("pid") == pl.col("_pid"))
            & (pl.col("tid") == pl.col("_tid"))
        )
        .group_by("_call")
        .agg(
            pl.col("op_name")
            .sort_by("o_start", "o_end", "op_name", descending=[False, True, False])
            .last()
        )
    )
    placed = (
        found.lazy()
        .join(pairs, on="_call", how="left")
        .join(
            windows.lazy().select("rank", "device", w_start="start_ns", w_end="end_ns"),
            on="rank",
        )
        .filter((pl.col("start_ns") < pl.col("w_end")) & (pl.col("end_ns") > pl.col("w_start")))
    )
    idle = (
        placed.select("_call", "rank", "device", "start_ns", "end_ns")
        .join(
            gaps.lazy().select("rank", "device", g_start="start_ns", g_end="end_ns"),
            on=["rank", "device"],
        )
        .with_columns(
            overlap=(
                pl.min_horizontal("end_ns", "g_end") - pl.max_horizontal("start_ns", "g_start")
            ).clip(lower_bound=0)
        )
        .group_by("_call", "device")
        .agg(idle_ns=pl.col("overlap").sum())
    )
    return (
        placed.join(idle, on=["_call", "device"], how="left")
        .with_columns(pl.col("idle_ns").fill_null(0))
        # a long operator call with the GPU busy is waiting for it (a sync), not starting up
        .filter(
            ~pl.col("first_call") | (2 * pl.col("idle_ns") >= pl.col("end_ns") - pl.col("start_ns"))
        )
        .select(
            "rank",
            "device",
            "name",
            "op_name",
            # the part inside the window (a compilation range may begin before it)
            start_ns=pl.max_horizontal("start_ns", "w_start"),
            end_ns=pl.min_horizontal("end_ns", "w_end"),
            dur_ns=pl.col("end_ns") - pl.col("start_ns"),
            idle_ns=pl.col("idle_ns").fill_null(0),
        )
        .sort(
            ["dur_ns", "rank", "device", "start_ns", "name"],
            descending=[True, False, False, False, False],
        )
        .collect()
        .cast(SCHEMA)  # type: ignore[arg-type]
    )


def _first_with_shapes(events: pl.LazyFrame) -> pl.LazyFrame:
    """The long calls (MIN_NS) of library operators (LIBRARY_FIRST_CALLS) that are the first
    of their name with their input shapes: in one pass of a program each is a library
    setting itself up for those shapes (a trace without step markers that holds several
    iterations repeats the shapes, and only the first iteration's calls are first)."""
    dur = pl.col("end_ns") - pl.col("start_ns")
    ops = events.filter(pl.col("kind") == Kind.CPU_OP.value)
    long = ops.filter(
        (dur >= MIN_NS) & pl.col("name").cast(pl.String).str.contains(LIBRARY_FIRST_CALLS)
    )
    keys = ["rank", "name", "input_dims"]
    shaped = ops.join(long.select(keys).unique(), on=keys, how="semi", nulls_equal=True)
    return (
        shaped.with_columns(order=pl.col("start_ns").rank("ordinal").over(keys))
        .filter((pl.col("order") == 1) & (dur >= MIN_NS))
        .select(
            "rank",
            "pid",
            "tid",
            "start_ns",
            "end_ns",
            name=pl.col("name").cast(pl.String),
            first_call=pl.lit(True),
        )
    )


#: A name's long calls are one-time only where all of them come in the first this share of
#: its calls: a call that is long every step (a blocking copy each step) is the loop's.
EARLY_SHARE = 0.5


IDLE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "startup_ns": pl.Int64(),
    "idle_ns": pl.Int64(),
}


def idle_per_device(calls: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
    """rank, device, startup_ns (the union of the one-time calls and ranges on the rank: a
    compilation range and the calls inside it count once), idle_ns (the device's idle under
    that union)."""
    merged = union(calls.lazy().select("rank", "device", "start_ns", "end_ns"), ["rank", "device"])
    return (
        merged.join(
            gaps.lazy().select("rank", "device", g_start="start_ns", g_end="end_ns"),
            on=["rank", "device"],
            how="left",
        )
        .with_columns(overlap=clipped_ns("start_ns", "end_ns", "g_start", "g_end").fill_null(0))
        .group_by("rank", "device", "start_ns", "end_ns")
        .agg(pl.col("overlap").sum())
        .group_by("rank", "device")
        .agg(
            startup_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
            idle_ns=pl.col("overlap").sum(),
        )
        .sort("rank", "device")
        .collect()
        .cast(IDLE_SCHEMA)  # type: ignore[arg-type]
    )


#: One-time calls looked at for a device's list (longest first), and how many it names.
TOP_SCAN = 50
LISTED = 3


@dataclass(frozen=True, slots=True)
class DeviceStartup:
    """One device's one-time work inside its window (`per_device`; TA012 reads it).

    - `window_ns`: the device's window (Metrics.devices);
    - `startup_ns`, `idle_ns`: the union of its one-time calls and ranges and the GPU idle
      under it (`idle_per_device`; 0 without one-time work);
    - `calls`: the longest one-time calls that are not inside one listed before (a
      compilation range and the ranges it holds are one piece of work): at most LISTED,
      among the TOP_SCAN longest, with name, op_name, dur_ns, idle_ns.
    """

    rank: int
    device: int
    window_ns: int
    startup_ns: int
    idle_ns: int
    calls: tuple[dict[str, Any], ...]


def per_device(
    devices: pl.DataFrame, calls: pl.DataFrame, idle: pl.DataFrame
) -> tuple[DeviceStartup, ...]:
    """Each device's DeviceStartup, in the order of `devices` (Metrics.devices.summary). `calls`:
    `one_time_calls`' rows, longest first (Metrics.startup.calls); `idle`: `idle_per_device`'s
    (Metrics.startup.idle)."""
    out = []
    for d in devices.iter_rows(named=True):
        rank, device = d["rank"], d["device"]
        mine = (pl.col("rank") == rank) & (pl.col("device") == device)
        row = idle.filter(mine)
        listed = _outermost(calls.filter(mine).head(TOP_SCAN), LISTED)
        out.append(
            DeviceStartup(
                rank=rank,
                device=device,
                window_ns=d["window_ns"],
                startup_ns=int(row["startup_ns"].sum() or 0),
                idle_ns=int(row["idle_ns"].sum() or 0),
                calls=tuple(
                    {k: c[k] for k in ("name", "op_name", "dur_ns", "idle_ns")} for c in listed
                ),
            )
        )
    return tuple(out)


def _outermost(calls: pl.DataFrame, n: int) -> list[dict[str, Any]]:
    """The first `n` of `calls` (longest first) that are not inside one listed before (a
    compilation range and the ranges it holds are one piece of work)."""
    kept: list[dict[str, Any]] = []
    for c in calls.iter_rows(named=True):  # at most TOP_SCAN summary rows
        if any(k["start_ns"] <= c["start_ns"] and c["end_ns"] <= k["end_ns"] for k in kept):
            continue
        kept.append(c)
        if len(kept) == n:
            break
    return kept


@dataclass(frozen=True, slots=True)
class Startup:
    """One-time host calls inside the windows and the GPU idle under them (Metrics.startup).

    - `calls`: rank, device, name, op_name, start_ns, end_ns, dur_ns, idle_ns: each
      one-time call (initialisation, a first launch that loads a library), longest first
      (`one_time_calls`, SCHEMA).
    - `idle`: rank, device, startup_ns, idle_ns: per device, their union and the idle under
      it (`idle_per_device`, IDLE_SCHEMA).

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {"calls": SCHEMA, "idle": IDLE_SCHEMA}

    calls: pl.DataFrame
    idle: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.startup", self.SCHEMAS)
