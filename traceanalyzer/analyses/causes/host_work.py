"""Host-side causes: the host work of each inside the steady steps, and the GPU idle it explains.

A host-side cause is work the host does in the loop that a named fix removes whole:

- `allocator`: `cudaMalloc`/`cudaFree` (and the driver's and HIP's) calls: the caching
  allocator going to the driver because its pool was emptied (`torch.cuda.empty_cache()`) or
  cannot hold the step's blocks; a free synchronises the device;
- `compilation`: torch.compile's compile phases (Dynamo, AOTAutograd, Inductor, Triton):
  a compile inside a steady step is a recompilation;
- `anomaly_checks`: anomaly mode's NaN check after every backward function
  (`torch.autograd.set_detect_anomaly(True)`): `isnan`, `_is_any_true` and `item` under the
  engine's `evaluate_function` range, the `item` a device sync;
- `recompute`: forward operators run again inside backward functions (activation
  checkpointing, recompute.py): their host side; their kernels are priced apart;
- `zero_grad_fill`: the gradients filled with zeros inside the optimizer's zero_grad
  (`zero_grad(set_to_none=False)`): their host side; their kernels are priced apart;
- `host_batch`: the step's inputs built on the host from Python data and copied to the
  device from pageable memory in the same step (host_batch.py): the constructors' host
  time and the blocking copies, each of which waits for the GPU work queued before it;
- `library_setup`: cuDNN (or MIOpen) setting itself up for a new input shape inside an
  operator: a convolution that synchronises the device (cudnn.benchmark timing candidate
  algorithms), or a cuDNN operator holding the host `SETUP_MIN_NS` or longer (building an
  execution plan); the outermost such operator on its thread. A convolution that times
  candidates synchronises (the refill after it is counted);
- `graph_breaks`: the host time of compiled regions outside their compiled graphs
  (compilation.region_glue); the share of it the breaks add is priced in impact.py;
- `compiled_backward`: the compiled backward's runs (`CompiledFunctionBackward`): not a
  cause of its own; where its GEMM FLOPs show a recompute (recompute.compiled_recompute),
  the recomputed share of it is the recompute's host side (impact.py);
- `ddp_sync`: DDP's reducer all-reducing the gradients after a micro-batch that is not the
  last of its accumulation cycle (ddp_sync.py: `no_sync` missing).

**What removing the work saves (the idle it explains).** Over each idle gap of a device in
its window, the part during which the host was inside the cause's work (the union of its
calls on the rank), and, where the gap began while the host was inside a call that
synchronises (a free, a check's `item`), the refill after the call returned, as for any sync
(idle.sync_impact): the host queued nothing while it waited, so the GPU also waits for the
next launch; the refill is counted up to how far ahead the host was (the time it waited in
the call before the GPU went idle), at least the launch-gap limit. A gap is never counted
beyond its length. Host time in the calls while the GPU is busy is not counted: removing it
shortens no step while the GPU is the bottleneck.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.causes.compilation import region_glue
from traceanalyzer.analyses.causes.ddp_sync import extra_rounds
from traceanalyzer.analyses.causes.host_batch import batch_work, paired
from traceanalyzer.analyses.causes.nesting import KEYS, inside, outermost
from traceanalyzer.analyses.causes.recompute import forward_in_backward, launched_in
from traceanalyzer.analyses.timeline.intervals import busy_before, in_ranges, union
from traceanalyzer.model import Kind, Timeline

#: The host-side causes, in the order their rules come.
HOST_CAUSES = (
    "compilation",
    "allocator",
    "anomaly_checks",
    "recompute",
    "zero_grad_fill",
    "host_batch",
    "library_setup",
    "graph_breaks",
    "compiled_backward",
    "ddp_sync",
)
CAUSE = pl.Enum(list(HOST_CAUSES))

#: The per-device frame (`Causes.host`).
HOST_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "cause": CAUSE,
    "steps": pl.Int64(),
    "steps_with": pl.Int64(),
    "calls": pl.Int64(),
    "syncing_calls": pl.Int64(),
    "host_ns": pl.Int64(),
    "idle_ns": pl.Int64(),
}
#: The names frame (`Causes.names`): each cause's calls by name, on each rank.
NAMES_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "cause": CAUSE,
    "name": pl.String(),
    "count": pl.Int64(),
    "total_ns": pl.Int64(),
    "parent": pl.String(),
}

#: Per device (`Causes.zero_fill`): the kernels zero_grad's fills launched in the steady steps.
ZERO_FILL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "kernels": pl.Int64(),
    "kernel_ns": pl.Int64(),
}

_HOST_RANGES = [Kind.CPU_OP.value, Kind.ANNOTATION.value, Kind.PYTHON.value]
_HOST_CALLS = [Kind.RUNTIME.value, Kind.DRIVER.value]
_COLS = ["rank", "pid", "tid", "name", "start_ns", "end_ns"]


def cause_calls(timeline: Timeline) -> pl.LazyFrame:
    """rank, cause, name, start_ns, end_ns, syncs, parent: every call of a host-side cause in
    the trace (`parent`: the backward function an anomaly check ran under, else null)."""
    events = timeline.events.lazy()
    name = pl.col("name").cast(pl.String)
    allocator = (
        events.filter(pl.col("kind").is_in(_HOST_CALLS))
        .select(*_COLS[:3], name=name, start_ns="start_ns", end_ns="end_ns")
        .filter(pl.col("name").str.contains(sig.ALLOCATOR_CALLS))
        .with_columns(
            cause=pl.lit("allocator"),
            syncs=pl.col("name").str.contains(sig.ALLOCATOR_SYNCS),
            parent=pl.lit(None, pl.String),
        )
    )
    ranges = events.filter(pl.col("kind").is_in(_HOST_RANGES)).select(
        *_COLS[:3], name=name, start_ns="start_ns", end_ns="end_ns"
    )
    # each family's plan only where the trace holds its mark: the distinct host names are
    # few, and every plan skipped is a pass over the host events saved
    names = (
        events.filter(pl.col("kind").is_in(_HOST_RANGES))
        .select(pl.col("name").unique().cast(pl.String))
        .collect()
        .to_series()
    )

    def has(pattern: str) -> bool:
        return bool(names.str.contains(pattern).any())

    none = pl.LazyFrame(
        schema={
            "rank": pl.Int32(),
            "name": pl.String(),
            "start_ns": pl.Int64(),
            "end_ns": pl.Int64(),
            "syncs": pl.Boolean(),
            "parent": pl.String(),
        }
    )
    families: list[tuple[str, str, Callable[[], pl.LazyFrame]]] = [
        ("compilation", sig.COMPILE_WORK, lambda: ranges.filter(name_is(sig.COMPILE_WORK))),
        ("anomaly_checks", sig.ANOMALY_MARK, lambda: _anomaly_checks(ranges)),
        ("recompute", sig.BACKWARD_FUNCTION, lambda: forward_in_backward(timeline)),
        ("zero_grad_fill", sig.ZERO_GRAD_RANGE, lambda: zero_fills(ranges)),
        ("host_batch", sig.FROM_HOST_DATA, lambda: batch_work(timeline, ranges)),
        ("library_setup", sig.LIBRARY_OP, lambda: library_setup(events, ranges)),
        ("graph_breaks", sig.REGION_RUN, lambda: region_glue(ranges)),
        (
            "compiled_backward",
            sig.COMPILED_BACKWARD,
            lambda: ranges.filter(name_is(sig.COMPILED_BACKWARD)),
        ),
        ("ddp_sync", sig.DDP_FORWARD, lambda: extra_rounds(ranges)),
    ]
    found = [allocator.select("rank", "cause", "name", "start_ns", "end_ns", "syncs", "parent")]
    for cause, mark, plan in families:
        f = plan() if has(mark) else none
        if "syncs" not in f.collect_schema():
            f = f.with_columns(syncs=pl.lit(False))
        if "parent" not in f.collect_schema():
            f = f.with_columns(parent=pl.lit(None, pl.String))
        found.append(
            f.with_columns(cause=pl.lit(cause)).select(
                "rank", "cause", "name", "start_ns", "end_ns", "syncs", "parent"
            )
        )
    return pl.concat(found).with_columns(pl.col("cause").cast(CAUSE))


def name_is(pattern: str) -> pl.Expr:
    """The rows whose name (as text) matches `pattern`."""
    return pl.col("name").str.contains(pattern)


#: A cuDNN operator holding the host this long sets the library up (a plan built for a new
#: shape): a warm one returns in tens of microseconds, even under the profiler.
SETUP_MIN_NS = 1_000_000


def library_setup(events: pl.LazyFrame, ranges: pl.LazyFrame) -> pl.LazyFrame:
    """rank, name, start_ns, end_ns, syncs: the library operators (sig.LIBRARY_OP) that
    synchronise the device inside them (`syncs`) or last at least SETUP_MIN_NS, outermost
    on their thread. `events`: the timeline's events; `ranges`: its host ranges (name as
    text)."""
    syncs = events.filter(pl.col("kind").is_in(_HOST_CALLS)).select(
        *_COLS[:3], name=pl.col("name").cast(pl.String), start_ns="start_ns", end_ns="end_ns"
    )
    library = ranges.filter(pl.col("name").str.contains(sig.LIBRARY_OP))
    waited = (
        inside(pl.concat([library, syncs]), sig.LIBRARY_OP, sig.DEVICE_SYNC)
        .select(*KEYS, start_ns="_o_start")
        .unique()
        .with_columns(syncs=pl.lit(True))
    )
    picked = (
        library.join(waited, on=[*KEYS, "start_ns"], how="left")
        .with_columns(pl.col("syncs").fill_null(False))
        .filter(pl.col("syncs") | (pl.col("end_ns") - pl.col("start_ns") >= SETUP_MIN_NS))
    )
    # the outermost picked operators; one synchronises where an operator nested in it does
    return (
        outermost(picked)
        .with_columns(_group=pl.col("_outer").cum_sum().over(KEYS))
        .with_columns(syncs=pl.col("syncs").any().over(*KEYS, "_group"))
        .filter("_outer")
        .select("rank", "name", "start_ns", "end_ns", "syncs")
    )


def zero_fills(ranges: pl.LazyFrame) -> pl.LazyFrame:
    """rank, pid, tid, name, start_ns, end_ns: what zero-filled gradients cost: the operators
    that fill them inside the optimizer's zero_grad ranges, and, on the ranks that fill, the
    adds into the filled gradients inside the engine's AccumulateGrad (with None gradients it
    takes the new gradient as it is). `ranges`: the host ranges, name as text."""
    fills = inside(ranges, sig.ZERO_GRAD_RANGE, sig.ZERO_FILL).drop("_o_start", "_o_name")
    adds = (
        inside(ranges, sig.ACCUMULATE_GRAD, sig.ACCUMULATE_ADD)
        .drop("_o_start", "_o_name")
        .join(fills.select("rank").unique(), on="rank", how="semi")
    )
    return pl.concat([fills, adds])


def _anomaly_checks(ranges: pl.LazyFrame) -> pl.LazyFrame:
    """The check operators inside backward functions that ran anomaly mode's NaN check (an
    `isnan` among them): each with the backward function around it as `parent`."""
    ops = inside(ranges, sig.BACKWARD_FUNCTION, sig.ANOMALY_CHECK)
    checked = ops.filter(pl.col("name").str.contains(sig.ANOMALY_MARK)).select(*KEYS, "_o_start")
    return (
        ops.join(checked.unique(), on=[*KEYS, "_o_start"], how="semi")
        .with_columns(
            cause=pl.lit("anomaly_checks"),
            syncs=pl.col("name").str.contains(sig.ANOMALY_SYNC),
            parent=pl.col("_o_name").str.replace(sig.BACKWARD_FUNCTION, ""),
        )
        .drop("_o_start", "_o_name")
    )


def host_causes(
    timeline: Timeline,
    markers: pl.LazyFrame,
    wins: pl.DataFrame,
    gaps: pl.DataFrame,
    launch_gap_max_ns: int,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per device, names): the host-side causes inside the steady steps.

    Per device (HOST_SCHEMA), for each cause with a call inside a steady step of the rank:
    `steps` (the rank's steady steps), `steps_with` (those holding a call), `calls`,
    `syncing_calls` (those that synchronise),
    `host_ns` (the union of the calls, any thread of the rank) and `idle_ns` (the idle of the
    device's gaps the work explains: the module docstring). Names (NAMES_SCHEMA): the calls
    by name (and backward function, for the checks), longest total first.

    `markers`: the steady steps' host ranges (rank, step, start_ns, end_ns); `wins`: the
    devices' windows (rank, device); `gaps`: the idle gaps (Metrics.idle.gaps' columns
    rank, device, start_ns, end_ns, gap_ns); `launch_gap_max_ns`: the least refill counted
    after a synchronising call."""
    steps = markers.select("rank", "step", "start_ns", "end_ns")
    # a call belongs to the step its end falls in, and counts from that step's start: a
    # constructor's op-less time may begin in the step before (host_batch)
    ending = cause_calls(timeline).with_columns(_at=pl.col("end_ns") - 1)
    calls = paired(
        in_ranges(ending, steps, "rank", "_at")
        .join(steps.select("rank", "step", _s="start_ns"), on=["rank", "step"])
        .with_columns(start_ns=pl.max_horizontal("start_ns", "_s"))
        .drop("_at", "_s")
    ).collect()
    if calls.height == 0:
        return pl.DataFrame(schema=HOST_SCHEMA), pl.DataFrame(schema=NAMES_SCHEMA)
    by = ["rank", "cause"]
    merged = union(calls.lazy(), by)
    held = merged.group_by(by).agg(host_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    counted = (
        calls.lazy()
        .group_by(by)
        .agg(
            calls=pl.len().cast(pl.Int64),
            syncing_calls=pl.col("syncs").sum().cast(pl.Int64),
            steps_with=pl.col("step").n_unique().cast(pl.Int64),
        )
    )
    n_steps = steps.group_by("rank").agg(steps=pl.len().cast(pl.Int64))
    present = calls.lazy().select(by).unique()
    g = (
        gaps.lazy()
        .select("rank", "device", g_start="start_ns", g_end="end_ns")
        .join(present, on="rank")
    )
    over = busy_before(busy_before(g, merged, by, "g_start"), merged, by, "g_end").with_columns(
        under_ns=pl.col("g_end_busy_ns") - pl.col("g_start_busy_ns")
    )
    syncing = union(calls.lazy().filter(pl.col("syncs")), by).select(
        *by, _s_start="start_ns", _s_end="end_ns"
    )
    ahead = pl.col("g_start") - pl.col("_s_start")
    refill = (pl.col("g_end") - pl.col("_s_end")).clip(lower_bound=0)
    with_sync = (
        over.sort("g_start")
        .join_asof(
            syncing.sort("_s_start"),
            left_on="g_start",
            right_on="_s_start",
            by=by,
            strategy="backward",
            check_sortedness=False,
        )
        .with_columns(
            sync_ns=pl.when(pl.col("_s_end") > pl.col("g_start"))
            .then(
                pl.min_horizontal("g_end", "_s_end")
                - pl.col("g_start")
                + pl.min_horizontal(refill, pl.max_horizontal(ahead, pl.lit(launch_gap_max_ns)))
            )
            .otherwise(0)
        )
        .with_columns(
            explained=pl.min_horizontal(
                pl.max_horizontal("under_ns", "sync_ns"), pl.col("g_end") - pl.col("g_start")
            )
        )
    )
    idle = with_sync.group_by("rank", "device", "cause").agg(idle_ns=pl.col("explained").sum())
    devices = wins.lazy().select("rank", "device").unique()
    per_device = (
        devices.join(present, on="rank")
        .join(n_steps, on="rank", how="left")
        .join(counted, on=by, how="left")
        .join(held, on=by, how="left")
        .join(idle, on=["rank", "device", "cause"], how="left")
        .with_columns(pl.col("steps", "idle_ns", "host_ns").fill_null(0))
        .select(list(HOST_SCHEMA))
        .sort("rank", "device", "cause")
    )
    names = (
        calls.lazy()
        .group_by("rank", "cause", "name", "parent")
        .agg(count=pl.len().cast(pl.Int64), total_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
        .select(list(NAMES_SCHEMA))
        .sort(["rank", "cause", "total_ns", "name"], descending=[False, False, True, False])
    )
    host, named = pl.collect_all([per_device, names])
    return host.cast(HOST_SCHEMA), named.cast(NAMES_SCHEMA)  # type: ignore[arg-type]


def zero_fill_kernels(
    timeline: Timeline, markers: pl.LazyFrame, linked: pl.DataFrame, kernels: pl.DataFrame
) -> pl.DataFrame:
    """Per device (ZERO_FILL_SCHEMA): the kernels that zero_grad's fills (`zero_fills`)
    launched inside the steady steps (`markers`), and their time in the windows. `linked`:
    the GPU work with its launches; `kernels`: the kernels inside the windows."""
    name = pl.col("name").cast(pl.String)
    ranges = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(_HOST_RANGES))
        .select(*_COLS[:3], name=name, start_ns="start_ns", end_ns="end_ns")
    )
    steps = markers.select("rank", "step", "start_ns", "end_ns")
    ops = in_ranges(zero_fills(ranges), steps, "rank").collect()
    mine = launched_in(ops, linked, kernels)
    return (
        mine.group_by("rank", "device")
        .agg(kernels=pl.len().cast(pl.Int64), kernel_ns=pl.col("clipped_ns").sum())
        .select(list(ZERO_FILL_SCHEMA))
        .sort("rank", "device")
        .cast(ZERO_FILL_SCHEMA)  # type: ignore[arg-type]
    )
