"""Builders for the tiny example traces each rule carries (bad and good), in Kineto's shape.

Times are microseconds, as in a Chrome trace. The same builders serve the tests.
"""

from __future__ import annotations

import json
import sqlite3
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


def synchronize(ts: float, dur: float, name: str = "cudaDeviceSynchronize") -> Event:
    """The host waiting for the GPU (`torch.cuda.synchronize()`, `cudaStreamSynchronize`): a
    runtime call without a correlation id."""
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": HOST_PID,
        "tid": HOST_PID,
        "ts": ts,
        "dur": dur,
        "args": {},
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


#: The GPU-metric readings an example may give (`gpu_metrics`): its argument -> the counter
#: Nsight Systems names (integer percents; the clock in MHz, exported as Hz).
METRIC_COUNTERS: dict[str, str] = {
    "clock_mhz": "GPC Clock Frequency [MHz]",
    "sm_active": "SMs Active [Throughput %]",
    "sm_issue": "SM Issue [Throughput %]",
    "tensor_active": "Tensor Active [Throughput %]",
    "dram_read": "DRAM Read Bandwidth [Throughput %]",
    "dram_write": "DRAM Write Bandwidth [Throughput %]",
    "pcie_rx": "PCIe RX Throughput [Throughput %]",
    "pcie_tx": "PCIe TX Throughput [Throughput %]",
}


def gpu_metrics(
    ts: float, dur: float, *, device: int = 0, period: float = 100.0, **readings: int
) -> Event:
    """GPU-metric samples every `period` µs over [ts, ts + dur) on `device`, with constant
    readings (METRIC_COUNTERS: `clock_mhz`, and integer percents `sm_active`,
    `tensor_active`, ...), as `nsys profile --gpu-metrics-devices` records them. An example
    holding such events is written as an Nsight Systems SQLite export (`write_example`)."""
    unknown = set(readings) - set(METRIC_COUNTERS)
    if unknown:
        raise ValueError(f"unknown GPU-metric readings {sorted(unknown)}")
    return {
        "ph": "X",
        "cat": "gpu_metrics",
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "period": period, **readings},
    }


def write_example(events: list[Event], folder: Path, name: str) -> Path:
    """Write an example trace under `folder`: one file `name.json`, or, where events carry a
    rank (`on_rank`), a folder `name/` with one `rank{N}.json` per rank; where they hold GPU
    metrics (`gpu_metrics`), an Nsight Systems export `name.sqlite`. Returns the path to
    read. Entries made by `device_properties` go into the document's header."""
    header: dict[str, Any] = {}
    for ev in events:
        header.update(ev.get(HEADER, {}))
    events = [ev for ev in events if HEADER not in ev]
    if any(ev.get("cat") == "gpu_metrics" for ev in events):
        return _write_nsys(events, folder / f"{name}.sqlite")
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


#: The tables of an example written as an Nsight Systems export (the columns the reader
#: reads, as nsys 2025.3 names them).
_NSYS_TABLES = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, clockRate INTEGER, smCount INTEGER,
  cuDevice INTEGER, computeMajor INTEGER, computeMinor INTEGER, totalMemory INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
  correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
  shortName INTEGER NOT NULL, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL,
  gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL,
  blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
  dynamicSharedMemory INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
  nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
  text TEXT, globalTid INTEGER);
CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL,
  typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL);
CREATE TABLE GPU_METRICS (rawTimestamp INTEGER NOT NULL, timestamp INTEGER NOT NULL,
  typeId INTEGER NOT NULL, metricId INTEGER NOT NULL, value INTEGER NOT NULL);
"""
#: The example's GPU: an H100 SXM (its maximum SM clock is the export's clockRate).
_NSYS_GPU = ("NVIDIA H100 80GB HBM3", 1_980_000_000, 132, 9, 0, 85_017_493_504)


def _write_nsys(events: list[Event], path: Path) -> Path:
    """The example as an Nsight Systems SQLite export: kernels, their launches, the steps as
    NVTX ranges (`ProfilerStep#N`), and the GPU metrics; other events are refused."""
    pid = (1 << 48) + (HOST_PID << 24)
    names: dict[str, int] = {}

    def sid(text: str) -> int:
        return names.setdefault(text, len(names) + 1)

    kernels, calls, ranges, samples = [], [], [], []
    devices: set[int] = set()

    def ns(us: float) -> int:
        return round(us * 1000)

    for ev in events:
        a, cat = ev.get("args", {}), ev.get("cat")
        start, end = ns(ev["ts"]), ns(ev["ts"] + ev.get("dur", 0))
        if cat == "kernel":
            devices.add(a["device"])
            name = sid(ev["name"])
            # a launch that fills the GPU unless the example says otherwise
            grid, block = a.get("grid", [528, 1, 1]), a.get("block", [256, 1, 1])
            kernels.append((start, end, a["device"], 1, a["stream"], a.get("correlation"), pid,
                            name, name, 32, *grid, *block, 0, 0))  # fmt: skip
        elif cat == "cuda_runtime":
            calls.append((start, end, 1, pid + ev["tid"], a["correlation"], sid(ev["name"]), 0))
        elif cat == "user_annotation":
            ranges.append((start, end, 59, ev["name"], pid + ev["tid"]))
        elif cat == "gpu_metrics":
            devices.add(a["device"])
            type_id = (1 << 48) + (1 << 32) + a["device"]
            for t in range(start, end, ns(a["period"])):
                for metric_id, key in enumerate(METRIC_COUNTERS):
                    if key in a:
                        value = a[key] * 1_000_000 if key == "clock_mhz" else a[key]
                        samples.append((t, t, type_id, metric_id, int(value)))
        else:
            raise ValueError(f"an Nsight example holds kernels, launches, steps and GPU "
                             f"metrics only, not {cat!r}")  # fmt: skip
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        con.executescript(_NSYS_TABLES)
        con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2025.3.2.0')")
        con.executemany(
            "INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(d, *_NSYS_GPU[:3], d, *_NSYS_GPU[3:]) for d in sorted(devices)],
        )
        metric_rows = {
            ((1 << 48) + (1 << 32) + ev["args"]["device"], i, name)
            for ev in events
            if ev.get("cat") == "gpu_metrics"
            for i, (k, name) in enumerate(METRIC_COUNTERS.items())
            if k in ev["args"]
        }
        con.executemany(
            "INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, '', ?, ?)",
            sorted((t, t, i, n) for t, i, n in metric_rows),
        )
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in names.items()])
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * 18)})",
                        kernels)  # fmt: skip
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?)",
                        calls)  # fmt: skip
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?)", ranges)
        con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?, ?)", sorted(samples))
        con.commit()
    finally:
        con.close()
    return path
