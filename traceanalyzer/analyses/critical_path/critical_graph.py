"""Critical-path graph: the node and edge tables of each step's dependency graph.

Analyses stage; `critical_path.py` runs the longest path over these tables. Everything here
is polars: one table of edges for every step at once, solved by `longest_path`. This
module makes the nodes (see `NodeIds`) and the step windows; `critical_edges` makes the
edges of each role and marks the binding ones; `critical_path` solves.

Nodes are points in time: the start and end of each GPU operation, the points of each host
thread that something depends on (launch calls, sync calls, the thread's first and last
event in the step), one source and one sink per (rank, step), one arrival node per matched
collective and one job source per step. Edges (`u` → `v`) say "v cannot happen before u":

- `op`: a GPU operation's start → its end (its duration);
- `stream`: GPU work in order on each stream (end → next start);
- `launch`: a runtime/driver launch call's start → the GPU work it launched (correlation id);
- `thread`: consecutive points on a host thread (nesting is kept by ordering the points:
  a segment inside a sync call is `sync_wait`, inside a launch call `cpu_launch`, else `cpu`);
- `wait`: a sync call waits for the GPU work it waited on (the latest GPU operation of the
  rank that ended while the call was in progress) → the call's end;
- `xstream`: an operation that started later than anything recorded explains, within
  `CROSS_STREAM_MAX_NS` of the end of work on another stream of its device, waited for it
  (the trace keeps no event record/wait ids, so the wait is inferred);
- `arrive` / `collective`: the n-th collective of each kind on each stream of every rank is
  one collective; each participant's start → the arrival node → each participant's end
  (a collective ends no earlier than its last participant arrives, plus the shortest
  participant's duration, the transfer itself);
- `source` / `sink` / `job`: bookkeeping edges into and out of each (rank, step).

Each edge carries `work_ns` (the least time it needs: a duration, a launch call, host time)
and `gap_ns` (the time that really passed between its ends). Of a node's incoming edges
the one with the least slack (`gap_ns - work_ns`) is binding and weighs `gap_ns`, so the
longest path reproduces the trace's own times exactly; the others weigh
`min(work_ns, gap_ns)`. The slack of a binding edge is charged to its `slack_kind`.

Steps: step N of a rank runs from `S` = max(its marker's start, the end of step N-1) to `T`
= the end of its last GPU operation or host event, whichever is later (so steps tile time).
Work of step N before `S` (the host ran ahead of a GPU-bound step) is clipped to `S`.
Clocks of different ranks are aligned on the ends of their matched collectives (all
participants leave a collective together), median offset per (step, rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.critical_path.critical_edges import (
    EDGE_KIND,
    bind,
    frame_edges,
    gpu_edges,
    host_edges,
)
from traceanalyzer.analyses.gpu.classify import (
    KERNEL_CLASSES,
    kernel_class,
    with_comm_collective,
    with_launching_op,
)
from traceanalyzer.analyses.gpu.operators import collective_launches
from traceanalyzer.analyses.timeline.intervals import in_ranges
from traceanalyzer.analyses.timeline.windows import CRITICAL_PATH_COLUMNS
from traceanalyzer.model import Kind, Timeline
from traceanalyzer.timings import stage

#: A GPU operation that started within this long after work on another stream of its device
#: ended, and later than its stream and launch explain, is taken to have waited for it.
CROSS_STREAM_MAX_NS = 10_000

_HOST_KINDS = [k.value for k in (Kind.RUNTIME, Kind.DRIVER, Kind.CPU_OP, Kind.PYTHON)] + [
    Kind.ANNOTATION.value
]
_THREAD = ["rank", "pid", "tid"]


class NodeIds:
    """Hands out the graph's node ids: integers in named, consecutive blocks (GPU operation
    starts and ends, host points, step sources and sinks, collective arrivals, step jobs), so
    that a table's node column is its block's first id plus the row's index."""

    def __init__(self) -> None:
        self.count = 0
        self.blocks: dict[str, tuple[int, int]] = {}

    def take(self, name: str, size: int) -> int:
        """Reserve `size` ids for block `name`; return the first."""
        first = self.count
        self.blocks[name] = (first, size)
        self.count += size
        return first


@dataclass(frozen=True, slots=True)
class GraphTables:
    """The dependency graphs of every step, as tables.

    `windows`: step, rank, name, start_ns (S), end_ns (T), offset_ns (added to this rank's
    clock to align it), source, sink (node ids). `edges` (critical_edges.bind): u, v, owner
    (rank), role, work_kind, slack_kind, binding, weight_ns, work_part_ns, slack_part_ns,
    sorted by u then v (see the module docstring).
    `jobs`: step, job (the node id of the step's job source).
    `nodes` (only where asked for: `build_tables(with_nodes=True)`): node, kind (gpu_start,
    gpu_end, host, step_start, step_end, arrival, job), rank, step, name (a GPU operation's;
    a host point's label: which call or event it is), device, stream, pid, tid, time_ns
    (the rank's clock; an arrival's on the first rank's).
    """

    windows: pl.DataFrame
    edges: pl.DataFrame
    jobs: pl.DataFrame
    node_count: int
    nodes: pl.DataFrame | None = None


#: The edge kind a kernel class's time is charged to.
_WORK_KIND_OF_CLASS = {c: "comm" if c == "comm" else f"gpu_{c}" for c in KERNEL_CLASSES}


def gpu_ops(
    timeline: Timeline, markers: pl.DataFrame, work: pl.DataFrame | None = None
) -> pl.DataFrame:
    """GPU work with its class, launch call and step.

    Columns: rank, device, stream, name, start_ns, end_ns, work_kind, coll (collective kind
    of comm kernels), launch_start_ns, launch_end_ns, pid, tid (launching thread), step (host
    step that launched it; work without a recorded launch falls in the step whose marker
    range holds its start), pre (work queued before the window that still runs when the first
    step starts: step null; launched before the first step, or without a recorded launch and
    starting before the device's first launched work). `work`: the GPU work with its
    launches (windows.linked_work), where already computed.
    """
    # the name's class once (a column), then each class's edge kind by lookup: a string
    # built and cast per row took 0.2 s at 10^6 kernels
    cls = with_launching_op(pl.col("_class"), pl.col("op_name"))
    work_kind = (
        pl.when(pl.col("kind") != Kind.KERNEL.value)
        .then(pl.lit("copy", EDGE_KIND))
        .otherwise(cls.replace_strict(_WORK_KIND_OF_CLASS, return_dtype=EDGE_KIND))
    )
    source = (
        timeline.launch_links()
        if work is None
        else work.lazy().rename({"launch_ns": "launch_start_ns"})
    )
    links = source.select(
        *CRITICAL_PATH_COLUMNS,
        launch_start_ns="launch_start_ns",
        launch_end_ns="launch_end_ns",
        pid="launch_pid",
        tid="launch_tid",
    ).with_columns(key=pl.coalesce("launch_start_ns", "start_ns"))
    # work queued before the window (launched before the first step, in a warm-up step left
    # out, or during the profiler's warm-up, whose launches are not recorded) that still runs
    # when the first step starts: `pre`, not part of any step; the first step starts when
    # it drains (see step_windows), so the GPU time it takes is not the first step's idle
    first = markers.lazy().group_by("rank").agg(f_start=pl.col("start_ns").min())
    launched_in = (
        links.join(first, on="rank")
        .filter(pl.col("launch_start_ns").is_not_null() & (pl.col("key") >= pl.col("f_start")))
        .group_by("rank", "device")
        .agg(d_first=pl.col("start_ns").min())
    )
    pre = (
        pl.when(pl.col("launch_start_ns").is_not_null())
        .then(pl.col("key") < pl.col("f_start"))
        .otherwise(pl.col("start_ns") < pl.col("d_first"))
        & (pl.col("end_ns") > pl.col("f_start"))
    ).fill_null(False)
    links = (
        links.join(first, on="rank", how="left")
        .join(launched_in, on=["rank", "device"], how="left")
        .with_columns(pre=pre)
        .drop("f_start", "d_first")
        .sort("key")
    )
    ranges = markers.lazy().select("rank", "step", m_start="start_ns", m_end="end_ns")
    placed = (
        links.join_asof(
            ranges.sort("m_start"),
            left_on="key",
            right_on="m_start",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .with_columns(step=pl.when(~pl.col("pre")).then(pl.col("step")))
        .filter(pl.col("pre") | (pl.col("step").is_not_null() & (pl.col("key") < pl.col("m_end"))))
    )
    # classified once placed: the steps analysed may be a sample of the trace's
    # a kernel a collective operator launched is communication whatever its name
    classed = placed.join(
        collective_launches(timeline),
        on=["rank", "correlation"],
        how="left",
        maintain_order="left",
    ).with_columns(_class=kernel_class(pl.col("name")))
    classed = classed.with_columns(work_kind=work_kind)
    return with_comm_collective(classed.collect(), pl.col("work_kind") == "comm", "coll").select(
        "rank",
        "device",
        "stream",
        "name",
        "start_ns",
        "end_ns",
        "work_kind",
        "coll",
        "launch_start_ns",
        "launch_end_ns",
        "pid",
        "tid",
        "step",
        "pre",
    )


def _host_events(timeline: Timeline, markers: pl.DataFrame) -> pl.LazyFrame:
    """Host events that start inside a step's marker range, with that step."""
    return in_ranges(
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(_HOST_KINDS) & pl.col("pid").is_not_null())
        .select(*_THREAD, "start_ns", "end_ns"),
        markers.lazy(),
        "rank",
    )


def step_windows(
    ops: pl.DataFrame,
    host: pl.DataFrame,
    markers: pl.DataFrame,
    queued: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """rank, step, name, start_ns (S), end_ns (T) of each step: steps tile each rank's time.
    `queued` (rank, pre_end_ns): where the GPU work queued before the window ends; a rank's
    first step starts no earlier."""
    last = (
        pl.concat([ops.select("rank", "step", "end_ns"), host.select("rank", "step", "end_ns")])
        .group_by("rank", "step")
        .agg(last_ns=pl.col("end_ns").max())
    )
    if queued is None:
        queued = pl.DataFrame(schema={"rank": pl.Int32(), "pre_end_ns": pl.Int64()})
    return (
        markers.join(last, on=["rank", "step"], how="left")
        .join(queued, on="rank", how="left")
        .sort("rank", "start_ns")
        .with_columns(
            t=pl.max_horizontal("end_ns", "last_ns", "pre_end_ns").cum_max().over("rank"),
        )
        .with_columns(
            s=pl.max_horizontal(
                "start_ns",
                pl.coalesce(pl.col("t").shift(1).over("rank"), pl.col("pre_end_ns")),
            ),
        )
        .select("rank", "step", "name", start_ns="s", end_ns="t")
    )


@dataclass(frozen=True, slots=True)
class GraphInputs:
    """What the graphs of some ranks' sampled steps are built from (`graph_inputs`): all a
    rank's graph needs of its events, so the ranks of a job can be read and reduced apart and
    their graphs built together (`build_tables` over `GraphInputs.concat` of every rank's).

    `markers`: the sampled steps' markers; `ops`: gpu_ops of those steps (and the work queued
    before them: `pre`); `threads`: each host thread's first start and last end in each step
    (rank, step, pid, tid, first, last); `syncs`: the sync calls that start in a step (rank,
    step, pid, tid, start_ns, end_ns)."""

    markers: pl.DataFrame
    ops: pl.DataFrame
    threads: pl.DataFrame
    syncs: pl.DataFrame

    @staticmethod
    def concat(parts: list[GraphInputs]) -> GraphInputs:
        """The inputs of several ranks (each part's ranks apart from the others')."""
        if len(parts) == 1:
            return parts[0]
        return GraphInputs(
            *(pl.concat([getattr(p, f) for p in parts]) for f in GraphInputs.__slots__)
        )


def graph_inputs(
    timeline: Timeline,
    markers: pl.DataFrame,
    syncs: pl.DataFrame,
    work: pl.DataFrame | None = None,
) -> GraphInputs:
    """The graph inputs of the steps of `markers` (see `GraphInputs`, `build_tables`)."""
    with stage("analyze: critical path, tables: gpu ops"):
        ops = gpu_ops(timeline, markers, work)
    # each host thread's first start and last end in each step: all the graph needs of the
    # host events (with Python stacks recorded they are most of the trace: not held)
    threads = (
        _host_events(timeline, markers)
        .group_by("rank", "step", "pid", "tid")
        .agg(first=pl.col("start_ns").min(), last=pl.col("end_ns").max())
        .collect(engine="in-memory")
    )
    in_steps = in_ranges(
        syncs.lazy().filter(pl.col("pid").is_not_null()).select(*_THREAD, "start_ns", "end_ns"),
        markers.lazy(),
        "rank",
    )
    return GraphInputs(
        markers=markers,
        ops=ops,
        threads=threads,
        syncs=in_steps.select("rank", "step", "pid", "tid", "start_ns", "end_ns").collect(),
    )


def input_windows(inputs: GraphInputs) -> pl.DataFrame:
    """The step windows (`step_windows`) of the inputs' steps: each depends on the steps
    before it on its rank (steps tile time), so they are made for all steps at once."""
    ops = inputs.ops
    queued = ops.filter(pl.col("pre")).group_by("rank").agg(pre_end_ns=pl.col("end_ns").max())
    host = inputs.threads.select("rank", "step", end_ns="last")
    return step_windows(_stepped(ops), host, inputs.markers, queued)


def _stepped(ops: pl.DataFrame) -> pl.DataFrame:
    """The GPU work of the steps (not queued before the window), without the `pre` column;
    no copy where nothing was queued (at 10^6 kernels a copy is ~100 MB)."""
    return (ops.filter(~pl.col("pre")) if ops["pre"].any() else ops).drop("pre")


def in_steps(inputs: GraphInputs, steps: pl.Series) -> GraphInputs:
    """The inputs of some steps only (on every rank; without the work queued before the
    window, which only `input_windows` reads)."""
    inside = pl.col("step").is_in(steps.implode())
    return GraphInputs(
        markers=inputs.markers.filter(inside),
        ops=inputs.ops.filter(inside & ~pl.col("pre")),
        threads=inputs.threads.filter(inside),
        syncs=inputs.syncs.filter(inside),
    )


def build_tables(
    inputs: GraphInputs,
    *,
    cross_stream_max_ns: int = CROSS_STREAM_MAX_NS,
    windows: pl.DataFrame | None = None,
    with_nodes: bool = False,
) -> GraphTables:
    """Build the node and edge tables of every step's graph (see the module docstring) from
    the inputs of every rank of the job (`graph_inputs`). `windows`: the steps' windows where
    already made (`input_windows` over more steps than `inputs` holds: the steps' graphs
    share no node, so a job's steps can be built and solved a few at a time). `with_nodes`:
    also the table of what each node is (`GraphTables.nodes`: for a graph to explore)."""
    markers = inputs.markers
    raw_ops = _stepped(inputs.ops)
    if windows is None:
        wins = input_windows(inputs)
    else:
        wins = windows.join(markers.select("rank", "step"), on=["rank", "step"], how="semi")
    s_of = wins.select("rank", "step", w_start="start_ns", w_end="end_ns")
    threads = inputs.threads

    ids = NodeIds()
    # --- GPU operations, clipped to their step's window: two nodes each (start, end)
    ops = (
        raw_ops.join(s_of, on=["rank", "step"])
        .filter(pl.col("end_ns") > pl.col("w_start"))
        .with_columns(start_ns=pl.max_horizontal("start_ns", "w_start"))
        .sort("rank", "step", "device", "stream", "start_ns", "end_ns", maintain_order=True)
        .with_row_index("i")
    )
    first_op = ids.take("gpu_ops", 2 * ops.height)
    ops = ops.with_columns(
        start_node=first_op + pl.col("i").cast(pl.Int64) * 2,
        end_node=first_op + pl.col("i").cast(pl.Int64) * 2 + 1,
    )
    stream_key = ["rank", "step", "device", "stream"]

    # --- host points, clipped to S, one node per distinct (thread, time)
    sync_calls = (
        inputs.syncs.lazy()
        .join(s_of.lazy(), on=["rank", "step"])
        .filter(pl.col("end_ns") > pl.col("w_start"))
        .with_columns(start_ns=pl.max_horizontal("start_ns", "w_start"))
        .select("rank", "step", "pid", "tid", "start_ns", "end_ns")
        .collect(engine="in-memory")
    )
    launched = ops.filter(pl.col("launch_start_ns").is_not_null()).with_columns(
        launch_at=pl.max_horizontal("launch_start_ns", "w_start"),
        launch_done=pl.max_horizontal("launch_end_ns", "w_start"),
    )
    spans = (
        threads.join(s_of, on=["rank", "step"])
        .filter(pl.col("last") > pl.col("w_start"))
        .with_columns(first=pl.max_horizontal("first", "w_start"))
    )
    pkey = ["rank", "step", "pid", "tid"]
    ends = [
        launched.select(*pkey, t="launch_at", label=pl.lit("launch call")),
        launched.select(*pkey, t="launch_done", label=pl.lit("launch call end")),
        sync_calls.select(*pkey, t="start_ns", label=pl.lit("sync call")),
        sync_calls.select(*pkey, t="end_ns", label=pl.lit("sync call end")),
        spans.select(*pkey, t="first", label=pl.lit("thread's first event")),
        spans.select(*pkey, t="last", label=pl.lit("thread's last event")),
    ]
    ordered = (
        pl.concat(ends)
        .lazy()
        .with_row_index("src")
        .sort(*pkey, "t")
        # duplicates are neighbours once sorted (a hashing `unique` took 8x longer)
        .with_columns(
            new=pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(1)) for c in [*pkey, "t"])
        )
        .with_columns(j=pl.col("new").cast(pl.Int64).cum_sum() - 1)
        # (these tables' plans run on the in-memory engine: at 10^6 kernels the streaming
        # one took 0.5 s longer over them)
        .collect(engine="in-memory")
    )
    points = ordered.filter(pl.col("new")).select(*pkey, "t", "j", "label")
    first_point = ids.take("host_points", points.height)
    points = points.with_columns(node=first_point + pl.col("j")).drop("j")
    labels = points.select("node", "label") if with_nodes else None
    points = points.drop("label")
    # each launch's and each sync call's end point, by the rows the points came from: the
    # edges that start or end there need no join on the five keys (0.4 s at 10^6 kernels)
    node_of = pl.repeat(0, ordered.height, dtype=pl.Int64, eager=True).scatter(
        ordered["src"], ordered["j"] + first_point
    )
    del ordered
    n_launched, n_syncs = launched.height, sync_calls.height
    launched = launched.with_columns(at_node=node_of.slice(0, n_launched))
    sync_calls = sync_calls.with_columns(end_node=node_of.slice(2 * n_launched + n_syncs, n_syncs))
    del node_of
    first_window = ids.take("step_windows", 2 * wins.height)  # a source and a sink each
    wins = (
        wins.sort("rank", "step")
        .with_row_index("k")
        .with_columns(
            source=first_window + 2 * pl.col("k").cast(pl.Int64),
            sink=first_window + 2 * pl.col("k").cast(pl.Int64) + 1,
        )
        .drop("k")
    )

    # --- collectives across ranks, and each rank's clock offset per step
    ranks_in_step = markers.group_by("step").agg(world=pl.col("rank").n_unique())
    comm = (
        ops.filter(pl.col("work_kind") == "comm")
        .sort("rank", "step", "stream", "start_ns")
        .with_columns(seq=pl.int_range(pl.len()).over("rank", "step", "stream", "coll"))
        .join(ranks_in_step, on="step")
        .with_columns(
            n=pl.len().over("step", "stream", "coll", "seq"),
            dur=pl.col("end_ns") - pl.col("start_ns"),
        )
        .filter((pl.col("world") > 1) & (pl.col("n") == pl.col("world")))
    )
    ref = comm.with_columns(
        ref_end=pl.col("end_ns").sort_by("rank").first().over("step", "stream", "coll", "seq")
    )
    offsets = ref.group_by("rank", "step").agg(
        offset_ns=(pl.col("ref_end") - pl.col("end_ns")).median().round().cast(pl.Int64)
    )
    wins = wins.join(offsets, on=["rank", "step"], how="left").with_columns(
        pl.col("offset_ns").fill_null(0)
    )
    off = wins.select(
        "rank", "step", "offset_ns", "source", "sink", w_start="start_ns", w_end="end_ns"
    )
    coll = (
        comm.join(off.select("rank", "step", "offset_ns"), on=["rank", "step"])
        .with_columns(start_al=pl.col("start_ns") + pl.col("offset_ns"))
        .with_columns(
            arrive_t=pl.col("start_al").max().over("step", "stream", "coll", "seq"),
            d_min=pl.col("dur").min().over("step", "stream", "coll", "seq"),
            cid=pl.struct("step", "stream", "coll", "seq").rank("dense").cast(pl.Int64) - 1,
        )
    )
    n_coll = int(coll["cid"].max() + 1) if coll.height else 0  # type: ignore[operator]
    first_arrival = ids.take("collective_arrivals", n_coll)
    coll = coll.with_columns(
        arrive=first_arrival + pl.col("cid"), end_al=pl.col("end_ns") + pl.col("offset_ns")
    )
    steps = wins.select("step").unique().sort("step").with_row_index("q")
    first_job = ids.take("step_jobs", steps.height)
    jobs = steps.select("step", job=first_job + pl.col("q").cast(pl.Int64))
    node_count = ids.count

    with stage("analyze: critical path, tables: edges"):
        # one order whatever order the edges were made in: by source, then target (node
        # ids are below 2^31, so the pair is one integer and one cheap sort)
        edges = (
            pl.concat(
                [
                    *gpu_edges(ops, coll, stream_key, cross_stream_max_ns),
                    *host_edges(points, launched, sync_calls, ops),
                    *frame_edges(ops, points, off, jobs, stream_key),
                ]
            )
            .sort(pl.col("u") * (1 << 32) + pl.col("v"), maintain_order=True)
            .collect(engine="in-memory")
        )
    nodes = (
        _node_table(ops, points, labels, wins, coll, jobs)  # type: ignore[arg-type]
        if with_nodes
        else None
    )
    # the node tables are done with: freed before the edges get their weights (at 10^6
    # kernels they are a few hundred MB)
    del raw_ops, ops, launched, points, spans, sync_calls, threads, coll, comm, ref
    with stage("analyze: critical path, tables: binding edges"):
        edges = bind(edges, node_count)
    return GraphTables(
        windows=wins.select(
            "step", "rank", "name", "start_ns", "end_ns", "offset_ns", "source", "sink"
        ),
        edges=edges,
        jobs=jobs,
        node_count=node_count,
        nodes=nodes,
    )


def _node_table(
    ops: pl.DataFrame,
    points: pl.DataFrame,
    labels: pl.DataFrame,
    wins: pl.DataFrame,
    coll: pl.DataFrame,
    jobs: pl.DataFrame,
) -> pl.DataFrame:
    """What each node of the graph is (`GraphTables.nodes`)."""
    cols = {
        "node": pl.Int64,
        "kind": pl.String,
        "rank": pl.Int32,
        "step": pl.Int64,
        "name": pl.String,
        "device": pl.Int32,
        "stream": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "time_ns": pl.Int64,
    }

    def part(frame: pl.DataFrame, **exprs: pl.Expr) -> pl.DataFrame:
        return frame.select(**{c: exprs.get(c, pl.lit(None)).cast(t) for c, t in cols.items()})

    gpu = {
        "rank": pl.col("rank"),
        "step": pl.col("step"),
        "name": pl.col("name").cast(pl.String),
        "device": pl.col("device"),
        "stream": pl.col("stream"),
    }
    host = points.join(labels, on="node")
    return pl.concat(
        [
            part(
                ops,
                node=pl.col("start_node"),
                kind=pl.lit("gpu_start"),
                time_ns=pl.col("start_ns"),
                **gpu,
            ),
            part(
                ops,
                node=pl.col("end_node"),
                kind=pl.lit("gpu_end"),
                time_ns=pl.col("end_ns"),
                **gpu,
            ),
            part(
                host,
                node=pl.col("node"),
                kind=pl.lit("host"),
                rank=pl.col("rank"),
                step=pl.col("step"),
                name=pl.col("label"),
                pid=pl.col("pid"),
                tid=pl.col("tid"),
                time_ns=pl.col("t"),
            ),
            part(
                wins,
                node=pl.col("source"),
                kind=pl.lit("step_start"),
                rank=pl.col("rank"),
                step=pl.col("step"),
                name=pl.col("name"),
                time_ns=pl.col("start_ns"),
            ),
            part(
                wins,
                node=pl.col("sink"),
                kind=pl.lit("step_end"),
                rank=pl.col("rank"),
                step=pl.col("step"),
                name=pl.col("name"),
                time_ns=pl.col("end_ns"),
            ),
            part(
                coll.unique("arrive", keep="first").sort("arrive"),
                node=pl.col("arrive"),
                kind=pl.lit("arrival"),
                step=pl.col("step"),
                name=pl.col("coll").cast(pl.String),
                time_ns=pl.col("arrive_t"),
            ),
            part(jobs, node=pl.col("job"), kind=pl.lit("job"), step=pl.col("step")),
        ]
    ).sort("node")
