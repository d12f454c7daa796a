"""Report: everything the renderers show, built once from the timeline's meta and the metrics.

JSON format versions (`FORMAT_VERSION`):
- 1: format_version, source, window, devices (rank, device, window_ns, busy_ns, idle_ns,
  idle_share, kernel_count, kernel_ns), steps, kernels (count, total_ns, duration_histogram,
  top), critical_path (empty until that analysis exists), diagnoses, data_quality.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import polars as pl

from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.model import TraceMeta

FORMAT_VERSION = 1


class SourceDict(TypedDict):
    path: str
    format: str
    producer: str | None
    producer_version: str | None


class WindowDict(TypedDict):
    start_ns: int | None
    end_ns: int | None
    basis: str


class DeviceDict(TypedDict):
    rank: int
    device: int
    name: str | None
    window_ns: int
    busy_ns: int
    idle_ns: int
    idle_share: float | None
    kernel_count: int
    kernel_ns: int


class StepDict(TypedDict):
    rank: int
    device: int
    name: str
    start_ns: int
    end_ns: int
    busy_ns: int
    idle_share: float | None


class BinDict(TypedDict):
    lo_ns: int
    hi_ns: int
    count: int
    total_ns: int


class TopKernelDict(TypedDict):
    name: str
    count: int
    total_ns: int
    share: float | None


class KernelsDict(TypedDict):
    count: int
    total_ns: int
    duration_histogram: list[BinDict]
    top: list[TopKernelDict]


class RankDict(TypedDict):
    rank: int
    rank_source: str
    path: str
    world_size: int | None


class QualityDict(TypedDict):
    truncated: bool
    truncated_files: list[str]
    dropped_events: dict[str, int]
    notes: list[str]


@dataclass(frozen=True, slots=True)
class Report:
    """The analysed trace as plain values: what every renderer draws from."""

    source: SourceDict
    window: WindowDict
    ranks: list[RankDict]
    devices: list[DeviceDict]
    steps: list[StepDict]
    kernels: KernelsDict
    quality: QualityDict
    tool_version: str

    def to_json_dict(self) -> dict[str, Any]:
        """The contract's JSON object (keys in a stable order)."""
        return {
            "format_version": FORMAT_VERSION,
            "tool_version": self.tool_version,
            "source": self.source,
            "window": self.window,
            "ranks": self.ranks,
            "devices": self.devices,
            "steps": self.steps,
            "kernels": self.kernels,
            "critical_path": [],
            "diagnoses": [],
            "data_quality": self.quality,
        }


def build_report(meta: TraceMeta, metrics: Metrics, tool_version: str) -> Report:
    """Assemble the report from the trace's meta and the analyses' results."""
    names = {(d.rank, d.device): d.name for d in meta.devices}
    devices: list[DeviceDict] = [
        {
            "rank": r["rank"],
            "device": r["device"],
            "name": names.get((r["rank"], r["device"])),
            "window_ns": r["window_ns"],
            "busy_ns": r["busy_ns"],
            "idle_ns": r["idle_ns"],
            "idle_share": r["idle_share"],
            "kernel_count": r["kernel_count"],
            "kernel_ns": r["kernel_ns"],
        }
        for r in metrics.devices.iter_rows(named=True)
    ]
    steps: list[StepDict] = [
        {
            "rank": r["rank"],
            "device": r["device"],
            "name": r["name"] if r["name"] is not None else f"step {r['step']}",
            "start_ns": r["start_ns"],
            "end_ns": r["end_ns"],
            "busy_ns": r["busy_ns"],
            "idle_share": r["idle_share"],
        }
        for r in metrics.steps.iter_rows(named=True)
    ]
    span = metrics.windows.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    q = meta.quality
    return Report(
        source={
            "path": meta.path,
            "format": meta.format,
            "producer": meta.producer,
            "producer_version": meta.producer_version,
        },
        window={"start_ns": span[0], "end_ns": span[1], "basis": metrics.basis},
        ranks=[
            {
                "rank": r.rank,
                "rank_source": r.rank_source,
                "path": r.path,
                "world_size": r.world_size,
            }
            for r in meta.ranks
        ],
        devices=devices,
        steps=steps,
        kernels={
            "count": metrics.kernel_count,
            "total_ns": metrics.kernel_total_ns,
            "duration_histogram": [
                {"lo_ns": lo, "hi_ns": hi, "count": c, "total_ns": t}
                for lo, hi, c, t in metrics.kernel_histogram.select(
                    "lo_ns", "hi_ns", "count", "total_ns"
                ).iter_rows()
            ],
            "top": [
                {"name": n, "count": c, "total_ns": t, "share": s}
                for n, c, t, s in metrics.top_kernels.select(
                    "name", "count", "total_ns", "share"
                ).iter_rows()
            ],
        },
        quality={
            "truncated": q.truncated,
            "truncated_files": list(q.truncated_files),
            "dropped_events": dict(sorted(q.dropped.items())),
            "notes": list(q.notes),
        },
        tool_version=tool_version,
    )
