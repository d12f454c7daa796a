"""Critical-path graph, the edges: each edge role of a step's graph (`op`, `stream`,
`launch`, `xstream`, `arrive`/`collective`, `thread`, `wait`, `source`/`sink`/`job`) as rows
of one edge table, and which incoming edge of each node is binding. The roles and their
weights are described in `critical_graph`'s docstring; the nodes come from
`critical_graph.build_tables`."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.critical_path import longest_path

#: Kinds an edge's time is charged to (`gpu_*` make up gpu_compute; `cpu_launch` is cpu).
EDGE_KINDS: tuple[str, ...] = (
    "gpu_gemm",
    "gpu_memory_bound",
    "gpu_copy_cast",
    "gpu_other",
    "comm",
    "copy",
    "cpu",
    "cpu_launch",
    "sync_wait",
    "idle",
)


EDGE_KIND = pl.Enum(list(EDGE_KINDS))


ROLES: tuple[str, ...] = (
    "op",
    "stream",
    "launch",
    "thread",
    "wait",
    "xstream",
    "arrive",
    "collective",
    "source",
    "sink",
    "job",
)


ROLE = pl.Enum(list(ROLES))


EDGE_COLS = ["step", "u", "v", "owner", "role", "work_ns", "work_kind", "gap_ns", "slack_kind"]


def edge_rows(frame: pl.DataFrame | pl.LazyFrame, **cols: pl.Expr) -> pl.LazyFrame:
    """Select the edge columns (`cols` maps each edge column to an expression)."""
    exprs = [cols[c].alias(c) for c in EDGE_COLS]
    return (
        frame.lazy()
        .select(exprs)
        .with_columns(
            pl.col("work_kind").cast(EDGE_KIND),
            pl.col("slack_kind").cast(EDGE_KIND),
            pl.col("role").cast(ROLE),
            pl.col("owner").cast(pl.Int32),
            pl.col("step").cast(pl.Int64),
            pl.col("u").cast(pl.Int64),
            pl.col("v").cast(pl.Int64),
            pl.col("work_ns").cast(pl.Int64),
            pl.col("gap_ns").cast(pl.Int64),
        )
    )


def neighbour(column: str, by: int, keys: list[str]) -> pl.Expr:
    """`column` of the row `by` rows away when it has the same `keys` (else null): the
    frame must be sorted by `keys`. What `shift(by).over(keys)` gives, without hashing
    millions of rows into groups; null keys are one group, as there (a host thread whose
    tid the trace wrote as text without digits has a null tid)."""
    same = pl.all_horizontal(pl.col(k).eq_missing(pl.col(k).shift(by)) for k in keys)
    return pl.when(same).then(pl.col(column).shift(by))


def kind_lit(value: str) -> pl.Expr:
    return pl.lit(value)


def gpu_edges(
    ops: pl.DataFrame,
    coll: pl.DataFrame,
    stream_key: list[str],
    cross_stream_max_ns: int,
) -> list[pl.LazyFrame]:
    """op, stream, xstream, arrive and collective edges."""
    dur = pl.col("end_ns") - pl.col("start_ns")
    matched = coll.select("i", "d_min")
    op_rows = ops.join(matched, on="i", how="left")
    op = edge_rows(
        op_rows,
        step=pl.col("step"),
        u=pl.col("start_node"),
        v=pl.col("end_node"),
        owner=pl.col("rank"),
        role=kind_lit("op"),
        work_ns=pl.coalesce("d_min", dur),
        work_kind=pl.col("work_kind"),
        gap_ns=dur,
        slack_kind=pl.when(pl.col("work_kind") == "comm")
        .then(kind_lit("comm"))
        .otherwise(kind_lit("idle")),
    )
    prev = ops.with_columns(
        pb=neighbour("end_node", 1, stream_key), pe=neighbour("end_ns", 1, stream_key)
    ).filter(pl.col("pb").is_not_null())
    stream = edge_rows(
        prev,
        step=pl.col("step"),
        u=pl.col("pb"),
        v=pl.col("start_node"),
        owner=pl.col("rank"),
        role=kind_lit("stream"),
        work_ns=pl.lit(0),
        work_kind=kind_lit("idle"),
        gap_ns=pl.col("start_ns") - pl.col("pe"),
        slack_kind=kind_lit("idle"),
    )
    # cross-stream waits: the latest end on another stream of the device before the start,
    # when it explains the start better than the stream order and the launch do
    known = pl.max_horizontal(
        pl.col("w_start"),
        pl.col("pe"),
        pl.col("launch_end_ns").clip(upper_bound=pl.col("start_ns")),
    )
    ends = ops.select(
        "rank", "step", "device", o_stream="stream", o_end="end_ns", o_b="end_node"
    ).sort("o_end")
    late = (
        ops.with_columns(pe=neighbour("end_ns", 1, stream_key))
        .filter(pl.col("start_ns") > known)
        .sort("start_ns")
        .join_asof(
            ends,
            left_on="start_ns",
            right_on="o_end",
            by=["rank", "step", "device"],
            strategy="backward",
            tolerance=cross_stream_max_ns,
            check_sortedness=False,
        )
        .filter(
            pl.col("o_b").is_not_null()
            & (pl.col("o_stream") != pl.col("stream"))
            & (pl.col("o_end") > known)
        )
    )
    xstream = edge_rows(
        late,
        step=pl.col("step"),
        u=pl.col("o_b"),
        v=pl.col("start_node"),
        owner=pl.col("rank"),
        role=kind_lit("xstream"),
        work_ns=pl.lit(0),
        work_kind=kind_lit("idle"),
        gap_ns=pl.col("start_ns") - pl.col("o_end"),
        slack_kind=kind_lit("idle"),
    )
    arrive = edge_rows(
        coll,
        step=pl.col("step"),
        u=pl.col("i").cast(pl.Int64) * 2,
        v=pl.col("arrive"),
        owner=pl.col("rank"),
        role=kind_lit("arrive"),
        work_ns=pl.lit(0),
        work_kind=kind_lit("comm"),
        gap_ns=pl.col("arrive_t") - pl.col("start_al"),
        slack_kind=kind_lit("comm"),
    )
    collective = edge_rows(
        coll,
        step=pl.col("step"),
        u=pl.col("arrive"),
        v=pl.col("i").cast(pl.Int64) * 2 + 1,
        owner=pl.col("rank"),
        role=kind_lit("collective"),
        work_ns=pl.col("d_min"),
        work_kind=kind_lit("comm"),
        gap_ns=pl.col("end_al") - pl.col("arrive_t"),
        slack_kind=kind_lit("comm"),
    )
    return [op, stream, xstream, arrive, collective]


def host_edges(
    points: pl.DataFrame,
    launched: pl.DataFrame,
    sync_calls: pl.DataFrame,
    ops: pl.DataFrame,
) -> list[pl.LazyFrame]:
    """thread, launch and wait edges. `launched` and `sync_calls` carry the node of their
    launch's point (`at_node`) and of their end (`end_node`): an edge is made where the
    thread is known (`keyed`), as a join on the thread's keys would match."""
    pkey = ["rank", "step", "pid", "tid"]
    keyed = pl.col("pid").is_not_null() & pl.col("tid").is_not_null()
    seg = (
        points.with_columns(nt=neighbour("t", -1, pkey), nn=neighbour("node", -1, pkey))
        .filter(pl.col("nn").is_not_null())
        .sort("t")
    )
    # calls that start together on one thread (a runtime call and the driver call inside it)
    # count as one, ending at the latest end: the as-of joins below then match one row per
    # start, whatever order a parallel sort left ties in
    calls_sorted = (
        sync_calls.group_by(*pkey, s_start="start_ns")
        .agg(s_end=pl.col("end_ns").max())
        .sort("s_start")
    )
    # launches that start together on one thread share their point: one row per point
    # (sorted by it, not grouped on the five keys: 0.04 s against 0.17 s at 10^6 kernels)
    launches = (
        launched.sort("at_node")
        .select(
            *pkey, "at_node", l_start="launch_at", l_end=pl.col("launch_done").max().over("at_node")
        )
        .filter(pl.col("at_node").ne_missing(pl.col("at_node").shift(1)))
        .drop("at_node")
        .sort("l_start")
    )
    # the GPU work each sync call waited for: the latest end of the rank's GPU work that
    # fell inside the call
    waits = (
        sync_calls.sort("end_ns")
        .join_asof(
            ops.select("rank", "step", g="end_ns", gb="end_node").sort("g", "gb"),
            left_on="end_ns",
            right_on="g",
            by=["rank", "step"],
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("g").is_not_null() & (pl.col("g") > pl.col("start_ns")) & keyed)
        .rename({"end_node": "node"})
    )
    seg = (
        seg.join_asof(
            calls_sorted,
            left_on="t",
            right_on="s_start",
            by=pkey,
            strategy="backward",
            check_sortedness=False,
        )
        .join_asof(
            launches,
            left_on="t",
            right_on="l_start",
            by=pkey,
            strategy="backward",
            check_sortedness=False,
        )
        .join(waits.select(*pkey, nt="end_ns", wg="g"), on=[*pkey, "nt"], how="left")
    )
    in_sync = pl.col("s_end").is_not_null() & (pl.col("s_end") >= pl.col("nt"))
    in_launch = pl.col("l_end").is_not_null() & (pl.col("l_end") >= pl.col("nt"))
    gap = pl.col("nt") - pl.col("t")
    thread = edge_rows(
        seg,
        step=pl.col("step"),
        u=pl.col("node"),
        v=pl.col("nn"),
        owner=pl.col("rank"),
        role=kind_lit("thread"),
        work_ns=pl.when(in_sync & pl.col("wg").is_not_null())
        .then(pl.col("nt") - pl.max_horizontal("t", "wg"))
        .otherwise(gap),
        work_kind=pl.when(in_sync)
        .then(kind_lit("sync_wait"))
        .when(in_launch)
        .then(kind_lit("cpu_launch"))
        .otherwise(kind_lit("cpu")),
        gap_ns=gap,
        slack_kind=kind_lit("idle"),
    )
    lrows = launched.filter(keyed).rename({"at_node": "node"})
    launch = edge_rows(
        lrows,
        step=pl.col("step"),
        u=pl.col("node"),
        v=pl.col("start_node"),
        owner=pl.col("rank"),
        role=kind_lit("launch"),
        work_ns=pl.col("launch_done") - pl.col("launch_at"),
        work_kind=kind_lit("cpu_launch"),
        gap_ns=pl.col("start_ns") - pl.col("launch_at"),
        slack_kind=kind_lit("idle"),
    )
    wait = edge_rows(
        waits,
        step=pl.col("step"),
        u=pl.col("gb"),
        v=pl.col("node"),
        owner=pl.col("rank"),
        role=kind_lit("wait"),
        work_ns=pl.lit(0),
        work_kind=kind_lit("sync_wait"),
        gap_ns=pl.col("end_ns") - pl.col("g"),
        slack_kind=kind_lit("sync_wait"),
    )
    return [thread, launch, wait]


def frame_edges(
    ops: pl.DataFrame,
    points: pl.DataFrame,
    off: pl.DataFrame,
    jobs: pl.DataFrame,
    stream_key: list[str],
) -> list[pl.LazyFrame]:
    """source, sink and job edges."""
    pkey = ["rank", "step", "pid", "tid"]
    first_pts = (
        points.group_by(pkey).agg(pl.all().sort_by("t").first()).join(off, on=["rank", "step"])
    )
    last_pts = (
        points.group_by(pkey).agg(pl.all().sort_by("t").last()).join(off, on=["rank", "step"])
    )
    host_src = edge_rows(
        first_pts,
        step=pl.col("step"),
        u=pl.col("source"),
        v=pl.col("node"),
        owner=pl.col("rank"),
        role=kind_lit("source"),
        work_ns=pl.col("t") - pl.col("w_start"),
        work_kind=kind_lit("cpu"),
        gap_ns=pl.col("t") - pl.col("w_start"),
        slack_kind=kind_lit("idle"),
    )
    # GPU work whose stream predecessor or launch is not in the graph hangs off the source
    orphan = (
        ops.with_columns(first=neighbour("i", 1, stream_key).is_null())
        .filter(pl.col("first") | pl.col("launch_start_ns").is_null())
        .join(off.select("rank", "step", "source"), on=["rank", "step"])
    )
    gpu_src = edge_rows(
        orphan,
        step=pl.col("step"),
        u=pl.col("source"),
        v=pl.col("start_node"),
        owner=pl.col("rank"),
        role=kind_lit("source"),
        work_ns=pl.lit(0),
        work_kind=kind_lit("idle"),
        gap_ns=pl.col("start_ns") - pl.col("w_start"),
        slack_kind=kind_lit("idle"),
    )
    last_ops = ops.filter(pl.col("end_ns") == pl.col("end_ns").max().over(stream_key)).join(
        off.select("rank", "step", "sink"), on=["rank", "step"]
    )
    gpu_sink = edge_rows(
        last_ops,
        step=pl.col("step"),
        u=pl.col("end_node"),
        v=pl.col("sink"),
        owner=pl.col("rank"),
        role=kind_lit("sink"),
        work_ns=pl.lit(0),
        work_kind=kind_lit("idle"),
        gap_ns=pl.col("w_end") - pl.col("end_ns"),
        slack_kind=kind_lit("idle"),
    )
    host_sink = edge_rows(
        last_pts,
        step=pl.col("step"),
        u=pl.col("node"),
        v=pl.col("sink"),
        owner=pl.col("rank"),
        role=kind_lit("sink"),
        work_ns=pl.lit(0),
        work_kind=kind_lit("idle"),
        gap_ns=pl.col("w_end") - pl.col("t"),
        slack_kind=kind_lit("idle"),
    )
    aligned = (
        off.join(jobs, on="step")
        .with_columns(s_al=pl.col("w_start") + pl.col("offset_ns"))
        .with_columns(s_min=pl.col("s_al").min().over("step"))
    )
    job = edge_rows(
        aligned,
        step=pl.col("step"),
        u=pl.col("job"),
        v=pl.col("source"),
        owner=pl.col("rank"),
        role=kind_lit("job"),
        work_ns=pl.col("s_al") - pl.col("s_min"),
        work_kind=kind_lit("idle"),
        gap_ns=pl.col("s_al") - pl.col("s_min"),
        slack_kind=kind_lit("idle"),
    )
    # a step with no host point and no GPU work still gets a path: source -> sink
    empty = edge_rows(
        off,
        step=pl.col("step"),
        u=pl.col("source"),
        v=pl.col("sink"),
        owner=pl.col("rank"),
        role=kind_lit("sink"),
        work_ns=pl.lit(0),
        work_kind=kind_lit("idle"),
        gap_ns=pl.col("w_end") - pl.col("w_start"),
        slack_kind=kind_lit("idle"),
    )
    return [host_src, gpu_src, gpu_sink, host_sink, job, empty]


def bind(edges: pl.DataFrame, node_count: int) -> pl.DataFrame:
    """Mark each node's binding incoming edge and give every edge its weight.

    Binding: the least slack (`gap - work`), ties broken by role order then source node.
    Weights are never negative: a gap below zero (clocks of host and device that disagree
    by a little) counts as zero, so the path may come out a little longer than the step.
    Output columns: u, v, owner, role, work_kind, slack_kind, binding, weight_ns,
    work_part_ns, slack_part_ns, in the order of `edges` (critical_graph sorts them by u,
    then v: the lowest edge index breaks ties in the longest path).
    """
    gap = pl.col("gap_ns").clip(lower_bound=0)
    work = pl.col("work_ns").clip(lower_bound=0)
    binding = longest_path.binding_edges(
        edges["v"].to_numpy(),
        (edges["gap_ns"] - edges["work_ns"]).to_numpy(),
        edges["role"].to_physical().cast(pl.Int64).to_numpy(),
        edges["u"].to_numpy(),
        node_count,
    )
    weight = pl.when(pl.col("binding")).then(gap).otherwise(pl.min_horizontal(work, gap))
    return (
        edges.lazy()
        .with_columns(binding=pl.Series(binding))
        .with_columns(weight_ns=weight)
        .with_columns(work_part_ns=pl.min_horizontal(work, pl.col("weight_ns")))
        .select(  # `step` is left out: the steps are solved together, their nodes apart
            "u",
            "v",
            "owner",
            "role",
            "work_kind",
            "slack_kind",
            "binding",
            "weight_ns",
            "work_part_ns",
            slack_part_ns=pl.col("weight_ns") - pl.col("work_part_ns"),
        )
        .collect(engine="in-memory")
    )
