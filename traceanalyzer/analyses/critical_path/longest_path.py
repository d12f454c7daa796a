"""Longest paths in the critical-path graph: compiled loops over integer arrays.

Analyses stage, the solver under `critical_path`. The graph of every analysed step is one
edge list (`u` → `v`, integer node ids; the steps' graphs share no node), and the longest
path from each step's job source is a dynamic programme over the edges in topological
order: one pass per weighting (the trace's own, then each what-if; a what-if's pass keeps
the distances only, `distances`).

Two backends run the same loops. A graph of up to `COMPILED_FROM` edges (every sampled
step of a typical trace: 5 * 10^4 edges for a 200 MB one) runs them in plain Python over
lists (each pass over the edges in topological order, their fields read in turn; the
binding edges by one numpy sort), in tenths of a second. Above it they must not run in
Python: a step of 10^6 kernels has about 5 * 10^6 edges, and seven passes over them are
4 * 10^7 updates; numba compiles them once (cached on disk) and loading it costs about
0.5 s and 100 MB of memory, which a small graph does not need to pay.

Ties: of a node's incoming edges that reach its longest distance, a binding edge is its
predecessor, then the lowest edge index; the choice never depends on the topological order
found.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

#: Minus infinity of the distances (a node no source reaches).
NEG = -(1 << 62)

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
#: Category codes (an Enum column's physical values; any integer type).
Codes = npt.NDArray[np.integer[Any]]

#: Graphs of more edges than this run compiled (numba); the others in plain Python.
COMPILED_FROM = 150_000

_compiled: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()


class CycleError(ValueError):
    """The graph has a cycle: no longest path (a bug in the graph's construction)."""


def _kernels() -> dict[str, Callable[..., Any]]:
    """The compiled functions (numba imported and the cache loaded on first use)."""
    with _lock:
        if not _compiled:
            _compiled.update(_compile())
    return _compiled


def _compile() -> dict[str, Callable[..., Any]]:
    import numba

    def njit(function: Callable[..., Any]) -> Callable[..., Any]:
        try:  # compiled once per installation, into __pycache__ or the user's cache folder
            return numba.njit(cache=True, nogil=True)(function)
        except RuntimeError:  # no writable cache location: compile in each process
            return numba.njit(nogil=True)(function)

    @njit
    def topological_edges(u: I64, v: I64, n: int) -> I64:
        """The edges in an order where every edge comes after every edge into its source
        (Kahn's algorithm; within one source, by edge index). Empty result: a cycle."""
        m = u.shape[0]
        indeg = np.zeros(n, np.int64)
        first = np.zeros(n + 1, np.int64)
        for e in range(m):
            indeg[v[e]] += 1
            first[u[e] + 1] += 1
        for i in range(n):
            first[i + 1] += first[i]
        out = np.empty(m, np.int64)
        fill = first[:-1].copy()
        for e in range(m):
            out[fill[u[e]]] = e
            fill[u[e]] += 1
        queue = np.empty(n, np.int64)
        tail = 0
        for i in range(n):
            if indeg[i] == 0:
                queue[tail] = i
                tail += 1
        order = np.empty(m, np.int64)
        k = 0
        head = 0
        while head < tail:
            node = queue[head]
            head += 1
            for j in range(first[node], first[node + 1]):
                e = out[j]
                order[k] = e
                k += 1
                w = v[e]
                indeg[w] -= 1
                if indeg[w] == 0:
                    queue[tail] = w
                    tail += 1
        if tail < n:
            return np.empty(0, np.int64)
        return order

    @njit
    def longest(
        order: I64,
        u: I64,
        v: I64,
        work: I64,
        slack: I64,
        work_kind: I64,
        slack_kind: I64,
        role: I64,
        kind_factor: F64,
        role_dropped: npt.NDArray[np.bool_],
        binding: npt.NDArray[np.bool_],
        n: int,
        sources: I64,
    ) -> tuple[I64, I64]:
        """Longest distance of every node from `sources` (0 there), and its predecessor
        edge (-1: none). An edge weighs its work part scaled by its work kind's factor plus
        its slack part scaled by its slack kind's, each rounded half to even; edges of a
        dropped role are left out."""
        dist = np.full(n, NEG, np.int64)
        pred = np.full(n, -1, np.int64)
        for s in sources:
            dist[s] = 0
        for e in order:
            du = dist[u[e]]
            if du == NEG or role_dropped[role[e]]:
                continue
            we = np.int64(np.rint(work[e] * kind_factor[work_kind[e]])) + np.int64(
                np.rint(slack[e] * kind_factor[slack_kind[e]])
            )
            d = du + we
            x = v[e]
            dx = dist[x]
            if d > dx:
                dist[x] = d
                pred[x] = e
            elif d == dx:
                p = pred[x]
                if p < 0 or (binding[e] and not binding[p]) or (binding[e] == binding[p] and e < p):
                    pred[x] = e
        return dist, pred

    @njit
    def walk(pred: I64, u: I64, dist: I64, sink: int, stop: int, lo: int) -> I64:
        """The edges of the path into `sink`, first to last, back to `stop` or to the first
        node at distance `lo` or less."""
        chain = []
        node = sink
        while node != stop and pred[node] >= 0 and dist[node] > lo:
            e = pred[node]
            chain.append(e)
            node = u[e]
        res = np.empty(len(chain), np.int64)
        for i in range(len(chain)):
            res[i] = chain[len(chain) - 1 - i]
        return res

    @njit
    def binding_edges(v: I64, slack: I64, role: I64, u: I64, n: int) -> npt.NDArray[np.bool_]:
        """Of each node's incoming edges, the one with the least (slack, role, source),
        then the lowest index."""
        best = np.full(n, -1, np.int64)
        for e in range(v.shape[0]):
            b = best[v[e]]
            if b < 0 or (slack[e], role[e], u[e]) < (slack[b], role[b], u[b]):
                best[v[e]] = e
        out = np.zeros(v.shape[0], np.bool_)
        for b in best:
            if b >= 0:
                out[b] = True
        return out

    return {
        "topological_edges": topological_edges,
        "longest": longest,
        "walk": walk,
        "binding_edges": binding_edges,
    }


def _ints(a: npt.NDArray[Any]) -> I64:
    """A contiguous int64 array: `a` itself where it is one (polars' read-only views are
    passed as they are, not copied: at 10^6 kernels each edge column is 40 MB)."""
    return np.ascontiguousarray(a, np.int64)


def preload(edge_count: int) -> None:
    """Load the compiled functions on a thread of their own now, where a graph of about
    `edge_count` edges will run compiled: numba's import is Python (about 0.2 s), and the
    graph's tables, built meanwhile, are polars, which leaves the interpreter free."""
    if compiled(edge_count) and not _compiled:
        threading.Thread(target=_load_quietly, name="numba-load", daemon=True).start()


def _load_quietly() -> None:
    """`_kernels()`, its failure left to the solve's own call (which reports it where
    errors are handled): a thread's exception would print a traceback."""
    try:
        _kernels()
    except Exception:  # raised again, and handled, by the solve's own call
        return


def compiled(edge_count: int, force: bool | None = None) -> bool:
    """Whether a graph of `edge_count` edges runs compiled (`force`: the tests' choice)."""
    return edge_count > COMPILED_FROM if force is None else force


def topological_edges(u: I64, v: I64, n: int, *, force: bool | None = None) -> I64:
    """Edge indices in topological order of their sources (raises CycleError on a cycle)."""
    if compiled(u.shape[0], force):
        order: I64 = _kernels()["topological_edges"](_ints(u), _ints(v), n)
    else:
        order = _py_topological_edges(_ints(u), _ints(v), n)
    if order.shape[0] != u.shape[0]:
        raise CycleError("the critical-path graph has a cycle")
    return order


@dataclass(frozen=True, slots=True)
class Edges:
    """The edge columns the passes read (one array each, codes as int64): source and
    target node, work and slack part (ns), the kinds they are charged to, role, binding."""

    u: I64
    v: I64
    work: I64
    slack: I64
    work_kind: Codes
    slack_kind: Codes
    role: Codes
    binding: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, frame: pl.DataFrame) -> Edges:
        """From critical_edges.bind's table."""

        def codes(name: str) -> Codes:
            codes: Codes = np.ascontiguousarray(frame[name].to_physical().to_numpy())
            return codes

        return cls(
            u=_ints(frame["u"].to_numpy()),
            v=_ints(frame["v"].to_numpy()),
            work=_ints(frame["work_part_ns"].to_numpy()),
            slack=_ints(frame["slack_part_ns"].to_numpy()),
            work_kind=codes("work_kind"),
            slack_kind=codes("slack_kind"),
            role=codes("role"),
            binding=np.ascontiguousarray(frame["binding"].to_numpy(), np.bool_),
        )


@dataclass(frozen=True, slots=True)
class Weighting:
    """A weighting of the edges: a factor per edge kind (by code) and the roles left out."""

    kind_factor: F64
    role_dropped: npt.NDArray[np.bool_]


def longest(
    order: I64,
    edges: Edges,
    weighting: Weighting,
    n: int,
    sources: I64,
    *,
    force: bool | None = None,
) -> tuple[I64, I64]:
    """Longest distances from `sources` and predecessor edges (see the module docstring)."""
    if not compiled(edges.u.shape[0], force):
        return _py_longest(order, edges, weighting, n, sources)
    dist, pred = _kernels()["longest"](
        _ints(order),
        edges.u,
        edges.v,
        edges.work,
        edges.slack,
        edges.work_kind,
        edges.slack_kind,
        edges.role,
        np.ascontiguousarray(weighting.kind_factor, np.float64),
        np.ascontiguousarray(weighting.role_dropped, np.bool_),
        edges.binding,
        n,
        _ints(sources),
    )
    return dist, pred


def distances(
    order: I64,
    edges: Edges,
    weighting: Weighting,
    n: int,
    sources: I64,
    *,
    force: bool | None = None,
) -> I64:
    """`longest(...)[0]`: the distances alone (a distance does not depend on which of tied
    edges is a node's predecessor), for the what-ifs, which need no path."""
    if not compiled(edges.u.shape[0], force):
        return _py_distances(order, edges, weighting, n, sources)
    return longest(order, edges, weighting, n, sources, force=True)[0]


def walk(
    pred: I64, u: I64, dist: I64, sink: int, stop: int, lo: int, *, force: bool | None = None
) -> I64:
    """The path's edges into `sink`, in order (see `longest`)."""
    if not compiled(u.shape[0], force):
        return _py_walk(pred, u, dist, sink, stop, lo)
    chain: I64 = _kernels()["walk"](_ints(pred), _ints(u), _ints(dist), sink, stop, lo)
    return chain


def binding_edges(
    v: I64, slack: I64, role: I64, u: I64, n: int, *, force: bool | None = None
) -> npt.NDArray[np.bool_]:
    """Each node's binding incoming edge (see critical_edges.bind): a mask over the edges."""
    if not compiled(v.shape[0], force):
        return _py_binding_edges(_ints(v), _ints(slack), _ints(role), _ints(u))
    mask: npt.NDArray[np.bool_] = _kernels()["binding_edges"](
        _ints(v), _ints(slack), _ints(role), _ints(u), n
    )
    return mask


# --- the same in plain Python and numpy (graphs up to COMPILED_FROM edges)


def _py_topological_edges(u: I64, v: I64, n: int) -> I64:
    by_source = np.argsort(u, kind="stable")  # each node's outgoing edges, by edge index
    first: list[int] = np.searchsorted(u[by_source], np.arange(n + 1)).tolist()
    indeg_array = np.bincount(v, minlength=n)
    queue: list[int] = np.flatnonzero(indeg_array == 0).tolist()
    indeg: list[int] = indeg_array.tolist()
    out: list[int] = by_source.tolist()
    targets: list[int] = v.tolist()
    order: list[int] = []
    for node in queue:  # the queue grows while it is walked
        edges = out[first[node] : first[node + 1]]
        order.extend(edges)
        for e in edges:
            w = targets[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    if len(queue) < n:
        return np.empty(0, np.int64)
    return np.array(order, np.int64)


def _weights(edges: Edges, weighting: Weighting) -> I64:
    """Each edge's weight: its parts scaled by their kinds' factors, each rounded half to
    even (as the compiled loop does), whether or not its role is dropped."""
    factor = weighting.kind_factor
    weights: I64 = np.rint(edges.work * factor[edges.work_kind]).astype(np.int64) + np.rint(
        edges.slack * factor[edges.slack_kind]
    ).astype(np.int64)
    return weights


def same_weights(edges: Edges, a: Weighting, b: Weighting) -> bool:
    """Whether two weightings weigh every edge alike and leave out the same ones (then
    their distances are the same: a what-if that changes nothing on this graph needs no
    pass)."""
    dropped_a, dropped_b = a.role_dropped[edges.role], b.role_dropped[edges.role]
    if not np.array_equal(dropped_a, dropped_b):
        return False
    kept = ~dropped_a
    return bool(np.array_equal(_weights(edges, a)[kept], _weights(edges, b)[kept]))


def _py_ordered(
    order: I64, edges: Edges, weighting: Weighting
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The edges the weighting keeps, in `order`: their indices, sources, targets and
    weights, as lists (a loop over them reads each edge's fields in turn, not by index)."""
    weights = _weights(edges, weighting)
    kept = order[~weighting.role_dropped[edges.role][order]]
    return kept.tolist(), edges.u[kept].tolist(), edges.v[kept].tolist(), weights[kept].tolist()


def _py_longest(
    order: I64, edges: Edges, weighting: Weighting, n: int, sources: I64
) -> tuple[I64, I64]:
    es, us, vs, ws = _py_ordered(order, edges, weighting)
    binding: list[bool] = edges.binding.tolist()
    dist = [NEG] * n
    pred = [-1] * n
    for s in sources.tolist():
        dist[s] = 0
    for e, a, x, we in zip(es, us, vs, ws, strict=True):
        du = dist[a]
        if du == NEG:
            continue
        d = du + we
        dx = dist[x]
        if d > dx:
            dist[x] = d
            pred[x] = e
        elif d == dx:
            p = pred[x]
            if p < 0 or (binding[e] and not binding[p]) or (binding[e] == binding[p] and e < p):
                pred[x] = e
    return np.array(dist, np.int64), np.array(pred, np.int64)


def _py_distances(order: I64, edges: Edges, weighting: Weighting, n: int, sources: I64) -> I64:
    _, us, vs, ws = _py_ordered(order, edges, weighting)
    dist = [NEG] * n
    for s in sources.tolist():
        dist[s] = 0
    for a, x, we in zip(us, vs, ws, strict=True):
        du = dist[a]
        if du != NEG and du + we > dist[x]:
            dist[x] = du + we
    return np.array(dist, np.int64)


def _py_walk(pred: I64, u: I64, dist: I64, sink: int, stop: int, lo: int) -> I64:
    chain: list[int] = []
    node = sink
    while node != stop and pred[node] >= 0 and dist[node] > lo:
        e = int(pred[node])
        chain.append(e)
        node = int(u[e])
    return np.array(chain[::-1], np.int64)


def _py_binding_edges(v: I64, slack: I64, role: I64, u: I64) -> npt.NDArray[np.bool_]:
    # by target, then (slack, role, source); lexsort is stable: ties keep the lowest index
    by = np.lexsort((u, role, slack, v))
    target = v[by]
    first = np.ones(by.shape[0], np.bool_)
    first[1:] = target[1:] != target[:-1]
    out = np.zeros(by.shape[0], np.bool_)
    out[by[first]] = True
    return out
