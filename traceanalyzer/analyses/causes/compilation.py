"""Compiled graphs per step: recompiles and graph breaks, from the compiled regions' ids.

torch.compile's runs are recorded as `Torch-Compiled Region: <frame>/<compile>` (torch >=
2.3): Dynamo's frame id and that frame's compile id. A compile id first seen inside a steady
step is a graph compiled there (a recompilation, when its frame ran before); several frames
run in one step are graph breaks (each break resumes in a frame of its own,
`<resume in f>`), with eager operators between them.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.timeline.intervals import in_ranges
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
}


def compiled_regions(timeline: Timeline, markers: pl.LazyFrame) -> pl.DataFrame:
    """Per rank with a compiled region in a steady step (REGIONS_SCHEMA): its steady `steps`,
    the regions run in them (`runs`), the distinct frames (`frames`) and graphs (`graphs`,
    frame/compile ids) run there, the graphs first run inside a steady step that are not
    their frame's first (`new_graphs`: recompiled in the loop) and the steps holding one
    (`steps_with_new`), and the last graph's id (`last_graph`, e.g. `0/9`).
    `markers`: the steady steps (rank, step, start_ns, end_ns)."""
    name = pl.col("name").cast(pl.String)
    runs = (
        timeline.events.lazy()
        .filter(pl.col("kind").is_in([Kind.CPU_OP.value, Kind.ANNOTATION.value]))
        .select("rank", "start_ns", name=name)
        .filter(pl.col("name").str.contains(sig.COMPILED_REGION))
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
    inside = in_ranges(runs, steps, "rank")
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
        )
        .join(n_steps, on="rank", how="left")
        .select(list(REGIONS_SCHEMA))
        .sort("rank")
    )
    return per_rank.collect().cast(REGIONS_SCHEMA)  # type: ignore[arg-type]
