"""The timeline model: one columnar schema for every trace source."""

from __future__ import annotations

from traceanalyzer.model.meta import DataQuality, DeviceInfo, PageFaults, RankInfo, TraceMeta
from traceanalyzer.model.schema import (
    EVENT_SCHEMA,
    GPU_KINDS,
    GPU_METRIC_SCHEMA,
    GPU_METRIC_SHARES,
    KIND,
    Kind,
)
from traceanalyzer.model.timeline import Timeline, combine, combine_meta, no_gpu_metrics

__all__ = [
    "EVENT_SCHEMA",
    "GPU_KINDS",
    "GPU_METRIC_SCHEMA",
    "GPU_METRIC_SHARES",
    "KIND",
    "DataQuality",
    "DeviceInfo",
    "Kind",
    "PageFaults",
    "RankInfo",
    "Timeline",
    "TraceMeta",
    "combine",
    "combine_meta",
    "no_gpu_metrics",
]
