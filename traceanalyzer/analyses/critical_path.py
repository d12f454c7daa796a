"""Critical path of each step: what bounds step time, and what a fix would save.

Analyses stage. `critical_graph.build_tables` builds the dependency graph of every step as
polars tables; this module hands each step's graph to networkx (for its topological order),
runs the longest path from the step's job source to each rank's sink, charges the time of
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

import gc
import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.analyses.critical_edges import EDGE_KINDS
from traceanalyzer.analyses.critical_graph import (
    CROSS_STREAM_MAX_NS,
    GraphTables,
    build_tables,
)
from traceanalyzer.analyses.devices import share
from traceanalyzer.model import Timeline

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

_NEG = -(1 << 62)

if TYPE_CHECKING:
    import networkx as nx


def _nx() -> Any:
    """networkx, imported on first use (0.13 s): `preload` starts it early, on a thread."""
    return importlib.import_module("networkx")


_preloading: list[threading.Thread] = []


def preload() -> None:
    """Start importing networkx on a thread, once: called before a trace is read, its import
    overlaps the read (whose threads leave the interpreter mostly free) instead of adding
    to the time after it."""
    if not _preloading:
        _preloading.append(threading.Thread(target=_nx, name="import-networkx", daemon=True))
        _preloading[0].start()


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
        """Each step's path and what-ifs (networkx and Python, one step at a time)."""
        tables = self.tables
        if tables is None:
            return _empty()
        weights = {s.name: scenario_weights(s) for s in self.scenarios}
        edges = tables.edges.with_columns(**weights) if weights else tables.edges
        names = [s.name for s in self.scenarios]
        path_parts: list[pl.DataFrame] = []
        saved_parts: list[pl.DataFrame] = []
        with _gc_paused():
            steps = edges.partition_by("step", as_dict=True, maintain_order=True)
            for (step,), es in steps.items():
                wins = tables.windows.filter(pl.col("step") == step)
                job = int(tables.jobs.filter(pl.col("step") == step)["job"].item())
                path, saved = _step_paths(es, wins, job, names)
                path_parts.append(path)
                saved_parts.append(saved)
        path = pl.concat(path_parts)
        return CriticalPaths(
            steps=_compose(tables, path),
            what_if=pl.concat(saved_parts).sort("rank", "step", "scenario"),
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
    if markers.height == 0:
        return Prepared(None, scenarios)
    markers = sample_steps(markers, max_steps_per_rank)
    tables = build_tables(
        timeline, markers, syncs, cross_stream_max_ns=cross_stream_max_ns, work=work
    )
    return Prepared(tables, scenarios)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: the graphs and lists of a step are many small
    objects, freed by reference counting, and the collector's passes over them took about
    a third of the critical path's time (263 collections in one analysis of a 200 MB trace)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def scenario_weights(scenario: Scenario) -> pl.Expr:
    """The edge weights under `scenario`: work and slack parts scaled by their kinds' factors;
    edges of a dropped role weigh nothing (they are left out of the longest path)."""
    factors = dict(scenario.factors)
    work = _scaled(pl.col("work_part_ns"), pl.col("work_kind"), factors)
    slack = _scaled(pl.col("slack_part_ns"), pl.col("slack_kind"), factors)
    dropped = pl.col("role").cast(pl.String).is_in(list(scenario.drop))
    return pl.when(dropped).then(pl.lit(_NEG)).otherwise(work + slack).cast(pl.Int64)


def _scaled(ns: pl.Expr, kind: pl.Expr, factors: dict[str, float]) -> pl.Expr:
    factor = kind.cast(pl.String).replace_strict(factors, default=1.0, return_dtype=pl.Float64)
    return (ns * factor).round().cast(pl.Int64)


def step_graph(edges: pl.DataFrame, weight: str = "weight_ns") -> nx.DiGraph:
    """One step's graph in networkx: edges u → v with attribute `weight` (ns)."""
    graph = _nx().DiGraph()
    graph.add_weighted_edges_from(edges.select("u", "v", weight).iter_rows(), weight="weight")
    return graph


def _step_paths(
    es: pl.DataFrame, wins: pl.DataFrame, job: int, scenarios: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The path of each rank of one step, and each scenario's saving."""
    graph = step_graph(es)
    nodes: list[int] = list(_nx().topological_sort(graph))
    graph.clear()  # a graph's views refer back to it: free its many dicts now, not in a GC pass
    positions = list(range(len(nodes)))
    # one plan, one collect: a step's small eager frame operations cost more in overhead
    # than in work
    local = (
        es.lazy()
        .with_row_index("e")
        .with_columns(
            pu=pl.col("u").replace_strict(nodes, positions, return_dtype=pl.Int64),
            pv=pl.col("v").replace_strict(nodes, positions, return_dtype=pl.Int64),
        )
        .sort("pu", "e")
        .collect()
    )
    n = len(nodes)
    lookup = dict(zip(nodes, positions, strict=True))
    start = lookup[job]
    us: list[int] = local["pu"].to_list()
    vs: list[int] = local["pv"].to_list()
    binding: list[bool] = local["binding"].to_list()
    dist, pred = _longest(us, vs, local["weight_ns"].to_list(), binding, n, start)
    ranks = wins.rows(named=True)
    recomputed = {
        name: _longest(us, vs, local[name].to_list(), binding, n, start)[0] for name in scenarios
    }
    saved_rows: list[tuple[int, int, str, int]] = []
    parts: list[pl.DataFrame] = []
    for w in ranks:
        src, snk = lookup.get(w["source"]), lookup.get(w["sink"])
        if src is None or snk is None or dist[snk] == _NEG:
            continue
        lo, hi = dist[src], dist[snk]
        chain: list[int] = []
        node = snk
        while node != start and pred[node] >= 0 and dist[node] > lo:
            chain.append(pred[node])
            node = us[pred[node]]
        chain.reverse()
        picked = local[chain].with_columns(
            d_u=pl.Series([dist[us[e]] for e in chain], dtype=pl.Int64)
        )
        parts.append(_clip(picked, w["rank"], w["step"], lo, hi))
        for name, d2 in recomputed.items():
            after = d2[snk] - d2[src] if d2[snk] != _NEG else 0
            saved_rows.append((w["rank"], w["step"], name, max(0, (hi - lo) - after)))
    saved = pl.DataFrame(
        saved_rows,
        schema={"rank": pl.Int32, "step": pl.Int64, "scenario": pl.String, "saved_ns": pl.Int64},
        orient="row",
    )
    return (pl.concat(parts) if parts else _empty_path()), saved


def _longest(
    us: list[int], vs: list[int], ws: list[int], binding: list[bool], n: int, start: int
) -> tuple[list[int], list[int]]:
    """Longest distances from `start` over edges sorted by their source's topological
    position, and each node's best incoming edge (a binding edge wins a tie)."""
    dist = [_NEG] * n
    pred = [-1] * n
    dist[start] = 0
    for e, u in enumerate(us):
        du = dist[u]
        w = ws[e]
        if du == _NEG or w == _NEG:
            continue
        d = du + w
        v = vs[e]
        dv = dist[v]
        if d > dv or (d == dv and binding[e]):
            dist[v] = d
            pred[v] = e
    return dist, pred


def _clip(picked: pl.DataFrame, rank: int, step: int, lo: int, hi: int) -> pl.DataFrame:
    """The path edges' time inside [lo, hi] (path units), work part first then slack."""
    start = pl.col("d_u")
    work_end = start + pl.col("work_part_ns")
    end = start + pl.col("weight_ns")
    inside = (pl.min_horizontal(end, hi) - pl.max_horizontal(start, lo)).clip(lower_bound=0)
    work_in = (pl.min_horizontal(work_end, hi) - pl.max_horizontal(start, lo)).clip(lower_bound=0)
    return (
        picked.with_row_index("seq")
        .select(
            rank=pl.lit(rank, pl.Int32),
            step=pl.lit(step, pl.Int64),
            seq=pl.col("seq").cast(pl.Int64),
            owner="owner",
            role="role",
            work_kind="work_kind",
            slack_kind="slack_kind",
            work_ns=pl.min_horizontal(work_in, inside).cast(pl.Int64),
            slack_ns=(inside - pl.min_horizontal(work_in, inside)).cast(pl.Int64),
        )
        .filter((pl.col("work_ns") > 0) | (pl.col("slack_ns") > 0) | (pl.col("owner") == rank))
    )


def _compose(tables: GraphTables, path: pl.DataFrame) -> pl.DataFrame:
    """Sum the path's time by kind per (rank, step), joined to the step windows."""
    charged = pl.concat(
        [
            path.select("rank", "step", "owner", kind="work_kind", ns="work_ns"),
            path.select("rank", "step", "owner", kind="slack_kind", ns="slack_ns"),
        ]
    ).with_columns(pl.col("kind").cast(pl.String))
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
