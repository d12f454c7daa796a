"""Compiled graphs per step: recompiles and graph breaks, from the compiled regions' ids.

torch.compile's runs are recorded as `Torch-Compiled Region: <frame>/<compile>` (torch >=
2.3): Dynamo's frame id and that frame's compile id. A compile id first seen inside a steady
step is a graph compiled there (a recompilation, when its frame ran before); several frames
run in one step are graph breaks (each break resumes in a frame of its own,
`<resume in f>`), with eager operators between them. A `TorchDynamo Cache Lookup` in steps
that run no compiled region is a frame falling back to eager (its guards fail, and it
compiles no more: the recompile limit).

**Graph-break glue.** Each compiled region's run costs host time outside its compiled graphs:
Dynamo's guards, AOTAutograd's wrappers, the resume frames' set-up and any eager code
between graphs. `region_glue` is that time: the regions' runs (forward and backward) less
the compiled graphs' own calls. Without the breaks, the regions that are not nested in
another (`top_runs`) would run alone: the share of the glue the breaks add is
`(runs - top_runs) / runs` (impact.py).
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.causes.nesting import KEYS, outermost
from traceanalyzer.analyses.timeline.intervals import in_ranges, minus
from traceanalyzer.model import Kind, Timeline

#: Per rank (`Causes.regions`).
REGIONS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "steps": pl.Int64(),
    "runs": pl.Int64(),
    "frames": pl.Int64(),
    "graphs": pl.Int64(),
    "new_graphs": pl.Int64(),
    "steps_with_new": pl.Int64(),
    "last_graph": pl.String(),
    "top_runs": pl.Int64(),
    "lookups": pl.Int64(),
    "graph_runs": pl.String(),
}


def compiled_regions(timeline: Timeline, markers: pl.LazyFrame) -> pl.DataFrame:
    """Per rank with a compiled region in a steady step (REGIONS_SCHEMA): its steady `steps`,
    the regions run in them (`runs`), the distinct frames (`frames`) and graphs (`graphs`,
    frame/compile ids) run there, the graphs first run inside a steady step that are not
    their frame's first (`new_graphs`: recompiled in the loop) and the steps holding one
    (`steps_with_new`), and the last graph's id (`last_graph`, e.g. `0/9`).
    `markers`: the steady steps (rank, step, start_ns, end_ns)."""
    name = pl.col("name").cast(pl.String)
    host = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in([Kind.CPU_OP.value, Kind.ANNOTATION.value]))
        .select(*KEYS, "start_ns", "end_ns", name=name)
    )
    runs = (
        host.filter(pl.col("name").str.contains(sig.COMPILED_REGION))
        .with_columns(
            frame=pl.col("name").str.extract(sig.COMPILED_REGION, 1).cast(pl.Int64),
            compile=pl.col("name").str.extract(sig.COMPILED_REGION, 2).cast(pl.Int64),
        )
        .with_columns(
            first=pl.col("start_ns").min().over("rank", "frame", "compile"),
            frame_first=pl.col("start_ns").min().over("rank", "frame"),
        )
    )
    steps = markers.select("rank", "step", "start_ns", "end_ns")
    # a run nested in another region's run (a resumed frame inside its caller's) is not top
    runs = outermost(runs, "top")
    inside = in_ranges(runs, steps, "rank")
    lookups = (
        in_ranges(host.filter(pl.col("name").str.contains(sig.CACHE_LOOKUP)), steps, "rank")
        .group_by("rank")
        .agg(lookups=pl.len().cast(pl.Int64))
    )
    n_steps = steps.group_by("rank").agg(steps=pl.len().cast(pl.Int64))
    # a graph first run here that is not its frame's first (a compile id above 0, or the frame
    # ran before with another graph): recompiled. A frame's first graph (0/0) first seen here
    # may have been compiled before the trace began
    new = (pl.col("first") == pl.col("start_ns")) & (
        (pl.col("compile") > 0) | (pl.col("frame_first") < pl.col("first"))
    )
    graph = pl.format("{}/{}", "frame", "compile")
    per_rank = (
        inside.group_by("rank")
        .agg(
            runs=pl.len().cast(pl.Int64),
            frames=pl.col("frame").n_unique().cast(pl.Int64),
            graphs=graph.n_unique().cast(pl.Int64),
            new_graphs=graph.filter(new).n_unique().cast(pl.Int64),
            steps_with_new=pl.col("step").filter(new).n_unique().cast(pl.Int64),
            last_graph=graph.sort_by("frame", "compile").last(),
            top_runs=pl.col("top").sum().cast(pl.Int64),
        )
        .join(_graph_runs(inside), on="rank", how="left")
        .join(lookups, on="rank", how="full", coalesce=True)
        .join(n_steps, on="rank", how="left")
        .with_columns(
            pl.col(
                "runs", "frames", "graphs", "new_graphs", "steps_with_new", "top_runs", "lookups"
            ).fill_null(0)
        )
        .select(list(REGIONS_SCHEMA))
        .sort("rank")
    )
    return per_rank.collect().cast(REGIONS_SCHEMA)  # type: ignore[arg-type]


def _graph_runs(inside: pl.LazyFrame) -> pl.LazyFrame:
    """rank, graph_runs: the graphs run in the steady steps and how often, by graph id
    (`0/0 x4, 2/0 x16`)."""
    graph = pl.format("{}/{}", "frame", "compile")
    return (
        inside.group_by("rank", "frame", "compile")
        .agg(n=pl.len())
        .sort("rank", "frame", "compile")
        .group_by("rank", maintain_order=True)
        .agg(graph_runs=pl.format("{} x{}", graph, "n").str.join(", "))
    )


def region_glue(ranges: pl.LazyFrame) -> pl.LazyFrame:
    """rank, name, start_ns, end_ns, syncs: the host time inside compiled regions' runs and
    outside their compiled graphs' calls (the module docstring), anywhere in the trace.
    `ranges`: the host ranges (rank, pid, tid, name as text, start_ns, end_ns)."""
    regions = ranges.filter(pl.col("name").str.contains(sig.REGION_RUN))
    graphs = ranges.filter(pl.col("name").str.contains(sig.GRAPH_CALL))
    return minus(regions, graphs, KEYS).select(
        "rank",
        name=pl.lit("compiled regions outside their graphs"),
        start_ns="start_ns",
        end_ns="end_ns",
        syncs=pl.lit(False),
    )
