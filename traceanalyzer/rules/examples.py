"""Builders for the tiny example traces each rule carries (bad and good), in Kineto's shape.

Times are microseconds, as in a Chrome trace. The same builders serve the tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Event = dict[str, Any]

HOST_PID = 100


def kernel(
    ts: float,
    dur: float,
    name: str = "k",
    *,
    device: int = 0,
    stream: int = 7,
    corr: int | None = None,
    **args: Any,
) -> Event:
    """A kernel event."""
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
) -> Event:
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
    pid: int = HOST_PID,
    tid: int = HOST_PID,
) -> Event:
    """A runtime call on the host (External id = correlation id)."""
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


def step(n: int, ts: float, dur: float, *, pid: int = HOST_PID, tid: int = HOST_PID) -> Event:
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


def cpu_op(ts: float, dur: float, name: str = "aten::mm", **args: Any) -> Event:
    """A CPU operator on the host thread."""
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": HOST_PID,
        "tid": HOST_PID,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def py_frame(ts: float, dur: float, name: str) -> Event:
    """A Python frame (with_stack=True), e.g. `train.py(88): train_step`."""
    return {
        "ph": "X",
        "cat": "python_function",
        "name": name,
        "pid": HOST_PID,
        "tid": HOST_PID,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


def launched(
    ts: float, kernel_ts: float, dur: float, corr: int, name: str, **args: Any
) -> list[Event]:
    """A launch at `ts` and the kernel it starts at `kernel_ts`."""
    return [launch(ts, 2, corr), kernel(kernel_ts, dur, name, corr=corr, **args)]


def memory(
    ts: float, total_allocated: int, *, device: int = 0, total_reserved: int | None = None
) -> Event:
    """A `[memory]` event (profile_memory=True): the device's total allocated bytes after it,
    and its total reserved (by default the same)."""
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": HOST_PID,
        "tid": HOST_PID,
        "ts": ts,
        "args": {
            "Device Type": 1,
            "Device Id": device,
            "Bytes": 0,
            "Total Allocated": total_allocated,
            "Total Reserved": total_allocated if total_reserved is None else total_reserved,
        },
    }


def on_rank(rank: int, events: list[Event]) -> list[Event]:
    """The same events, tagged as recorded by `rank` (a multi-rank example: `write_example`
    writes one file per rank, with the rank in its `distributedInfo`)."""
    return [{**ev, "rank": rank} for ev in events]


def device_properties(
    sm_count: int = 132, major: int = 9, minor: int = 0, name: str = "NVIDIA H100 80GB HBM3"
) -> Event:
    """Not an event: the trace's `deviceProperties` (one GPU), lifted into the document by
    `write_example` (launch shapes are read against the device's SMs)."""
    return {
        HEADER: {
            "deviceProperties": [
                {
                    "id": 0,
                    "name": name,
                    "computeMajor": major,
                    "computeMinor": minor,
                    "numSms": sm_count,
                    "maxThreadsPerMultiprocessor": 2048,
                    "regsPerMultiprocessor": 65536,
                    "sharedMemPerMultiprocessor": 233472,
                }
            ]
        }
    }


#: The key of an example entry that is part of the document, not an event.
HEADER = "_document"


def write_example(events: list[Event], folder: Path, name: str) -> Path:
    """Write an example trace under `folder`: one file `name.json`, or, where events carry a
    rank (`on_rank`), a folder `name/` with one `rank{N}.json` per rank. Returns the path to
    read. Entries made by `device_properties` go into the document's header."""
    header: dict[str, Any] = {}
    for ev in events:
        header.update(ev.get(HEADER, {}))
    events = [ev for ev in events if HEADER not in ev]
    ranks = sorted({ev["rank"] for ev in events if "rank" in ev})
    if not ranks:
        path = folder / f"{name}.json"
        path.write_text(json.dumps({**header, "traceEvents": events}))
        return path
    job = folder / name
    job.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        mine = [
            {k: v for k, v in ev.items() if k != "rank"} for ev in events if ev.get("rank") == r
        ]
        doc = {
            **header,
            "distributedInfo": {"rank": r, "world_size": len(ranks)},
            "traceEvents": mine,
        }
        (job / f"rank{r}.json").write_text(json.dumps(doc))
    return job
