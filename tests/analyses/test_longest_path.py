"""The longest-path solver, both backends (compiled, plain Python), against networkx's
topological order and a plain loop: random graphs, then the critical-path graphs of real
traces (every weighting)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from tests.conftest import SAMPLES, corpus
from traceanalyzer.analyses.critical_path import critical_path, longest_path
from traceanalyzer.analyses.gpu import idle
from traceanalyzer.analyses.timeline import windows
from traceanalyzer.readers import read

NEG = longest_path.NEG


def _reference(
    u: list[int], v: list[int], w: list[int], binding: list[bool], n: int, sources: list[int]
) -> tuple[list[int], list[int]]:
    """Longest distances by networkx's topological order and a loop over each node's incoming
    edges; the predecessor: a binding edge among those reaching the distance, else the
    lowest edge index."""
    graph = nx.MultiDiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from((a, b, e) for e, (a, b) in enumerate(zip(u, v, strict=True)))
    into: dict[int, list[int]] = {x: [] for x in range(n)}
    for e, b in enumerate(v):
        into[b].append(e)
    dist = [NEG] * n
    pred = [-1] * n
    for s in sources:
        dist[s] = 0
    for node in nx.topological_sort(graph):
        reach = [(dist[u[e]] + w[e], e) for e in into[node] if dist[u[e]] != NEG and w[e] != NEG]
        if not reach:
            continue
        best = max(d for d, _ in reach)
        if node in sources and best < 0:
            continue  # a source stays at 0
        dist[node] = best
        tied = [e for d, e in reach if d == best]
        pred[node] = min(tied, key=lambda e: (not binding[e], e))
    return dist, pred


def _random_dag(rng: random.Random, n: int, m: int) -> tuple[list[int], list[int]]:
    order = list(range(n))
    rng.shuffle(order)  # node ids not in topological order
    pairs = []
    for _ in range(m):
        a, b = sorted(rng.sample(range(n), 2))
        pairs.append((order[a], order[b]))
        if rng.random() < 0.1:
            pairs.append((order[a], order[b]))  # parallel edges, as collectives make
    return [a for a, _ in pairs], [b for _, b in pairs]


def _weights(edges: longest_path.Edges, weighting: longest_path.Weighting) -> list[int]:
    """Each edge's weight, by a plain loop: parts scaled by their kinds' factors and rounded
    half to even (Python's round), NEG for a dropped role."""
    f = weighting.kind_factor.tolist()
    dropped = weighting.role_dropped.tolist()
    return [
        NEG if dropped[r] else round(w * f[wk]) + round(s * f[sk])
        for w, s, wk, sk, r in zip(
            edges.work.tolist(),
            edges.slack.tolist(),
            edges.work_kind.tolist(),
            edges.slack_kind.tolist(),
            edges.role.tolist(),
            strict=True,
        )
    ]


BACKENDS = pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])


def _check(
    edges: longest_path.Edges,
    weighting: longest_path.Weighting,
    n: int,
    sources: list[int],
    compiled: bool,
) -> None:
    order = longest_path.topological_edges(edges.u, edges.v, n, force=compiled)
    dist, pred = longest_path.longest(
        order, edges, weighting, n, np.array(sources, np.int64), force=compiled
    )
    want_dist, want_pred = _reference(
        edges.u.tolist(),
        edges.v.tolist(),
        _weights(edges, weighting),
        edges.binding.tolist(),
        n,
        sources,
    )
    assert dist.tolist() == want_dist
    assert pred.tolist() == want_pred
    alone = longest_path.distances(
        order, edges, weighting, n, np.array(sources, np.int64), force=compiled
    )
    assert alone.tolist() == want_dist  # the what-ifs' distances without predecessors


@BACKENDS
@pytest.mark.parametrize("seed", range(30))
def test_random_graphs_match_the_reference(seed: int, compiled: bool) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    u, v = _random_dag(rng, n, rng.randint(1, 120))
    m = len(u)

    def ints(values: list[int]) -> np.ndarray:
        return np.array(values, np.int64)

    edges = longest_path.Edges(
        u=ints(u),
        v=ints(v),
        work=ints([rng.choice([0, 1, 3, 5]) for _ in range(m)]),  # odd: halves round
        slack=ints([rng.choice([0, 0, 1, 2, 7]) for _ in range(m)]),
        work_kind=ints([rng.randrange(3) for _ in range(m)]),
        slack_kind=ints([rng.randrange(3) for _ in range(m)]),
        role=ints([rng.randrange(3) for _ in range(m)]),
        binding=np.array([rng.random() < 0.3 for _ in range(m)]),
    )
    weighting = longest_path.Weighting(
        kind_factor=np.array([rng.choice([0.0, 0.5, 1.0, 1.5]) for _ in range(3)]),
        role_dropped=np.array([rng.random() < 0.2 for _ in range(3)]),
    )
    _check(edges, weighting, n, rng.sample(range(n), rng.randint(1, 3)), compiled)
    binding = longest_path.binding_edges(
        edges.u, edges.work, edges.role, edges.v, n, force=compiled
    )  # any four columns: the least (2nd, 3rd, 4th) per node of the 1st, then the lowest index
    for x in range(n):
        into = [e for e in range(m) if u[e] == x]
        want = min(
            into, key=lambda e: (int(edges.work[e]), int(edges.role[e]), v[e], e), default=None
        )
        assert [e for e in into if binding[e]] == ([] if want is None else [want])


@BACKENDS
def test_a_cycle_is_an_error(compiled: bool) -> None:
    u = np.array([0, 1, 2], np.int64)
    v = np.array([1, 2, 0], np.int64)
    with pytest.raises(longest_path.CycleError):
        longest_path.topological_edges(u, v, 3, force=compiled)


@BACKENDS
def test_walk_returns_the_path_in_order(compiled: bool) -> None:
    # 0 -> 1 -> 2 -> 3 with a shortcut 0 -> 3 that is shorter
    edges = longest_path.Edges(
        u=np.array([0, 1, 2, 0], np.int64),
        v=np.array([1, 2, 3, 3], np.int64),
        work=np.array([1, 1, 1, 2], np.int64),
        slack=np.zeros(4, np.int64),
        work_kind=np.zeros(4, np.int64),
        slack_kind=np.zeros(4, np.int64),
        role=np.zeros(4, np.int64),
        binding=np.zeros(4, bool),
    )
    as_is = longest_path.Weighting(np.ones(1), np.zeros(1, bool))
    order = longest_path.topological_edges(edges.u, edges.v, 4, force=compiled)
    dist, pred = longest_path.longest(order, edges, as_is, 4, np.array([0]), force=compiled)
    walk = longest_path.walk(pred, edges.u, dist, 3, 0, 0, force=compiled)
    assert walk.tolist() == [0, 1, 2]
    assert longest_path.walk(pred, edges.u, dist, 3, 0, 1, force=compiled).tolist() == [1, 2]


def _real_traces() -> list[Path]:
    paths = [SAMPLES / "sampled_2rank", SAMPLES / "train_bf16_healthy.json.gz"]
    root = corpus()
    if root is not None:
        paths += [
            p
            for p in (root / "public/param/dlrm_8rank_v100", root / "h100/tiny_kernels.json.gz")
            if p.exists()
        ]
    return paths


@BACKENDS
@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name)
def test_real_trace_graphs_match_the_reference(path: Path, compiled: bool) -> None:
    """Every weighting (the trace's own and each what-if) of every step's graph at once."""
    timeline = read(path)
    markers = windows.step_markers(
        timeline, windows.default_step_pattern(timeline.meta.format)
    ).collect()
    tables = critical_path.prepare(timeline, markers, idle.sync_calls(timeline).collect()).tables
    assert tables is not None and tables.edges.height > 1000
    edges = longest_path.Edges.of(tables.edges)
    assert _weights(edges, critical_path.weighting(critical_path.Scenario("as is", ()))) == (
        tables.edges["weight_ns"].to_list()
    )
    for scenario in critical_path.SCENARIOS:
        _check(
            edges,
            critical_path.weighting(scenario),
            tables.node_count,
            tables.jobs["job"].to_list(),
            compiled,
        )


def test_preload_loads_on_a_thread_and_leaves_a_failure_to_the_solve(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A small graph loads nothing; a large one loads the compiled loops on a thread. A
    failure there prints nothing (a thread's exception would print a traceback) and the
    solve's own call raises it."""

    def broken() -> dict[str, object]:
        raise ValueError("no compiler")

    raised: list[object] = []
    monkeypatch.setattr(threading, "excepthook", raised.append)  # where a thread's error goes
    monkeypatch.setattr(longest_path, "_compiled", {})
    monkeypatch.setattr(longest_path, "_compile", broken)
    before = set(threading.enumerate())
    longest_path.preload(longest_path.COMPILED_FROM)  # runs in Python: nothing to load
    assert set(threading.enumerate()) == before
    longest_path.preload(longest_path.COMPILED_FROM + 1)
    for thread in set(threading.enumerate()) - before:
        assert thread.name == "numba-load"
        thread.join(timeout=30)
    assert raised == [] and capfd.readouterr().err == ""
    with pytest.raises(ValueError, match="no compiler"):
        longest_path._kernels()


def test_same_weights_means_every_edge_weighs_the_same() -> None:
    """A what-if is skipped only where it weighs every edge of the graph as recorded and
    leaves out the same edges: kinds and roles the graph does not have change nothing."""
    edges = longest_path.Edges(
        u=np.array([0, 1, 2], np.int64),
        v=np.array([1, 2, 3], np.int64),
        work=np.array([3, 0, 5], np.int64),
        slack=np.array([0, 2, 0], np.int64),
        work_kind=np.array([0, 0, 1], np.int64),  # kinds 0 and 1 carry work, 2 slack only
        slack_kind=np.array([2, 2, 2], np.int64),
        role=np.array([0, 1, 1], np.int64),  # role 2: no edge
        binding=np.zeros(3, bool),
    )

    def weighting(factors: list[float], dropped: list[bool]) -> longest_path.Weighting:
        return longest_path.Weighting(np.array(factors), np.array(dropped))

    base = weighting([1.0, 1.0, 1.0, 1.0], [False, False, False])
    same = longest_path.same_weights
    assert same(edges, base, base)
    assert same(edges, base, weighting([1.0, 1.0, 1.0, 0.0], [False, False, True]))  # absent
    assert not same(edges, base, weighting([0.5, 1.0, 1.0, 1.0], [False, False, False]))
    assert not same(edges, base, weighting([1.0, 1.0, 0.0, 1.0], [False, False, False]))
    assert not same(edges, base, weighting([1.0, 1.0, 1.0, 1.0], [False, True, False]))
    # 0.5 of an odd part rounds half to even: 5 * 0.5 -> 2, not the same weight
    assert not same(edges, base, weighting([1.0, 0.5, 1.0, 1.0], [False, False, False]))
    # a factor on a kind whose parts are all 0 changes no weight
    zero_work = longest_path.Edges(**{**_fields(edges), "work": np.zeros(3, np.int64)})
    assert same(zero_work, base, weighting([0.0, 0.0, 1.0, 1.0], [False, False, False]))


def _fields(edges: longest_path.Edges) -> dict[str, np.ndarray]:
    return {name: getattr(edges, name) for name in longest_path.Edges.__slots__}
