"""The compiled longest-path solver against networkx's topological order and a plain loop:
random graphs, then the critical-path graphs of real traces (every weighting)."""

from __future__ import annotations

import random
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from tests.conftest import SAMPLES, corpus
from traceanalyzer.analyses import critical_path, idle, longest_path, windows
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


@pytest.mark.parametrize("seed", range(30))
def test_random_graphs_match_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    u, v = _random_dag(rng, n, rng.randint(1, 120))
    w = [rng.choice([0, 0, 1, 2, 5, 10, NEG]) for _ in u]  # many ties
    binding = [rng.random() < 0.3 for _ in u]
    sources = rng.sample(range(n), rng.randint(1, 3))
    ua, va = np.array(u, np.int64), np.array(v, np.int64)
    order = longest_path.topological_edges(ua, va, n)
    dist, pred = longest_path.longest(
        order, ua, va, np.array(w, np.int64), np.array(binding), n, np.array(sources, np.int64)
    )
    want_dist, want_pred = _reference(u, v, w, binding, n, sources)
    assert dist.tolist() == want_dist
    assert pred.tolist() == want_pred


def test_a_cycle_is_an_error() -> None:
    u = np.array([0, 1, 2], np.int64)
    v = np.array([1, 2, 0], np.int64)
    with pytest.raises(longest_path.CycleError):
        longest_path.topological_edges(u, v, 3)


def test_walk_returns_the_path_in_order() -> None:
    # 0 -> 1 -> 2 -> 3 with a shortcut 0 -> 3 that is shorter
    u = np.array([0, 1, 2, 0], np.int64)
    v = np.array([1, 2, 3, 3], np.int64)
    w = np.array([1, 1, 1, 2], np.int64)
    order = longest_path.topological_edges(u, v, 4)
    dist, pred = longest_path.longest(order, u, v, w, np.zeros(4, bool), 4, np.array([0]))
    assert longest_path.walk(pred, u, dist, 3, 0, 0).tolist() == [0, 1, 2]
    assert longest_path.walk(pred, u, dist, 3, 0, 1).tolist() == [1, 2]  # from distance 1 on


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


@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name)
def test_real_trace_graphs_match_the_reference(path: Path) -> None:
    """Every weighting (the trace's own and each what-if) of every step's graph at once."""
    timeline = read(path)
    markers = windows.step_markers(
        timeline, windows.default_step_pattern(timeline.meta.format)
    ).collect()
    tables = critical_path.prepare(timeline, markers, idle.sync_calls(timeline).collect()).tables
    assert tables is not None and tables.edges.height > 1000
    edges = tables.edges
    u, v = edges["u"].to_numpy(), edges["v"].to_numpy()
    binding = edges["binding"].to_numpy()
    sources = tables.jobs["job"].to_numpy()
    order = longest_path.topological_edges(u, v, tables.node_count)
    weightings = [edges["weight_ns"].to_numpy()] + [
        critical_path.scenario_weights(edges, s) for s in critical_path.SCENARIOS
    ]
    for weights in weightings:
        dist, pred = longest_path.longest(order, u, v, weights, binding, tables.node_count, sources)
        want_dist, want_pred = _reference(
            u.tolist(),
            v.tolist(),
            weights.tolist(),
            binding.tolist(),
            tables.node_count,
            sources.tolist(),
        )
        assert dist.tolist() == want_dist
        assert pred.tolist() == want_pred
