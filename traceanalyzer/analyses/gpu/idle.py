"""Idle gaps inside the window, their causes, and the host-device syncs behind them.

A gap is a stretch of the window where a device runs no GPU work at all (between two
intervals of the union of its kernels, memcpys and memsets). Its time is split by cause:

1. `sync`: the part of the gap during which a synchronising host call of the same rank was
   in progress, unless the work that ended the gap was queued before the gap began (then the
   GPU had work and the sync is not why it idled)
   (`cudaDeviceSynchronize`, `cudaStreamSynchronize`, `cudaEventSynchronize`, a blocking
   `cudaMemcpy`, their driver-API twins, or a CUPTI synchronisation record). While the host
   waits, nothing new is queued, so the GPU drains and sits idle.
The rest of the gap (all of it, without a sync) gets one cause:

2. `launch_overhead`: the operation that ended the gap was launched after the gap began, and
   the rest is short (at most `LAUNCH_GAP_MAX_NS`): the CPU issues work one launch at a time
   and the GPU finishes each before the next arrives.
3. `host_wait`: the operation that ended the gap was launched after the gap began, and the
   rest is longer: nothing was queued because the host was busy elsewhere (input pipeline,
   Python, a sleep, the optimizer on the CPU...).
4. `other`: the operation that ended the gap was already queued before the gap began (a wait
   on another stream or an event), or no launch was recorded for it. The tool does not guess.

So a `.item()` followed by a 30 ms data-loader wait counts the drain as `sync` and the 30 ms
as `host_wait`. Each gap also gets its dominant cause (`cause`), for listing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.kernels import histogram_edges
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import busy_before, sort_stable, union
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, StepCounts
from traceanalyzer.model import Kind, Timeline

#: Gaps up to this long, ended by a launch issued after the gap began, are launch overhead.
#: An eager PyTorch op costs 10-50 µs of host time (Python, dispatcher, launch).
LAUNCH_GAP_MAX_NS = 50_000

CAUSES = ("host_wait", "sync", "launch_overhead", "other")
CAUSE = pl.Enum(list(CAUSES))

#: Host API calls that block until GPU work finishes (runtime and driver API names, HIP too).
SYNC_CALL_PATTERN = (
    r"^(?:cuda|hip)(?:DeviceSynchronize|ThreadSynchronize|StreamSynchronize|EventSynchronize"
    r"|Memcpy|Memcpy2D|Memcpy3D|MemcpyToSymbol|MemcpyFromSymbol|Memset)(?:_v\d+)?$"
    r"|^cu(?:CtxSynchronize|StreamSynchronize|EventSynchronize|MemcpyDtoH|MemcpyHtoD)(?:_v\d+)?$"
)

#: Asynchronous copy calls: they block like a sync when the host side is pageable memory.
ASYNC_COPY_PATTERN = r"^(?:(?:cuda|hip)MemcpyAsync|cuMemcpy(?:DtoH|HtoD)Async)(?:_v\d+)?$"

_HOST_CALLS = [Kind.RUNTIME.value, Kind.DRIVER.value]


@dataclass(frozen=True, slots=True)
class Idle:
    """The job's idle gaps, their causes and the host syncs behind them (Metrics.idle).

    - `gaps`: every idle gap (rank, device, start_ns, end_ns, gap_ns, cause, host_wait_ns,
      sync_ns, launch_overhead_ns, other_ns, before, after, launch_ns, sync_name,
      sync_start_ns); a folder reduced rank by rank keeps those the report and rules read
      (`read_gaps`).
    - `gap_histogram` (of every gap): lo_ns, hi_ns, count, total_ns and ns per cause.
    - `sync_calls`: host syncs with rank, step, name, op, site, start_ns, idle_ns.
    - `sync_sites`: rank, name, op, site, count, steps, idle_ns, per_step
      (`sync_sites_summary`); `syncs_per_step`: rank, step, count.
    - `timeline_bins`: rank, device, bin, start_ns, end_ns, busy_ns, `<cause>_ns`: each
      window cut into equal bins (for the timeline strip); with collectives also comm_ns
      and comm_wait_ns (`with_comm`).
    - `launch_gap_max_ns`: the longest gap that counts as launch overhead.

    Its frames are checked against `SCHEMAS` (and `OPTIONAL`) when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "gaps": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "gap_ns": pl.Int64,
            "cause": pl.Enum,
            "host_wait_ns": pl.Int64,
            "sync_ns": pl.Int64,
            "launch_overhead_ns": pl.Int64,
            "other_ns": pl.Int64,
            "before": pl.String,
            "after": pl.String,
            "launch_ns": pl.Int64,
            "sync_name": pl.String,
            "sync_start_ns": pl.Int64,
        },
        "gap_histogram": {
            "lo_ns": pl.Int64,
            "hi_ns": pl.Int64,
            "count": pl.Int64,
            "total_ns": pl.Int64,
            "host_wait_ns": pl.Int64,
            "sync_ns": pl.Int64,
            "launch_overhead_ns": pl.Int64,
            "other_ns": pl.Int64,
        },
        "sync_calls": {
            "rank": pl.Int32,
            "step": pl.Int64,
            "name": pl.String,
            "op": pl.String,
            "site": pl.String,
            "start_ns": pl.Int64,
            "idle_ns": pl.Int64,
        },
        "sync_sites": {
            "rank": pl.Int32,
            "name": pl.String,
            "op": pl.String,
            "site": pl.String,
            "count": pl.Int64,
            "steps": pl.Int64,
            "idle_ns": pl.Int64,
            "per_step": pl.Float64,
        },
        "syncs_per_step": {
            "rank": pl.Int32,
            "step": pl.Int64,
            "count": pl.Int64,
        },
        "timeline_bins": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "bin": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "busy_ns": pl.Int64,
            "host_wait_ns": pl.Int64,
            "sync_ns": pl.Int64,
            "launch_overhead_ns": pl.Int64,
            "other_ns": pl.Int64,
        },
    }
    #: Columns a frame carries only where the trace has them: `timeline_bins` gains the
    #: communication split in a job with collectives.
    OPTIONAL: ClassVar[Schemas] = {
        "timeline_bins": {"comm_ns": pl.Int64, "comm_wait_ns": pl.Int64},
    }

    gaps: pl.DataFrame
    gap_histogram: pl.DataFrame
    sync_calls: pl.DataFrame
    sync_sites: pl.DataFrame
    syncs_per_step: pl.DataFrame
    timeline_bins: pl.DataFrame
    launch_gap_max_ns: int

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.idle", self.SCHEMAS, self.OPTIONAL)


def sync_calls(timeline: Timeline) -> pl.LazyFrame:
    """Host calls that block on the GPU: rank, pid, tid, name, start_ns, end_ns.

    CUPTI synchronisation records (kind `sync`) count too; they carry no host thread. So do
    asynchronous copy calls whose copy is to or from pageable host memory (`.cpu()`,
    `.to("cpu")` into an unpinned tensor): the host waits for the stream, then for the copy.
    """
    name = pl.col("name").cast(pl.String)
    events = timeline.events.lazy()
    host = events.filter(pl.col("kind").is_in(_HOST_CALLS))
    calls = host.filter(name.str.contains(SYNC_CALL_PATTERN))
    pageable = events.filter(
        (pl.col("kind") == Kind.MEMCPY.value)
        & (
            ((pl.col("copy_kind") == "DtoH") & (pl.col("dst_memory") == "pageable"))
            | ((pl.col("copy_kind") == "HtoD") & (pl.col("src_memory") == "pageable"))
        )
    ).select("rank", "correlation")
    blocking = host.filter(
        pl.col("correlation").is_not_null() & name.str.contains(ASYNC_COPY_PATTERN)
    ).join(pageable, on=["rank", "correlation"], how="semi")
    records = events.filter(pl.col("kind") == Kind.SYNC.value)
    return pl.concat([calls, blocking, records]).select(
        "rank", "pid", "tid", name=name, start_ns="start_ns", end_ns="end_ns"
    )


def idle_gaps(
    timeline: Timeline,
    work: pl.LazyFrame,
    windows: pl.LazyFrame,
    syncs: pl.LazyFrame,
    launch_gap_max_ns: int = LAUNCH_GAP_MAX_NS,
) -> pl.LazyFrame:
    """Every gap in GPU work inside each device's window, with its cause.

    `work` is the GPU work with `launch_ns` (see windows.linked_work). Columns: rank,
    device, start_ns, end_ns, gap_ns, cause, before (name of the work that ended at the gap's
    start), after (name of the work that ended the gap), launch_ns (when that work was
    launched), sync_name (the sync call in progress, for `sync` gaps).
    """
    wins = windows.select(*DEVICE_KEY, w_start="start_ns", w_end="end_ns")
    clipped = (
        work.join(wins, on=DEVICE_KEY)
        .with_columns(
            start_ns=pl.max_horizontal("start_ns", "w_start"),
            end_ns=pl.min_horizontal("end_ns", "w_end"),
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
    )
    merged = union(clipped, DEVICE_KEY)
    gaps = (
        merged.with_columns(
            gap_start=pl.col("end_ns"),
            gap_end=pl.col("start_ns").shift(-1).over(DEVICE_KEY),
        )
        .filter(pl.col("gap_end").is_not_null() & (pl.col("gap_end") > pl.col("gap_start")))
        .select(*DEVICE_KEY, start_ns="gap_start", end_ns="gap_end")
    )
    # the window's opening, before its first GPU work (the first step starts at its marker:
    # a host that launches late leaves the GPU idle from there)
    opening = (
        merged.group_by(DEVICE_KEY)
        .agg(end_ns=pl.col("start_ns").min())
        .join(wins, on=DEVICE_KEY)
        .filter(pl.col("end_ns") > pl.col("w_start"))
        .select(*DEVICE_KEY, start_ns="w_start", end_ns="end_ns")
    )
    gaps = pl.concat([opening, gaps], how="vertical")
    # the work that ends the gap: earliest launch among the ops starting exactly there
    # only the work at gap edges matters: semi-join to the edges before naming anything.
    # Edges are matched on one integer (device and time packed, see `_edge_key`) where the
    # windows allow it: joins on (rank, device, time) encode every row and are far slower.
    key = _edge_key(windows)

    def edge_on(time: str) -> list[str]:
        return [*DEVICE_KEY, time] if key is None else [f"_k_{time}"]

    def keyed(frame: pl.LazyFrame, time: str) -> pl.LazyFrame:
        return frame if key is None else frame.with_columns(key(time).alias(f"_k_{time}"))

    gaps = keyed(keyed(gaps, "start_ns"), "end_ns")
    edges_after = gaps.select(*edge_on("end_ns"))
    edges_before = gaps.select(*edge_on("start_ns"))
    after = (
        keyed(work.select(*DEVICE_KEY, "start_ns", "launch_ns", "name"), "start_ns")
        .join(edges_after, left_on=edge_on("start_ns"), right_on=edge_on("end_ns"), how="semi")
        .sort("launch_ns", nulls_last=True)
        .unique(subset=edge_on("start_ns"), keep="first")
        .select(*edge_on("start_ns"), "launch_ns", after="name")
    )
    before = (
        keyed(work.select(*DEVICE_KEY, "end_ns", "name"), "end_ns")
        .join(edges_before, left_on=edge_on("end_ns"), right_on=edge_on("start_ns"), how="semi")
        .unique(subset=edge_on("end_ns"), keep="first")
        .select(*edge_on("end_ns"), before="name")
    )
    merged_syncs = union(syncs.select("rank", "start_ns", "end_ns"), ["rank"])
    # the host call to name (CUPTI records have no thread, and a call is what a user can fix)
    named_syncs = syncs.filter(pl.col("pid").is_not_null()).select(
        "rank", n_start="start_ns", n_end="end_ns", sync_name="name"
    )
    gap_ns = pl.col("end_ns") - pl.col("start_ns")
    rest = pl.col("gap_ns") - pl.col("sync_ns")
    launched_late = pl.col("launch_ns") >= pl.col("start_ns")
    rest_cause = (
        pl.when(launched_late & (rest <= launch_gap_max_ns))
        .then(pl.lit("launch_overhead"))
        .when(launched_late)
        .then(pl.lit("host_wait"))
        .otherwise(pl.lit("other"))
    )
    with_sync = busy_before(
        busy_before(
            gaps.join(
                after,
                left_on=edge_on("end_ns"),
                right_on=edge_on("start_ns"),
                how="left",
            )
            .join(
                before,
                left_on=edge_on("start_ns"),
                right_on=edge_on("end_ns"),
                how="left",
            )
            .select(pl.all().exclude("^_k_.*$")),
            merged_syncs,
            ["rank"],
            "start_ns",
        ),
        merged_syncs,
        ["rank"],
        "end_ns",
    )
    named = pl.col("n_end") > pl.col("start_ns")
    return (
        with_sync.with_columns(
            gap_ns=gap_ns,
            # a sync waits for queued work; where the work that ended the gap was queued
            # before the gap began, the GPU was not starved of it and the sync is not why
            # it idled (the profiler's closing cudaDeviceSynchronize, reached while the GPU
            # is still steps behind, made every small gap of those steps `sync`)
            sync_ns=pl.when(pl.col("launch_ns") < pl.col("start_ns"))
            .then(0)
            .otherwise(pl.col("end_ns_busy_ns") - pl.col("start_ns_busy_ns")),
        )
        .with_columns(rest_cause=rest_cause)
        .with_columns(
            [
                pl.when(pl.col("rest_cause") == c).then(rest).otherwise(0).alias(f"{c}_ns")
                for c in CAUSES
                if c != "sync"
            ]
        )
        .with_columns(
            cause=pl.when(pl.col("sync_ns") >= rest)
            .then(pl.lit("sync"))
            .otherwise(pl.col("rest_cause"))
            .cast(CAUSE)
        )
        .sort("end_ns")
        .join_asof(
            named_syncs.sort("n_start"),
            left_on="end_ns",
            right_on="n_start",
            by="rank",
            strategy="backward",
            allow_exact_matches=False,  # a sync must start before the gap ends
            check_sortedness=False,
        )
        .with_columns(
            sync_name=pl.when(named & (pl.col("sync_ns") > 0)).then(pl.col("sync_name")),
            sync_start_ns=pl.when(named & (pl.col("sync_ns") > 0)).then(pl.col("n_start")),
        )
        .pipe(_as_text, work, ["before", "after"])
        .select(
            *DEVICE_KEY,
            "start_ns",
            "end_ns",
            "gap_ns",
            "cause",
            *(f"{c}_ns" for c in CAUSES),
            "before",
            "after",
            "launch_ns",
            "sync_name",
            "sync_start_ns",
        )
        .pipe(sort_stable, [*DEVICE_KEY, "start_ns"])  # one gap per (device, start)
    )


def _as_text(frame: pl.LazyFrame, work: pl.LazyFrame, columns: list[str]) -> pl.LazyFrame:
    """Categorical work-name columns of `frame` as String, through a join with the distinct
    names: the strings of each name are made once and every row's value points into them
    (a cast would copy the name into each row: 0.5 GB for a million gaps of long kernel
    names)."""
    text = work.select(pl.col("name").unique()).with_columns(_text=pl.col("name").cast(pl.String))
    for c in columns:
        frame = (
            frame.join(text, left_on=c, right_on="name", how="left", maintain_order="left")
            .drop(c)
            .rename({"_text": c})
        )
    return frame


def _edge_key(windows: pl.LazyFrame) -> Callable[[str], pl.Expr] | None:
    """A function giving, for a time column, one Int64 per (rank, device, time) inside the
    device's window (null outside it): the window's index times a stride, plus the time
    since the earliest window start. Distinct points get distinct keys. None where the
    windows are too long or too many for an Int64.
    """
    wins = windows.select(*DEVICE_KEY, "start_ns", "end_ns").collect()
    if wins.height == 0:
        return None
    lo = int(wins["start_ns"].min())  # type: ignore[arg-type]
    stride = int(wins["end_ns"].max()) - lo + 1  # type: ignore[arg-type]
    if stride <= 0 or wins.height * stride >= 1 << 62:
        return None
    packed = pl.col("rank").cast(pl.Int64) * (1 << 32) + pl.col("device").cast(pl.Int64)
    ids = (wins["rank"].cast(pl.Int64) * (1 << 32) + wins["device"].cast(pl.Int64)).to_list()
    index = packed.replace_strict(
        ids, list(range(wins.height)), default=None, return_dtype=pl.Int64
    )
    w_start = packed.replace_strict(ids, wins["start_ns"].to_list(), default=None)
    w_end = packed.replace_strict(ids, wins["end_ns"].to_list(), default=None)

    def key(time: str) -> pl.Expr:
        t = pl.col(time)
        inside = (t >= w_start) & (t <= w_end)
        return pl.when(inside).then(index * stride + (t - lo))

    return key


def idle_by_cause(gaps: pl.LazyFrame) -> pl.LazyFrame:
    """rank, device and one `<cause>_ns` column per cause (0 where none)."""
    totals = gaps.group_by(*DEVICE_KEY).agg(
        [pl.col(f"{c}_ns").sum() for c in CAUSES]
        + [
            pl.len().cast(pl.Int64).alias("gap_count"),
            pl.col("gap_ns").max().alias("longest_gap_ns"),
        ]
    )
    return totals


def idle_per_step(gaps: pl.LazyFrame, steps: pl.LazyFrame) -> pl.LazyFrame:
    """rank, device, step and idle ns by cause per device step (a gap lies in one step)."""
    return (
        gaps.sort("start_ns")
        .join_asof(
            steps.select(*DEVICE_KEY, "step", step_start="start_ns").sort("step_start"),
            left_on="start_ns",
            right_on="step_start",
            by=DEVICE_KEY,
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("step").is_not_null())
        .group_by(*DEVICE_KEY, "step")
        .agg([pl.col(f"{c}_ns").sum() for c in CAUSES])
    )


#: A Python frame of the user's code, not of torch or a library (`file.py(line): function`).
_USER_FRAME = r"^[^<]*\.py\(\d+\): "
_LIBRARY_FRAME = r"(?:site-packages|dist-packages|/lib/python|^torch/|^<|^threading\.py)"


#: Host ranges that mark steps or the profiler's own work, never a call site.
_STEP_RANGE = r"^(?:ProfilerStep#\d+|PyTorch Profiler|\[memory\])"


def sync_sites(
    timeline: Timeline, syncs: pl.LazyFrame, markers: pl.LazyFrame, gaps: pl.LazyFrame
) -> pl.LazyFrame:
    """Host sync calls with where they came from and the idle they caused.

    Columns: rank, step (host step containing the call; null outside steps), name (the API
    call), op (the outermost CPU operator around it, e.g. `aten::item`), site (the innermost
    Python frame of user code around it, e.g. `train.py(88): train_step`, where the trace has
    Python stacks), start_ns, idle_ns (the idle of `sync` gaps during this call).
    """
    calls = syncs.filter(pl.col("pid").is_not_null()).with_row_index("_call")
    thread = ["rank", "pid", "tid"]
    # only the threads that made sync calls matter, and of their events only the kinds read
    # below, each filtered before anything else (with Python stacks most of a thread's
    # events are frames: a table of every event of the thread was the plan's largest)
    threads = calls.select(thread).unique()
    everything = timeline.events.lazy()

    def on_threads(kind: Kind, order: bool = False) -> pl.LazyFrame:
        of_kind = everything.filter(pl.col("kind") == kind.value)
        # `_event`: the order recorded (among the events of the kind): ties are decided by it
        return (of_kind.with_row_index("_event") if order else of_kind).join(
            threads, on=thread, how="semi"
        )

    # outermost operator: the top-level CPU op (not inside another op on its thread) around it
    ops = (
        on_threads(Kind.CPU_OP, order=True)
        .select(*thread, "start_ns", "end_ns", "_event", op="name")
        # an operator and the one it calls can start in the same microsecond (aten::to and
        # aten::_to_copy): the enclosing one, which ends later, first (then as recorded)
        .sort([*thread, "start_ns", "end_ns", "_event"], descending=[False] * 4 + [True, False])
        .with_columns(_reach=pl.col("end_ns").cum_max().shift(1).over(thread))
        .filter(pl.col("_reach").is_null() | (pl.col("_reach") <= pl.col("start_ns")))
        # names become text only for the top-level operators left
        .select(*thread, op_start="start_ns", op_end="end_ns", op=pl.col("op").cast(pl.String))
    )
    with_op = (
        calls.sort("start_ns")
        .join_asof(
            ops.sort("op_start"),
            left_on="start_ns",
            right_on="op_start",
            by=thread,
            strategy="backward",
            check_sortedness=False,
        )
        .with_columns(op=pl.when(pl.col("op_end") >= pl.col("end_ns")).then(pl.col("op")))
        .drop("op_start", "op_end")
    )
    frames = (
        on_threads(Kind.PYTHON)
        .select(*thread, f_start="start_ns", f_end="end_ns", site=pl.col("name").cast(pl.String))
        .filter(
            pl.col("site").str.contains(_USER_FRAME) & ~pl.col("site").str.contains(_LIBRARY_FRAME)
        )
    )
    # the innermost frame: the latest to start, then the first to end (then by name: a tie in
    # both is decided the same way whatever order the join left the rows in)
    sites = _innermost(calls, frames, "f_start", "f_end", "site")
    # without Python stacks: the innermost user range around the call (a module's
    # record_function such as `DistributedDataParallel.forward`, `nn.Module: Linear_0`)
    ranges = (
        on_threads(Kind.ANNOTATION)
        .select(*thread, a_start="start_ns", a_end="end_ns", annot=pl.col("name").cast(pl.String))
        .join(markers.select(annot="name").unique(), on="annot", how="anti")
        .filter(~pl.col("annot").str.contains(_STEP_RANGE))
    )
    annotated = _innermost(calls, ranges, "a_start", "a_end", "annot")
    idle = (
        gaps.filter(pl.col("sync_start_ns").is_not_null())
        .group_by("rank", "sync_start_ns")
        .agg(idle_ns=pl.col("sync_ns").sum())
    )
    stepped = with_op.sort("start_ns").join_asof(
        markers.select("rank", "step", s_start="start_ns", s_end="end_ns").sort("s_start"),
        left_on="start_ns",
        right_on="s_start",
        by="rank",
        strategy="backward",
        check_sortedness=False,
    )
    return (
        stepped.with_columns(step=pl.when(pl.col("start_ns") < pl.col("s_end")).then("step"))
        .join(sites, on="_call", how="left")
        .join(annotated, on="_call", how="left")
        .with_columns(site=pl.coalesce("site", "annot"))
        .join(idle, left_on=["rank", "start_ns"], right_on=["rank", "sync_start_ns"], how="left")
        .select(
            "rank",
            "step",
            "name",
            "op",
            "site",
            "start_ns",
            idle_ns=pl.col("idle_ns").fill_null(0),
        )
        .sort("rank", "start_ns")
    )


#: The longest idle gaps the report lists.
LONGEST_GAPS = 10


def longest_first(gaps: pl.DataFrame) -> pl.DataFrame:
    """The gaps longest first (ties in a fixed order: rank, device, start)."""
    return gaps.sort(
        ["gap_ns", "rank", "device", "start_ns"], descending=[True, False, False, False]
    )


def read_gaps(gaps: pl.DataFrame) -> pl.DataFrame:
    """The gaps the report and the rules read: the LONGEST_GAPS longest, and every gap during
    which a sync was in progress (TA002 prices them). A job's ranks hand on these only: the
    longest of the job are among the longest of its ranks."""
    return longest_first(gaps).filter(
        (pl.int_range(pl.len()) < LONGEST_GAPS) | (pl.col("sync_ns") > 0)
    )


def gap_histogram(gaps: pl.DataFrame) -> pl.DataFrame:
    """lo_ns, hi_ns, count, total_ns and `<cause>_ns` per log-spaced gap-length bin."""
    edges = histogram_edges(int(gaps["gap_ns"].max() or 0))  # type: ignore[arg-type]
    bins = pl.DataFrame(
        {"lo_ns": edges[:-1], "hi_ns": edges[1:]}, schema={"lo_ns": pl.Int64, "hi_ns": pl.Int64}
    )
    counted = (
        gaps.lazy()
        .sort("gap_ns")
        .join_asof(bins.lazy().sort("lo_ns"), left_on="gap_ns", right_on="lo_ns")
        .group_by("hi_ns")
        .agg(
            [pl.len().cast(pl.Int64).alias("count"), pl.col("gap_ns").sum().alias("total_ns")]
            + [pl.col(f"{c}_ns").sum() for c in CAUSES]
        )
    )
    return (
        bins.lazy()
        .join(counted, on="hi_ns", how="left")
        .with_columns(pl.all().exclude("lo_ns", "hi_ns").fill_null(0))
        .sort("lo_ns")
        .collect()
    )


def _innermost(
    calls: pl.LazyFrame, spans: pl.LazyFrame, start: str, end: str, name: str
) -> pl.LazyFrame:
    """_call, `name`: of the `spans` (rank, pid, tid, `start`, `end`, `name`) on a call's
    thread that enclose it, the innermost: the latest to start, then the first to end, then
    by name. The enclosing pairs come from an inequality join on the times, which yields
    only those pairs (a join on the thread first would pair each call with every span of
    its thread: 43 million rows for 1000 calls on a trace with Python stacks)."""
    thread = ["rank", "pid", "tid"]
    # collected apart: polars would otherwise push the thread's equality below into the
    # join, which makes it the join on the thread again
    pairs = (
        calls.select("_call", *thread, "start_ns", "end_ns")
        .join_where(
            spans.rename({c: f"_{c}" for c in thread}),
            pl.col(start) <= pl.col("start_ns"),
            pl.col(end) >= pl.col("end_ns"),
        )
        .collect(engine="in-memory")
    )
    return (
        pairs.lazy()
        # as a join on the thread matches: a null id matches nothing
        .filter(pl.all_horizontal(pl.col(c) == pl.col(f"_{c}") for c in thread))
        .group_by("_call")
        .agg(pl.col(name).sort_by([start, end, name], descending=[False, True, False]).last())
    )


def sync_sites_summary(calls: pl.DataFrame, steps_per_rank: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, name, op, site): count, steps (distinct steps with one), per_step (count
    in steps / steps of that rank; null without steps), idle_ns; most idle first (then most
    calls, then by rank, name, op and site).

    `steps_per_rank`: rank, steps (number of host steps).

    A sync outside every step under no operator, on a rank with steps, is left out: it is
    not the loop's (the profiler's own `cudaDeviceSynchronize` when it stops, or a
    `torch.cuda.synchronize()` around the loop). A sync in a step is kept, stack or not.
    """
    return (
        calls.lazy()
        .group_by("rank", "name", "op", "site")
        .agg(
            count=pl.len().cast(pl.Int64),
            in_steps=pl.col("step").is_not_null().sum().cast(pl.Int64),
            steps=pl.col("step").drop_nulls().n_unique().cast(pl.Int64),
            idle_ns=pl.col("idle_ns").sum(),
        )
        .join(steps_per_rank.lazy(), on="rank", how="left", suffix="_total")
        .with_columns(
            per_step=pl.when(pl.col("steps_total") > 0).then(
                pl.col("in_steps") / pl.col("steps_total")
            )
        )
        .filter(
            ~(
                (pl.col("steps") == 0)
                & pl.col("op").is_null()
                & pl.col("site").is_null()
                & (pl.col("steps_total") > 0)
            )
        )
        .drop("in_steps", "steps_total")
        .sort(  # ties (the same site on several ranks) in a fixed order: the report is diffed
            ["idle_ns", "count", "rank", "name", "op", "site"],
            descending=[True, True, False, False, False, False],
            nulls_last=True,
        )
        .collect()
    )


@dataclass(frozen=True, slots=True)
class SyncSites:
    """The sync sites of a rank called at least a given number of times per step
    (`SyncImpact.frequent`): `rows` (Metrics.idle.sync_sites' rows: name, op, site, count, steps,
    idle_ns, per_step...), most calls per step first, then most idle, then by name, op and
    site; `per_step` and `idle_ns` their sums."""

    rows: tuple[dict[str, Any], ...]
    per_step: float
    idle_ns: int


@dataclass(frozen=True, slots=True)
class SyncImpact:
    """What one rank's host syncs cost its GPU (TA002's impact model, `sync_impact`).

    - `sites`: the rank's sync sites (Metrics.idle.sync_sites' rows), most calls per step
      first, then most idle, then by name, op and site;
    - `idle_with_refill_ns`: over the window, in every gap during which a sync was in
      progress, the idle while it waited plus the refill after it returned;
    - `rank_idle_ns`: the idle of the rank's most idle device over the window;
    - `impact_ns`: `idle_with_refill_ns` per steady step: what removing the syncs saves;
    - `ceiling_ns`: `rank_idle_ns` per steady step: removing syncs saves at most the GPU's
      idle. Both per step of the rank's device with the most steps; None without steps.
    """

    rank: int
    sites: pl.DataFrame
    idle_with_refill_ns: int
    rank_idle_ns: int
    impact_ns: int | None
    ceiling_ns: int | None

    def frequent(self, min_per_step: float) -> SyncSites:
        """The sites called at least `min_per_step` times per step (none without steps)."""
        mine = self.sites.filter(pl.col("per_step") >= min_per_step)
        return SyncSites(
            rows=tuple(mine.iter_rows(named=True)),
            per_step=float(mine["per_step"].sum()),
            idle_ns=int(mine["idle_ns"].sum()),
        )


def sync_impact(
    gaps: pl.DataFrame,
    devices: pl.DataFrame,
    sites: pl.DataFrame,
    counts: StepCounts,
    launch_gap_max_ns: int,
) -> tuple[SyncImpact, ...]:
    """Each rank's SyncImpact, in order of rank (every rank with a device or a sync site).

    The syncs' GPU idle: in every gap during which a sync was in progress (`gaps.sync_ns`),
    the idle while it waited plus the refill after it returned (the host queued nothing
    while it waited, so the GPU also waits for the next launch). CPU time blocked in the call
    while the GPU is busy is not counted: removing the sync does not give it back.

    The refill is the sync's up to how far the host was ahead: a host that waited A ns in
    the call while the GPU still worked would, without the sync, have queued work A ns ahead
    of the GPU, which covers a refill up to A (a GPU-bound run: the whole refill); a host
    that was not ahead (a sync that waited a few µs) is the host's own after the launch-gap
    limit `launch_gap_max_ns` (TA001). The sync's start is known where the call was named
    (a host thread).

    `gaps`, `devices`, `sites`: Metrics.idle.gaps, Metrics.devices.summary and
    Metrics.idle.sync_sites; `counts`: the
    steps each device's window holds."""
    ahead = (pl.col("start_ns") - pl.col("sync_start_ns")).fill_null(0)
    cap = pl.max_horizontal(ahead, pl.lit(launch_gap_max_ns))
    refill = pl.min_horizontal(pl.col("gap_ns") - pl.col("sync_ns"), cap)
    bubble = dict(
        gaps.filter(pl.col("sync_ns") > 0)
        .group_by("rank")
        .agg((pl.col("sync_ns") + refill).sum())
        .iter_rows()
    )
    idle = dict(devices.group_by("rank").agg(pl.col("idle_ns").max()).iter_rows())
    ranks = sorted(set(devices["rank"].to_list()) | set(sites["rank"].to_list()))
    listed = sites.sort(
        ["per_step", "idle_ns", "name", "op", "site"],
        descending=[True, True, False, False, False],
        nulls_last=True,
    )
    out = []
    for rank in ranks:
        n = counts.most_on(rank)
        own, most = int(bubble.get(rank) or 0), int(idle.get(rank) or 0)
        out.append(
            SyncImpact(
                rank=rank,
                sites=listed.filter(pl.col("rank") == rank),
                idle_with_refill_ns=own,
                rank_idle_ns=most,
                impact_ns=own // n if n else None,
                ceiling_ns=most // n if n else None,
            )
        )
    return tuple(out)


def syncs_per_step(calls: pl.DataFrame) -> pl.DataFrame:
    """rank, step, count of host sync calls in each host step (steps with none are absent)."""
    return (
        calls.lazy()
        .filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(count=pl.len().cast(pl.Int64))
        .sort("rank", "step")
        .collect()
    )


def host_wait_between_steps(gaps: pl.LazyFrame, steps: pl.LazyFrame) -> pl.LazyFrame:
    """rank, device, host_wait_between_steps_ns: host-wait idle in the gaps that end at a
    step's first GPU operation (the GPU waiting for the next step: input pipeline, logging,
    checkpointing), as opposed to waits inside a step (CPU-side work between launches)."""
    firsts = steps.select(*DEVICE_KEY, end_ns="first_ns")
    return (
        gaps.join(firsts, on=[*DEVICE_KEY, "end_ns"], how="semi")
        .group_by(DEVICE_KEY)
        .agg(host_wait_between_steps_ns=pl.col("host_wait_ns").sum())
    )


#: Bins of the per-device timeline strip: a long trace is summarised, never drawn per event.
TIMELINE_BINS = 240


def timeline_bins(
    gaps: pl.DataFrame,
    windows: pl.DataFrame,
    bins: int = TIMELINE_BINS,
    comm: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """rank, device, bin, start_ns, end_ns, busy_ns and `<cause>_ns`: each device's window cut
    into `bins` equal bins. A gap's time in a bin is split between its causes in proportion
    to their shares of the whole gap.

    With `comm` (communication kernels: rank, device, start_ns, end_ns, wait_ns), two more
    columns: `comm_ns`, the bin's time with a collective running (part of busy_ns), and
    `comm_wait_ns`, the part of it spent waiting for other ranks (the first `wait_ns` of each
    matched collective; see overlap.matched_collectives)."""
    key = ["rank", "device"]
    wins = _bin_widths(windows, bins)
    grid = (
        wins.with_columns(bin=pl.int_ranges(0, bins))
        .explode("bin")
        .with_columns(
            start_ns=pl.col("w_start") + pl.col("bin") * pl.col("width"),
            end_ns=pl.min_horizontal(
                pl.col("w_start") + (pl.col("bin") + 1) * pl.col("width"), pl.col("w_end")
            ),
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .with_columns(bin=pl.col("bin").cast(pl.Int64))
    )
    first = ((pl.col("start_ns") - pl.col("w_start")) // pl.col("width")).clip(0, bins - 1)
    last = ((pl.col("end_ns") - 1 - pl.col("w_start")) // pl.col("width")).clip(0, bins - 1)
    pieces = (
        gaps.lazy()
        .join(wins.lazy(), on=key)
        .with_columns(bin=pl.int_ranges(first, last + 1))
        .explode("bin")
        .with_columns(
            b_lo=pl.col("w_start") + pl.col("bin") * pl.col("width"),
            b_hi=pl.col("w_start") + (pl.col("bin") + 1) * pl.col("width"),
        )
        .with_columns(
            part=(pl.min_horizontal("end_ns", "b_hi") - pl.max_horizontal("start_ns", "b_lo")).clip(
                0
            )
            / pl.col("gap_ns")
        )
        .group_by(*key, "bin")
        .agg([(pl.col(f"{c}_ns") * pl.col("part")).sum().alias(f"{c}_ns") for c in CAUSES])
    )
    idle = sum((pl.col(f"{c}_ns") for c in CAUSES), pl.lit(0, pl.Int64))
    out = (
        grid.lazy()
        .join(pieces, on=[*key, "bin"], how="left")
        .with_columns([pl.col(f"{c}_ns").fill_null(0.0).round().cast(pl.Int64) for c in CAUSES])
        .with_columns(busy_ns=(pl.col("end_ns") - pl.col("start_ns") - idle).clip(0))
        .select(*key, "bin", "start_ns", "end_ns", "busy_ns", *(f"{c}_ns" for c in CAUSES))
    )
    binned = out.sort(*key, "bin").collect()
    return binned if comm is None else with_comm(binned, windows, comm, bins)


def _bin_widths(windows: pl.DataFrame, bins: int) -> pl.DataFrame:
    return windows.select(
        "rank",
        "device",
        w_start="start_ns",
        w_end="end_ns",
        width=((pl.col("end_ns") - pl.col("start_ns")) / bins).ceil().cast(pl.Int64).clip(1),
    )


def with_comm(
    binned: pl.DataFrame, windows: pl.DataFrame, comm: pl.DataFrame, bins: int = TIMELINE_BINS
) -> pl.DataFrame:
    """`timeline_bins` without `comm`, and the two columns `comm` adds (a job's matched
    collectives are known once every rank's bins are made)."""
    key = ["rank", "device"]
    wins = _bin_widths(windows, bins)
    out = binned.lazy()
    spans = comm.lazy().select(*key, "start_ns", "end_ns")
    waits = comm.lazy().select(
        *key, "start_ns", end_ns=pl.col("start_ns") + pl.col("wait_ns").fill_null(0)
    )
    for name, frame in (("comm_ns", spans), ("comm_wait_ns", waits)):
        covered = _covered_per_bin(union(frame, key).drop("busy_before_ns"), wins, bins)
        out = out.join(covered.rename({"ns": name}), on=[*key, "bin"], how="left")
        out = out.with_columns(pl.col(name).fill_null(0))
    return out.sort(*key, "bin").collect()


def _covered_per_bin(intervals: pl.LazyFrame, wins: pl.DataFrame, bins: int) -> pl.LazyFrame:
    """rank, device, bin, ns: how much of each bin the (disjoint) intervals cover."""
    key = ["rank", "device"]
    first = ((pl.col("start_ns") - pl.col("w_start")) // pl.col("width")).clip(0, bins - 1)
    last = ((pl.col("end_ns") - 1 - pl.col("w_start")) // pl.col("width")).clip(0, bins - 1)
    return (
        intervals.join(wins.lazy(), on=key)
        .filter((pl.col("end_ns") > pl.col("w_start")) & (pl.col("start_ns") < pl.col("w_end")))
        .with_columns(bin=pl.int_ranges(first, last + 1))
        .explode("bin")
        .with_columns(
            b_lo=pl.col("w_start") + pl.col("bin") * pl.col("width"),
            b_hi=pl.min_horizontal(
                pl.col("w_start") + (pl.col("bin") + 1) * pl.col("width"), pl.col("w_end")
            ),
        )
        .with_columns(
            ns=(pl.min_horizontal("end_ns", "b_hi") - pl.max_horizontal("start_ns", "b_lo")).clip(0)
        )
        .group_by(*key, "bin")
        .agg(pl.col("ns").sum().cast(pl.Int64))
        .with_columns(pl.col("bin").cast(pl.Int64))
    )
