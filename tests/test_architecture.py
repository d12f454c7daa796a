"""The pipeline's direction, enforced (issue 31): readers -> analyses -> rules -> report ->
render -> api -> commands. Every import of every module (at the top, inside functions, and
under TYPE_CHECKING alike) is read from the source; a module may import only modules of
its own layer or a lower one, and no import cycle may exist, so the next cycle fails CI
rather than a review."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

from tests.conftest import REPO

PACKAGE = REPO / "traceanalyzer"

#: Each top-level module or sub-package of traceanalyzer and its layer: an import may go to
#: the same layer or a lower one.
LAYERS: dict[str, int] = {
    "version": 0,
    "errors": 0,
    "timings": 0,
    "termination": 0,
    "config": 0,
    "parallel": 0,
    "model": 1,
    "readers": 2,
    "analyses": 3,
    "ranks": 4,
    "rules": 5,
    "report": 6,
    "spans": 6,
    "render": 7,
    "api": 8,
    "docgen": 9,
    "comparison": 9,
    "annotate": 9,
    "batch": 9,
    "notebook": 10,
    "cli": 11,
    "entry": 12,
    "__main__": 13,
    "": 14,  # the package's __init__: the notebook API at the top
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The traceanalyzer modules `path` imports (a `from pkg import mod` names the module
    where one exists, else the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] != "traceanalyzer":
                continue
            for alias in node.names:
                full = f"{module}.{alias.name}"
                found.add(full if full in known else module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "traceanalyzer"}
    return found - {name}


def _graph() -> nx.DiGraph:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(paths)
    for name, path in paths.items():
        graph.add_edges_from((name, target) for target in _imports(path, name, set(paths)))
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else ""]


def test_every_module_has_a_layer() -> None:
    for module in _graph():
        _layer(module)  # a KeyError names a module LAYERS does not place


def test_imports_follow_the_pipeline() -> None:
    against = [f"{a} -> {b}" for a, b in _graph().edges if _layer(b) > _layer(a)]
    assert not against, "imports against the pipeline's direction:\n" + "\n".join(against)


def _cycles(graph: nx.DiGraph) -> list[list[str]]:
    """The import cycles of `graph` (each strongly connected set of two modules or more; a
    package's `__init__` counts as a module like any other)."""
    return [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles: {cycles}"


def test_the_check_sees_a_cycle(tmp_path: Path) -> None:
    """The walker finds imports inside functions and under TYPE_CHECKING."""
    src = tmp_path / "traceanalyzer" / "analyses" / "x.py"
    src.parent.mkdir(parents=True)
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from traceanalyzer.rules.base import Finding\n"
        "def f():\n    from traceanalyzer import api\n"
    )
    known = {"traceanalyzer.rules.base", "traceanalyzer.api"}
    assert _imports(src, "traceanalyzer.analyses.x", known) == known


def test_a_cycle_is_found() -> None:
    """`_cycles` finds two modules that import each other, and one through a package's
    `__init__` (the package imports a module that imports a name from the package)."""
    graph = nx.DiGraph(
        [
            ("traceanalyzer.a", "traceanalyzer.b"),
            ("traceanalyzer.b", "traceanalyzer.a"),
            ("traceanalyzer.pkg", "traceanalyzer.pkg.m"),
            ("traceanalyzer.pkg.m", "traceanalyzer.pkg"),
            ("traceanalyzer.c", "traceanalyzer.a"),
        ]
    )
    assert sorted(_cycles(graph)) == [
        ["traceanalyzer.a", "traceanalyzer.b"],
        ["traceanalyzer.pkg", "traceanalyzer.pkg.m"],
    ]


def _imports_polars(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "polars" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "polars":
            return True
    return False


def test_rules_measure_nothing() -> None:
    """Rules read the analyses' typed results (the impact models included) and decide: no
    module of `rules/` computes on frames, so none imports polars."""
    rules = sorted((PACKAGE / "rules").glob("*.py"))
    assert len(rules) > 13
    assert [p.name for p in rules if _imports_polars(p)] == []
    assert _imports_polars(PACKAGE / "analyses" / "gpu" / "fusion.py")  # the check sees an import


#: The rooms of `analyses/` (its sub-packages) in the pipeline's order: a room may import
#: only rooms of a lower rank (two rooms of one rank are independent). The record handed to
#: the rules (`analyses/metrics.py`, `context.py`, `facts.py`) and the package's `__init__`
#: sit at the top of `analyses/`, outside the rooms.
ROOMS: dict[str, int] = {
    "timeline": 0,
    "gpu": 1,
    "host": 1,
    "critical_path": 2,
    # the causes and the counters price the kernel time they remove with the critical
    # path's what-ifs (critical_path.bounding_share): one claim of time for both
    "causes": 3,
    "counters": 3,
    "distributed": 4,
}
ANALYSES_TOP = {"__init__.py", "context.py", "metrics.py", "facts.py"}


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["traceanalyzer", "analyses"] and len(parts) > 2 and parts[2] in ROOMS:
        return parts[2]
    return None


def test_analyses_is_rooms() -> None:
    """`analyses/` holds the record handed to the rules and one sub-package per room, each
    with an `__init__` whose docstring names its public results."""
    top = PACKAGE / "analyses"
    assert {p.name for p in top.glob("*.py")} == ANALYSES_TOP
    rooms = {p.parent.name for p in top.glob("*/__init__.py")}
    assert rooms == set(ROOMS)
    assert not list(top.glob("*/*/*.py"))  # one level of rooms
    for room in rooms:
        init = top / room / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} names no results"


def test_rooms_follow_the_pipeline() -> None:
    """Between the rooms of `analyses/`, imports go down the pipeline only (no room imports
    one of its rank or a higher one), so no cycle can run through rooms."""
    against = []
    for a, b in _graph().edges:
        ra, rb = _room(a), _room(b)
        if ra and rb and ra != rb and ROOMS[rb] >= ROOMS[ra]:
            against.append(f"{a} -> {b}")
    assert not against, "imports against the rooms' order:\n" + "\n".join(against)


def test_room_inits_import_nothing() -> None:
    """A room's `__init__` is its table of contents: it imports no module, so importing one
    module of a room loads no other and no cycle can pass through an `__init__`."""
    for room in ROOMS:
        init = PACKAGE / "analyses" / room / "__init__.py"
        name = f"traceanalyzer.analyses.{room}"
        assert _imports(init, name, set(_graph())) == set(), init
