"""Critical path of each step: what bounds step time, and what a fix would save.

Analyses stage. `critical_graph.build_tables` builds the dependency graph of every step as
polars tables; this module runs the longest path (`longest_path`: compiled loops over all
steps' edges at once) from each step's job source to each rank's sink, charges the time of
every path edge to a kind, and recomputes the longest path with re-weighted edges for the
what-if scenarios.

Path kinds (`PATH_KINDS`, the report contract's `by_kind`):

- `gpu_compute`: GPU kernels that are not communication, split by kernel class
  (`gpu_gemm_ns`, `gpu_memory_bound_ns`, `gpu_copy_cast_ns`, `gpu_other_ns`);
- `comm`: communication kernels (NCCL and the like), including waiting inside a collective;
- `copy`: memcpy and memset operations;
- `cpu`: host time: Python and operator overhead, and kernel launch (`cpu_launch_ns` is the
  part inside launch calls plus the launch latency to the GPU work's start);
- `sync_wait`: host time inside synchronising calls (the wait itself is mostly charged to
  the GPU work waited on, which is on the path: the sync only makes it so);
- `idle`: the rest: gaps the trace does not explain (a GPU op that started later than its
  stream, its launch and the work of other streams allow), time from a step's start to a
  later-starting rank's, and the tail after the binding end.

The kinds add up to `path_ns` exactly. `path_ns` equals `step_ns` (the step's window, see
`critical_graph`) except where host and device clocks disagree (an edge whose end is
recorded before its start counts zero, not negative): then the path is a little longer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import polars as pl

from traceanalyzer.analyses.critical_path import longest_path
from traceanalyzer.analyses.critical_path.critical_edges import EDGE_KINDS, ROLES
from traceanalyzer.analyses.critical_path.critical_graph import (
    CROSS_STREAM_MAX_NS,
    GraphInputs,
    GraphTables,
    build_tables,
    graph_inputs,
    in_steps,
    input_windows,
)
from traceanalyzer.analyses.critical_path.longest_path import I64
from traceanalyzer.analyses.gpu.devices import share
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.model import Timeline

if TYPE_CHECKING:
    import networkx as nx

#: The contract's `by_kind` keys, in order.
PATH_KINDS: tuple[str, ...] = ("gpu_compute", "comm", "copy", "cpu", "sync_wait", "idle")
#: Kernel classes that make up gpu_compute.
GPU_CLASSES: tuple[str, ...] = ("gemm", "memory_bound", "copy_cast", "other")

_KIND_OF_EDGE_KIND: dict[str, str] = {
    **{f"gpu_{c}": "gpu_compute" for c in GPU_CLASSES},
    "comm": "comm",
    "copy": "copy",
    "cpu": "cpu",
    "cpu_launch": "cpu",
    "sync_wait": "sync_wait",
    "idle": "idle",
}

_NEG = longest_path.NEG


_WHAT_IF_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "scenario": pl.String, "saved_ns": pl.Int64}


@dataclass(frozen=True, slots=True)
class Scenario:
    """A what-if: edge time of each listed kind scaled by its factor; `drop` roles removed."""

    name: str
    factors: tuple[tuple[str, float], ...]
    drop: tuple[str, ...] = ()
    what: str = ""


#: The what-ifs, each recomputed on the graph.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "exposed_comm_hidden",
        (("comm", 0.0),),
        what="communication fully overlapped: comm kernels and collective waits cost 0",
    ),
    Scenario(
        "syncs_removed",
        (("sync_wait", 0.0),),
        drop=("wait",),
        what="host-device syncs vanish: sync calls cost 0 and wait for nothing",
    ),
    Scenario(
        "host_gaps_closed",
        (("cpu", 0.0), ("cpu_launch", 0.0)),
        what="host time costs 0: Python, operator and launch overhead, host waits",
    ),
    Scenario(
        "gpu_compute_2x",
        tuple((f"gpu_{c}", 0.5) for c in GPU_CLASSES),
        what="every non-communication kernel twice as fast",
    ),
    Scenario("memory_bound_2x", (("gpu_memory_bound", 0.5),), what="memory-bound kernels 2x"),
    Scenario("gemm_2x", (("gpu_gemm", 0.5),), what="GEMM/convolution/attention kernels 2x"),
)


@dataclass(frozen=True, slots=True)
class CriticalPaths:
    """Critical paths of every (rank, step).

    `steps`: rank, step, name, step_ns, path_ns, `<kind>_ns` for each of PATH_KINDS (adding
    up to path_ns), gpu_<class>_ns for GPU_CLASSES (adding up to gpu_compute_ns),
    cpu_launch_ns (part of cpu_ns), crosses_ranks (the path runs through another rank's
    work inside this rank's step).
    `what_if`: rank, step, scenario, saved_ns (path_ns before - after, recomputed).
    `path`: the path's edges inside each (rank, step) window: rank, step, seq, owner, role,
    work_kind, slack_kind, work_ns, slack_ns (ns charged to work_kind and slack_kind).
    """

    steps: pl.DataFrame
    what_if: pl.DataFrame
    path: pl.DataFrame = field(repr=False)


@dataclass(frozen=True, slots=True)
class CriticalPath:
    """The job's critical paths, per sampled (rank, step) of every rank (Metrics.critical_path;
    `CriticalPaths` without its edges).

    - `steps`: rank, step, name, step_ns, path_ns, `<kind>_ns` for each of PATH_KINDS
      (adding up to path_ns), gpu_<class>_ns for GPU_CLASSES (adding up to gpu_compute_ns),
      cpu_launch_ns (part of cpu_ns), crosses_ranks.
    - `what_if`: rank, step, scenario, saved_ns (path_ns before - after, recomputed).

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "steps": {
            "rank": pl.Int32,
            "step": pl.Int64,
            "name": pl.String,
            "step_ns": pl.Int64,
            "path_ns": pl.Int64,
            "gpu_compute_ns": pl.Int64,
            "comm_ns": pl.Int64,
            "copy_ns": pl.Int64,
            "cpu_ns": pl.Int64,
            "sync_wait_ns": pl.Int64,
            "idle_ns": pl.Int64,
            "gpu_gemm_ns": pl.Int64,
            "gpu_memory_bound_ns": pl.Int64,
            "gpu_copy_cast_ns": pl.Int64,
            "gpu_other_ns": pl.Int64,
            "cpu_launch_ns": pl.Int64,
            "crosses_ranks": pl.Boolean,
        },
        "what_if": {
            "rank": pl.Int32,
            "step": pl.Int64,
            "scenario": pl.String,
            "saved_ns": pl.Int64,
        },
    }

    steps: pl.DataFrame
    what_if: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.critical_path", self.SCHEMAS)

    @staticmethod
    def of(paths: CriticalPaths) -> CriticalPath:
        """The job's CriticalPath from its solved paths."""
        return CriticalPath(steps=paths.steps, what_if=paths.what_if)


#: Graphs are built for at most this many steps per rank, evenly spread over the window
#: (first and last included): a long trace repeats the same step, and the per-step graph,
#: path and what-ifs cost milliseconds each. The report says how many steps were analysed.
MAX_STEPS_PER_RANK = 24


def sample_steps(markers: pl.DataFrame, limit: int | None) -> pl.DataFrame:
    """At most `limit` steps per rank, evenly spaced by order of start (all when None)."""
    if limit is None or markers.height == 0:
        return markers
    n = pl.len().over("rank")
    i = pl.int_range(pl.len()).over("rank")
    # the positions round(j * (n-1) / (limit-1)) for j in 0..limit-1: keep i when it is one
    step_f = (n - 1) / max(limit - 1, 1)
    nearest = ((i / step_f).round() * step_f).round()
    keep = (n <= limit) | (nearest == i)
    return markers.sort("rank", "start_ns").filter(keep)


def critical_paths(
    timeline: Timeline,
    markers: pl.DataFrame,
    syncs: pl.DataFrame,
    *,
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    cross_stream_max_ns: int = CROSS_STREAM_MAX_NS,
    max_steps_per_rank: int | None = MAX_STEPS_PER_RANK,
    work: pl.DataFrame | None = None,
) -> CriticalPaths:
    """The critical path of every step of every rank, its composition and the what-ifs.

    `markers`: windows.step_markers(...).collect() (host step ranges per rank); `syncs`:
    idle.sync_calls(timeline).collect(). GPU work is read and classified from `timeline`
    (classify.kernel_class). A trace without step markers gives empty frames. `work`: the GPU
    work with its launches (windows.linked_work), where already computed.
    """
    return prepare(
        timeline,
        markers,
        syncs,
        scenarios=scenarios,
        cross_stream_max_ns=cross_stream_max_ns,
        max_steps_per_rank=max_steps_per_rank,
        work=work,
    ).solve()


@dataclass
class Prepared:
    """The graph tables of the sampled steps, ready for `solve` (see `prepare`)."""

    tables: GraphTables | None
    scenarios: tuple[Scenario, ...]

    def solve(self) -> CriticalPaths:
        """Every step's path and what-ifs: one pass over all steps' edges per weighting
        (the steps' graphs share no node, so each step's job source starts its own)."""
        tables = self.tables
        if tables is None:
            return _empty()
        arrays = longest_path.Edges.of(tables.edges)
        n = tables.node_count
        sources = tables.jobs["job"].to_numpy()
        order = longest_path.topological_edges(arrays.u, arrays.v, n)

        as_recorded = weighting(Scenario("as_recorded", ()))
        dist, pred = longest_path.longest(order, arrays, as_recorded, n, sources)
        wins = tables.windows.join(tables.jobs, on="step")
        wins = wins.with_columns(
            lo=pl.Series(dist[wins["source"].to_numpy()]),
            hi=pl.Series(dist[wins["sink"].to_numpy()]),
        ).filter(pl.col("hi") != _NEG)
        chains = [
            pl.DataFrame(
                {"e": longest_path.walk(pred, arrays.u, dist, w["sink"], w["job"], w["lo"])}
            ).with_columns(
                rank=pl.lit(w["rank"], pl.Int32),
                step=pl.lit(w["step"], pl.Int64),
                lo=pl.lit(w["lo"], pl.Int64),
                hi=pl.lit(w["hi"], pl.Int64),
            )
            for w in wins.iter_rows(named=True)
        ]
        path = _clip(pl.concat(chains), tables.edges, dist, arrays.u) if chains else _empty_path()
        del dist, pred  # one weighting's distances alive at a time (32 MB per 4e6 nodes)

        def distances(scenario: Scenario) -> I64 | None:
            """The what-if's distances; None where it weighs this graph as recorded."""
            weights = weighting(scenario)
            if longest_path.same_weights(arrays, weights, as_recorded):
                return None
            return longest_path.distances(order, arrays, weights, n, sources)

        saved = _saved(wins, self.scenarios, distances)
        return CriticalPaths(
            steps=_compose(tables, path),
            what_if=saved.sort("rank", "step", "scenario"),
            path=path,
        )


def prepare(
    timeline: Timeline,
    markers: pl.DataFrame,
    syncs: pl.DataFrame,
    *,
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    cross_stream_max_ns: int = CROSS_STREAM_MAX_NS,
    max_steps_per_rank: int | None = MAX_STEPS_PER_RANK,
    work: pl.DataFrame | None = None,
) -> Prepared:
    """The first half of `critical_paths`: the graph tables (polars; the part that needs the
    most memory, and none of it afterwards). `solve()` on the result is the second half,
    mostly single-threaded Python: the analyses run it on a thread beside the others."""
    found = inputs(timeline, markers, syncs, max_steps_per_rank=max_steps_per_rank, work=work)
    return prepared([found] if found else [], scenarios, cross_stream_max_ns)


def inputs(
    timeline: Timeline,
    markers: pl.DataFrame,
    syncs: pl.DataFrame,
    *,
    max_steps_per_rank: int | None = MAX_STEPS_PER_RANK,
    work: pl.DataFrame | None = None,
) -> GraphInputs | None:
    """The graph inputs of the sampled steps of the ranks of `timeline` (None without steps):
    what each rank of a job hands to `prepared`."""
    if markers.height == 0:
        return None
    return graph_inputs(timeline, sample_steps(markers, max_steps_per_rank), syncs, work)


def prepared(
    parts: list[GraphInputs],
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    cross_stream_max_ns: int = CROSS_STREAM_MAX_NS,
) -> Prepared:
    """The graph tables of every rank's sampled steps, from each rank's inputs (in order of
    rank), ready for `solve`."""
    if not parts:
        return Prepared(None, scenarios)
    # a step's graph has about five edges per GPU operation (op, stream, launch, two of
    # its thread's), four at the least
    longest_path.preload(4 * sum(p.ops.height for p in parts))
    tables = build_tables(GraphInputs.concat(parts), cross_stream_max_ns=cross_stream_max_ns)
    return Prepared(tables, scenarios)


#: The job stage builds and solves the graphs of about this many GPU operations at a time
#: (whole steps of every rank: the steps' graphs share no node), so that its memory stays
#: bounded however many ranks the job has.
CHUNK_OPS = 50_000


def solve_job(
    parts: list[GraphInputs],
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    cross_stream_max_ns: int = CROSS_STREAM_MAX_NS,
    chunk_ops: int = CHUNK_OPS,
) -> CriticalPaths:
    """The critical paths of a job from its ranks' graph inputs (in order of rank), its
    steps built and solved a chunk at a time. Each chunk's node ids keep the order the whole
    job's would give them (the same blocks, each in the same order), so the paths, ties
    included, are those of the whole graph."""
    if not parts:
        return _empty()
    inputs = GraphInputs.concat(parts)
    wins = input_windows(inputs)
    sizes = (
        inputs.markers.select("step")
        .unique()
        .join(inputs.ops.filter(~pl.col("pre")).group_by("step").len(), on="step", how="left")
        .with_columns(pl.col("len").fill_null(0))
        .sort("step")
    )
    chunks: list[list[int]] = [[]]
    held = 0
    for step, size in sizes.iter_rows():
        if chunks[-1] and held + size > chunk_ops:
            chunks.append([])
            held = 0
        chunks[-1].append(step)
        held += size
    solved = []
    for chunk in chunks:
        tables = build_tables(
            in_steps(inputs, pl.Series(chunk, dtype=pl.Int64)),
            cross_stream_max_ns=cross_stream_max_ns,
            windows=wins,
        )
        solved.append(Prepared(tables, scenarios).solve())
        del tables
    return CriticalPaths(
        steps=pl.concat([p.steps for p in solved]).sort("rank", "step"),
        what_if=pl.concat([p.what_if for p in solved]).sort("rank", "step", "scenario"),
        path=pl.concat([p.path for p in solved]),
    )


def weighting(scenario: Scenario) -> longest_path.Weighting:
    """The edge weighting of `scenario`: its factor for each edge kind (1 where it names
    none), and the roles it drops."""
    factors = dict(scenario.factors)
    return longest_path.Weighting(
        kind_factor=np.array([factors.get(k, 1.0) for k in EDGE_KINDS], np.float64),
        role_dropped=np.array([r in scenario.drop for r in ROLES], np.bool_),
    )


def _clip(chains: pl.DataFrame, edges: pl.DataFrame, dist: I64, u: I64) -> pl.DataFrame:
    """The path edges' time inside each window's [lo, hi] (path units), work part first then
    slack. `chains`: e (edge index), rank, step, lo, hi, in path order per (rank, step)."""
    e = chains["e"].to_numpy()
    picked = pl.concat(
        [
            chains,
            edges[e].select(
                "owner", "role", "work_kind", "slack_kind", "work_part_ns", "weight_ns"
            ),
        ],
        how="horizontal",
    ).with_columns(d_u=pl.Series(dist[u[e]], dtype=pl.Int64))
    lo, hi = pl.col("lo"), pl.col("hi")
    start = pl.col("d_u")
    work_end = start + pl.col("work_part_ns")
    end = start + pl.col("weight_ns")
    inside = (pl.min_horizontal(end, hi) - pl.max_horizontal(start, lo)).clip(lower_bound=0)
    work_in = (pl.min_horizontal(work_end, hi) - pl.max_horizontal(start, lo)).clip(lower_bound=0)
    return picked.select(
        "rank",
        "step",
        seq=pl.int_range(pl.len()).over("rank", "step").cast(pl.Int64),
        owner="owner",
        role="role",
        work_kind="work_kind",
        slack_kind="slack_kind",
        work_ns=pl.min_horizontal(work_in, inside).cast(pl.Int64),
        slack_ns=(inside - pl.min_horizontal(work_in, inside)).cast(pl.Int64),
    ).filter(
        (pl.col("work_ns") > 0) | (pl.col("slack_ns") > 0) | (pl.col("owner") == pl.col("rank"))
    )


def _saved(
    wins: pl.DataFrame,
    scenarios: tuple[Scenario, ...],
    distances: Callable[[Scenario], I64 | None],
) -> pl.DataFrame:
    """What each scenario saves per (rank, step): the path before minus the path after,
    recomputed with the scenario's weights (`distances`: every node's, of which only the
    windows' sources and sinks are kept; None: the graph's own, whose paths are the windows'
    `hi - lo`; never below 0)."""
    source = wins["source"].to_numpy()
    sink = wins["sink"].to_numpy()
    parts = []
    for scenario in scenarios:
        d2 = distances(scenario)
        if d2 is None:
            after = (wins["hi"] - wins["lo"]).to_numpy()
        else:
            after = np.where(d2[sink] != _NEG, d2[sink] - d2[source], 0)
        del d2
        parts.append(
            wins.select(
                "rank",
                "step",
                scenario=pl.lit(scenario.name),
                saved_ns=((pl.col("hi") - pl.col("lo")) - pl.Series(after)).clip(lower_bound=0),
            )
        )
    if not parts:
        return pl.DataFrame(schema=_WHAT_IF_SCHEMA)
    return pl.concat(parts).cast(_WHAT_IF_SCHEMA)  # type: ignore[arg-type]


def _compose(tables: GraphTables, path: pl.DataFrame) -> pl.DataFrame:
    """Sum the path's time by kind per (rank, step), joined to the step windows."""
    charged = pl.concat(
        [
            path.select("rank", "step", "owner", kind="work_kind", ns="work_ns"),
            path.select("rank", "step", "owner", kind="slack_kind", ns="slack_ns"),
        ]
    )  # the kinds stay an Enum: compared as codes, not as text (2 * 10^6 path edges)
    by_edge_kind = charged.group_by("rank", "step").agg(
        *[pl.col("ns").filter(pl.col("kind") == k).sum().alias(f"{k}_ns") for k in EDGE_KINDS],
        crosses_ranks=((pl.col("owner") != pl.col("rank")) & (pl.col("ns") > 0)).any(),
    )
    gpu = [f"gpu_{c}_ns" for c in GPU_CLASSES]
    kinds = {
        "gpu_compute_ns": pl.sum_horizontal(gpu),
        "comm_ns": pl.col("comm_ns"),
        "copy_ns": pl.col("copy_ns"),
        "cpu_ns": pl.col("cpu_ns") + pl.col("cpu_launch_ns"),
        "sync_wait_ns": pl.col("sync_wait_ns"),
        "idle_ns": pl.col("idle_ns"),
    }
    return (
        tables.windows.with_columns(step_ns=pl.col("end_ns") - pl.col("start_ns"))
        .join(by_edge_kind, on=["rank", "step"], how="left")
        .with_columns(pl.col(f"{k}_ns" for k in EDGE_KINDS).fill_null(0))
        .with_columns(pl.col("crosses_ranks").fill_null(False))
        .select(
            "rank",
            "step",
            "name",
            "step_ns",
            path_ns=pl.sum_horizontal(kinds.values()),
            **kinds,
            **{g: pl.col(g) for g in gpu},
            cpu_launch_ns=pl.col("cpu_launch_ns"),
            crosses_ranks="crosses_ranks",
        )
        .sort("rank", "step")
    )


def per_rank(steps: pl.DataFrame) -> pl.DataFrame:
    """The contract's `critical_path` rows: rank, steps, step_ns, path_ns and `<kind>_ns`
    summed over the rank's steps, and each kind's `<kind>_share` of path_ns."""
    return (
        steps.group_by("rank")
        .agg(
            steps=pl.len().cast(pl.Int64),
            step_ns=pl.col("step_ns").sum(),
            path_ns=pl.col("path_ns").sum(),
            **{f"{k}_ns": pl.col(f"{k}_ns").sum() for k in PATH_KINDS},
        )
        .with_columns(
            share(pl.col(f"{k}_ns"), pl.col("path_ns")).alias(f"{k}_share") for k in PATH_KINDS
        )
        .sort("rank")
    )


def bounding_share(saving_2x: int | None, kernel_per_step: int) -> float:
    """The share of a device's kernel time per step that bounds the step: the `gpu_compute_2x`
    what-if (every kernel twice as fast) saves half of the kernel time on the critical path,
    so twice its saving over the kernel time per step is that share (1 for a GPU-bound step,
    less where the host bounds it). 1 without a critical path. Every fix that removes kernel
    time (the causes' layout, recompute and fills; the launch shapes' fill) is priced with
    it: the what-ifs claim the time once, for all of them."""
    if saving_2x is None or not kernel_per_step:
        return 1.0
    return max(0.0, min(1.0, 2 * saving_2x / kernel_per_step))


def mean_savings(what_if: pl.DataFrame) -> dict[tuple[int, str], int]:
    """(rank, scenario) -> the mean time a what-if saves per sampled step of the rank
    (`CriticalPaths.what_if`), rounded to the ns: what the rules read as `Context.saving`
    and the impact models scale."""
    saved = what_if.group_by("rank", "scenario").agg(pl.col("saved_ns").mean())
    return {(r, s): round(v) for r, s, v in saved.iter_rows()}


def _empty_path() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "rank": pl.Int32,
            "step": pl.Int64,
            "seq": pl.Int64,
            "owner": pl.Int32,
            "role": pl.String,
            "work_kind": pl.String,
            "slack_kind": pl.String,
            "work_ns": pl.Int64,
            "slack_ns": pl.Int64,
        }
    )


def _empty() -> CriticalPaths:
    cols = {
        "rank": pl.Int32,
        "step": pl.Int64,
        "name": pl.String,
        "step_ns": pl.Int64,
        "path_ns": pl.Int64,
        **{f"{k}_ns": pl.Int64 for k in PATH_KINDS},
        **{f"gpu_{c}_ns": pl.Int64 for c in GPU_CLASSES},
        "cpu_launch_ns": pl.Int64,
        "crosses_ranks": pl.Boolean,
    }
    what_if = {"rank": pl.Int32, "step": pl.Int64, "scenario": pl.String, "saved_ns": pl.Int64}
    return CriticalPaths(
        steps=pl.DataFrame(schema=cols), what_if=pl.DataFrame(schema=what_if), path=_empty_path()
    )


def step_digraph(
    timeline: Timeline,
    critical: CriticalPath,
    rank: int,
    step: int,
    *,
    step_pattern: str | None = None,
) -> nx.DiGraph:
    """The graph of one analysed step (every rank's part of it) as a networkx.DiGraph, its
    longest path marked (see `notebook.Analysis.critical_path` for the attributes).

    Built again from the timeline, as the analysis built it: the markers of the steps whose
    paths were solved (`critical`: Metrics.critical_path, every rank), their windows over all
    of them (steps tile time), the graph of `step` alone, solved with the recorded weights.
    Where two edges join the same two nodes, the one of larger weight is kept (the longest
    path takes it)."""
    import networkx as nx

    from traceanalyzer.analyses.critical_path.critical_graph import in_steps
    from traceanalyzer.analyses.gpu import idle
    from traceanalyzer.analyses.timeline import windows

    pattern = step_pattern or windows.default_step_pattern(timeline.meta.format)
    solved = critical.steps.select("rank", "step")
    markers = (
        windows.step_markers(timeline, pattern)
        .collect()
        .join(solved, on=["rank", "step"], how="semi")
    )
    syncs = idle.sync_calls(timeline).collect()
    found = graph_inputs(timeline, markers, syncs)
    wins = input_windows(found)
    tables = build_tables(
        in_steps(found, pl.Series([step], dtype=pl.Int64)), windows=wins, with_nodes=True
    )
    arrays = longest_path.Edges.of(tables.edges)
    n = tables.node_count
    sources = tables.jobs["job"].to_numpy()
    order = longest_path.topological_edges(arrays.u, arrays.v, n)
    dist, pred = longest_path.longest(
        order, arrays, weighting(Scenario("as_recorded", ())), n, sources
    )
    win = tables.windows.filter((pl.col("rank") == rank) & (pl.col("step") == step))
    if win.height == 0:
        raise ValueError(f"step {step} of rank {rank} has no window in the graph")
    w = win.row(0, named=True)
    job = int(tables.jobs.filter(pl.col("step") == step)["job"][0])
    lo, hi = int(dist[w["source"]]), int(dist[w["sink"]])
    chain = longest_path.walk(pred, arrays.u, dist, w["sink"], job, lo).tolist()
    on_path = set(chain)
    edges = tables.edges.with_row_index("e").with_columns(
        on_path=pl.col("e").is_in(list(on_path)),
        role=pl.col("role").cast(pl.String),
        work_kind=pl.col("work_kind").cast(pl.String),
        slack_kind=pl.col("slack_kind").cast(pl.String),
    )
    g = nx.DiGraph(rank=rank, step=step, path_ns=hi - lo, source=w["source"], sink=w["sink"])
    nodes = tables.nodes
    assert nodes is not None
    for row in nodes.iter_rows(named=True):
        node = row.pop("node")
        t = dist[node]
        g.add_node(node, **row, t_ns=None if t == longest_path.NEG else int(t - lo))
    any_on = edges.group_by("u", "v").agg(pl.col("on_path").any().alias("_on"))
    keep = (
        edges.sort("weight_ns")
        .unique(["u", "v"], keep="last", maintain_order=True)
        .join(any_on, on=["u", "v"])
    )
    for row in keep.iter_rows(named=True):
        g.add_edge(
            row["u"],
            row["v"],
            role=row["role"],
            owner=row["owner"],
            work_kind=row["work_kind"],
            slack_kind=row["slack_kind"],
            weight_ns=int(row["weight_ns"]),
            binding=bool(row["binding"]),
            on_path=bool(row["_on"]),
        )
    # the path's nodes in order: the walk's edges, first to last
    path = [int(arrays.u[chain[0]])] if chain else [w["source"]]
    path += [int(arrays.v[e]) for e in chain]
    g.graph["path"] = path
    return g
