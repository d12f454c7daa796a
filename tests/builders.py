"""Builders for tiny hand-written traces: events as dicts, files in Kineto's own layout.

The event builders live in the package (rules carry example traces built with them).
"""

from __future__ import annotations

import dataclasses
import gzip as gz
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.model import GPU_METRIC_SCHEMA, Timeline
from traceanalyzer.rules.examples import cpu_op, gpu_op, kernel, launch, py_frame, step

__all__ = [
    "cpu_op",
    "gpu_metric_rows",
    "gpu_op",
    "kernel",
    "kineto_bytes",
    "launch",
    "py_frame",
    "step",
    "with_gpu_metrics",
    "write_trace",
]

HEADER: dict[str, Any] = {
    "schemaVersion": 1,
    "deviceProperties": [
        {
            "id": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "computeMajor": 9,
            "computeMinor": 0,
            "numSms": 132,
            "totalGlobalMem": 85017493504,
        }
    ],
}


def kineto_bytes(
    events: list[dict[str, Any]],
    header: dict[str, Any] | None = None,
    trailer: dict[str, Any] | None = None,
    layout: str = "kineto",
) -> bytes:
    """Serialise a trace.

    layout "kineto": Kineto's indented blocks, one event per `{ ... }` block (the fast path);
    "compact": one line, no whitespace; "array": the bare-array form of the Trace Event Format.
    """
    head = HEADER if header is None else header
    tail = {"traceName": "test.json"} if trailer is None else trailer
    if layout == "array":
        return json.dumps(events).encode()
    if layout == "compact":
        return json.dumps({**head, "traceEvents": events, **tail}, separators=(",", ":")).encode()
    parts = ["{"]
    for k, v in head.items():
        parts.append(f'  "{k}": {json.dumps(v, indent=2)},')
    blocks = ["  " + json.dumps(ev, indent=2).replace("\n", "\n  ") for ev in events]
    parts.append('  "traceEvents": [')
    parts.append(",\n".join(blocks))
    parts.append("  ]" + ("," if tail else ""))
    items = [f'  "{k}": {json.dumps(v)}' for k, v in tail.items()]
    parts.append(",\n".join(items))
    parts.append("}")
    return "\n".join(parts).encode()


def write_trace(
    path: Path, events: list[dict[str, Any]], *, gzip: bool = False, **kwargs: Any
) -> Path:
    """Write a trace file (gzip-compressed when asked, whatever the suffix)."""
    data = kineto_bytes(events, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gz.compress(data) if gzip else data)
    return path


def gpu_metric_rows(
    first_ns: int,
    last_ns: int,
    *,
    period_ns: int = 100_000,
    rank: int = 0,
    device: int = 0,
    **values: float | int | Callable[[int], float | int | None] | None,
) -> list[dict[str, Any]]:
    """GPU-metric samples (Timeline.gpu_metrics rows) every `period_ns` from `first_ns` to
    `last_ns`: `values` gives each column's reading (a number, or a function of the sample's
    start); the columns not given are unknown (None)."""
    rows = []
    for start in range(first_ns, last_ns, period_ns):
        row: dict[str, Any] = {c: None for c in GPU_METRIC_SCHEMA.names()}
        row.update(rank=rank, device=device, start_ns=start, end_ns=start + period_ns)
        for col, v in values.items():
            row[col] = v(start) if callable(v) else v
        rows.append(row)
    return rows


def with_gpu_metrics(tl: Timeline, rows: list[dict[str, Any]]) -> Timeline:
    """The timeline with these GPU-metric samples (as an Nsight export with
    --gpu-metrics-devices would carry)."""
    frame = pl.DataFrame(rows, schema=GPU_METRIC_SCHEMA, orient="row")
    return dataclasses.replace(tl, gpu_metrics=frame).validate()
