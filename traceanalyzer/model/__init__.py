"""The timeline model: one columnar schema for every trace source."""

from __future__ import annotations

from traceanalyzer.model.meta import DataQuality, DeviceInfo, RankInfo, TraceMeta
from traceanalyzer.model.schema import EVENT_SCHEMA, GPU_KINDS, KIND, Kind
from traceanalyzer.model.timeline import Timeline, combine, combine_meta

__all__ = [
    "EVENT_SCHEMA",
    "GPU_KINDS",
    "KIND",
    "DataQuality",
    "DeviceInfo",
    "Kind",
    "RankInfo",
    "Timeline",
    "TraceMeta",
    "combine",
    "combine_meta",
]
