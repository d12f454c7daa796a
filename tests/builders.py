"""Builders for tiny hand-written traces: events as dicts, files in Kineto's own layout.

The event builders live in the package (rules carry example traces built with them).
"""

from __future__ import annotations

import gzip as gz
import json
from pathlib import Path
from typing import Any

from traceanalyzer.rules.examples import cpu_op, gpu_op, kernel, launch, py_frame, step

__all__ = [
    "cpu_op",
    "gpu_op",
    "kernel",
    "kineto_bytes",
    "launch",
    "py_frame",
    "step",
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
