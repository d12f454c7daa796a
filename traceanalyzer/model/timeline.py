"""Timeline: the event table every reader produces and every analysis reads."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import polars as pl

from traceanalyzer.model.meta import DataQuality, TraceMeta
from traceanalyzer.model.schema import EVENT_SCHEMA, GPU_KINDS, GPU_METRIC_SCHEMA, Kind


def no_gpu_metrics() -> pl.DataFrame:
    """The GPU-metrics table of a trace without GPU metrics: no rows, the full schema."""
    return pl.DataFrame(schema=GPU_METRIC_SCHEMA)


@dataclass(frozen=True, slots=True)
class Timeline:
    """Events (conforming to EVENT_SCHEMA) plus what is known about the trace, and the GPU
    metrics sampled beside them (GPU_METRIC_SCHEMA; empty where the trace has none)."""

    events: pl.DataFrame
    meta: TraceMeta
    gpu_metrics: pl.DataFrame = field(default_factory=no_gpu_metrics)

    def validate(self) -> Timeline:
        """Check the schema invariants; raise ValueError on a broken reader. Returns self."""
        if self.events.schema != EVENT_SCHEMA:
            raise ValueError(
                f"timeline schema mismatch: {dict(self.events.schema)} != {dict(EVENT_SCHEMA)}"
            )
        gpu = pl.col("kind").is_in([k.value for k in GPU_KINDS])
        bad = self.events.select(
            neg=(pl.col("end_ns") < pl.col("start_ns")).sum(),
            null_time=(pl.col("start_ns").is_null() | pl.col("end_ns").is_null()).sum(),
            null_kind=pl.col("kind").is_null().sum(),
            gpu_no_place=(gpu & (pl.col("device").is_null() | pl.col("stream").is_null())).sum(),
            null_rank=pl.col("rank").is_null().sum(),
        ).row(0, named=True)
        problems = {k: v for k, v in bad.items() if v}
        if self.gpu_metrics.schema != GPU_METRIC_SCHEMA:
            problems["gpu_metrics_schema"] = 1
        elif self.gpu_metrics.height:
            problems["gpu_metrics_bad_period"] = self.gpu_metrics.select(
                (pl.col("end_ns") <= pl.col("start_ns")).sum()
            ).item()
            problems = {k: v for k, v in problems.items() if v}
        if problems:
            raise ValueError(f"timeline invariants violated: {problems}")
        return self

    def gpu_work(self) -> pl.LazyFrame:
        """Kernels, memcpys and memsets, lazily."""
        return self.events.lazy().filter(pl.col("kind").is_in([k.value for k in GPU_KINDS]))

    def launches(self) -> pl.LazyFrame:
        """Host launch calls (runtime or driver) that carry a correlation id.

        Columns: rank, correlation, launch_name, launch_start_ns, launch_end_ns, pid, tid.
        One row per (rank, correlation): the earliest call, where a producer repeats one.
        """
        return (
            self.events.lazy()
            .filter(
                pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value])
                & pl.col("correlation").is_not_null()
            )
            .group_by("rank", "correlation")
            .agg(
                launch_name=pl.col("name").get(pl.col("start_ns").arg_min()),
                launch_start_ns=pl.col("start_ns").min(),
                launch_end_ns=pl.col("end_ns").get(pl.col("start_ns").arg_min()),
                pid=pl.col("pid").get(pl.col("start_ns").arg_min()),
                tid=pl.col("tid").get(pl.col("start_ns").arg_min()),
            )
        )

    def launch_links(self) -> pl.LazyFrame:
        """Each GPU operation with the host call that launched it (same rank and correlation).

        GPU work columns plus launch_name, launch_start_ns, launch_end_ns, launch_pid,
        launch_tid; the launch columns are null where no launch was recorded. One launch may
        own several GPU operations (a CUDA graph launch, a library call): flow events in the
        trace are not one-to-one, the correlation id is the link.
        """
        launches = self.launches().rename({"pid": "launch_pid", "tid": "launch_tid"})
        return self.gpu_work().join(launches, on=["rank", "correlation"], how="left")


def combine(parts: list[Timeline], path: str) -> Timeline:
    """Merge per-rank timelines of one job into one (ranks must already be set)."""
    if len(parts) == 1:
        return parts[0]
    events = pl.concat([p.events for p in parts], how="vertical")
    samples = pl.concat([p.gpu_metrics for p in parts], how="vertical")
    return Timeline(
        events=events, meta=combine_meta([p.meta for p in parts], path), gpu_metrics=samples
    )


def combine_meta(metas: list[TraceMeta], path: str) -> TraceMeta:
    """The meta of a job from its ranks' (in the order the ranks' files were read)."""
    if len(metas) == 1:
        return metas[0]
    dropped: Counter[str] = Counter()
    for m in metas:
        dropped.update(m.quality.dropped)
    quality = DataQuality(
        truncated_files=tuple(f for m in metas for f in m.quality.truncated_files),
        dropped=dict(dropped),
        notes=tuple(n for m in metas for n in m.quality.notes),
        dropped_gpu=sum(m.quality.dropped_gpu for m in metas),
        gpu_events=sum(m.quality.gpu_events for m in metas),
        dropped_gpu_example=next(
            (m.quality.dropped_gpu_example for m in metas if m.quality.dropped_gpu_example),
            None,
        ),
    )
    first = metas[0]
    return TraceMeta(
        path=path,
        format=first.format,
        producer=first.producer,
        producer_version=first.producer_version,
        ranks=tuple(r for m in metas for r in m.ranks),
        devices=tuple(d for m in metas for d in m.devices),
        page_faults=tuple(f for m in metas for f in m.page_faults),
        quality=quality,
    )
