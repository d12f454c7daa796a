"""Builders for tiny hand-written traces: events as dicts, files in Kineto's own layout."""

from __future__ import annotations

import gzip as gz
import json
from pathlib import Path
from typing import Any

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


def kernel(
    ts: float,
    dur: float,
    name: str = "k",
    *,
    device: int = 0,
    stream: int = 7,
    corr: int | None = None,
    **args: Any,
) -> dict[str, Any]:
    """A kernel event (times in µs, as Kineto writes them)."""
    a: dict[str, Any] = {"device": device, "stream": stream, **args}
    if corr is not None:
        a["correlation"] = corr
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": a,
    }


def gpu_op(
    cat: str,
    ts: float,
    dur: float,
    name: str,
    *,
    device: int = 0,
    stream: int = 7,
    corr: int | None = None,
    **args: Any,
) -> dict[str, Any]:
    """A memcpy/memset (cat gpu_memcpy / gpu_memset)."""
    ev = kernel(ts, dur, name, device=device, stream=stream, corr=corr, **args)
    ev["cat"] = cat
    return ev


def launch(
    ts: float,
    dur: float,
    corr: int,
    name: str = "cudaLaunchKernel",
    *,
    pid: int = 100,
    tid: int = 100,
) -> dict[str, Any]:
    """A runtime launch on the host."""
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr, "External id": corr},
    }


def step(n: int, ts: float, dur: float, *, pid: int = 100, tid: int = 100) -> dict[str, Any]:
    """A `ProfilerStep#n` annotation on the host."""
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{n}",
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"External id": 90000 + n},
    }


def cpu_op(ts: float, dur: float, name: str = "aten::mm", **args: Any) -> dict[str, Any]:
    """A CPU operator."""
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": dur,
        "args": args,
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
