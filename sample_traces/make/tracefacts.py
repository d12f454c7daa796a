"""Facts read back from a Chrome trace that a scenario script has just written, by plain loops
over its events (no traceanalyzer code, no torch): kernel time by a coarse name class, GPU busy
share, host-to-device/device-to-host copies, blocking sync calls, idle gaps by length, the
allocator's memory per step (where profile_memory recorded it).

The scenario scripts print these as `FACT` lines next to the CUDA-event step times, so that
tests/data/gpu/README.md can quote what the trace holds without trusting the tool under test.

usage (also on a trace already made): python3 tracefacts.py TRACE.json.gz
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import sys
from typing import Any

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
#: A gap this short between GPU activities is a launch gap (the tool's default limit, 50 µs).
SHORT_GAP_US = 50.0

# Coarse classes by kernel name, first match wins (attention before GEMM: fmha kernels).
_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention", re.compile(r"fmha|flash|attention|sdpa", re.I)),
    ("gemm", re.compile(r"gemm|nvjet|xmma|cutlass|matmul|gemv|cublas", re.I)),
    ("copy_cast", re.compile(r"copy|transpose|permute|(?:^|[^a-z])cast", re.I)),
    # everything else in these traces: elementwise, reductions, norms, softmax, dropout,
    # embedding/index, fills, optimizer kernels (all memory-bandwidth bound)
    ("pointwise_reduction", re.compile(r".")),
)


def kernel_class(name: str) -> str:
    for cls, pat in _CLASSES:
        if pat.search(name):
            return cls
    return "pointwise_reduction"


def _load(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _merge(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _busy(merged: list[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in merged)


def trace_facts(path: str) -> dict[str, Any]:
    """The facts of one trace (times in ms unless the key says otherwise)."""
    ev = [e for e in _load(path) if e.get("ph") == "X"]
    steps = sorted(
        (
            e
            for e in ev
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
        ),
        key=lambda e: e["ts"],
    )
    gpu = [e for e in ev if e.get("cat") in GPU_CATS]
    kernels = [e for e in gpu if e["cat"] == "kernel"]
    iv = [(e["ts"], e["ts"] + e["dur"]) for e in gpu]
    merged = _merge(iv)
    span_lo, span_hi = merged[0][0], merged[-1][1]
    busy_span = _busy(merged, span_lo, span_hi)
    step_lo, step_hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]

    by_class: dict[str, float] = {}
    for k in kernels:
        c = kernel_class(k["name"])
        by_class[c] = by_class.get(c, 0.0) + k["dur"]
    ktime = sum(by_class.values())

    copies: dict[str, dict[str, float]] = {}
    for e in gpu:
        if e["cat"] != "gpu_memcpy":
            continue
        c = copies.setdefault(e["name"], {"count": 0, "bytes": 0, "ms": 0.0})
        c["count"] += 1
        c["bytes"] += int(e.get("args", {}).get("bytes", 0))
        c["ms"] += e["dur"] / 1e3
    for c in copies.values():
        c["gbps"] = round(c["bytes"] / (c["ms"] * 1e6), 2) if c["ms"] else None
        c["ms"] = round(c["ms"], 3)

    syncs: dict[str, dict[str, float]] = {}
    for e in ev:
        if e.get("cat") == "cuda_runtime" and (e["name"] in SYNC_CALLS or "Memcpy" in e["name"]):
            s = syncs.setdefault(e["name"], {"count": 0, "ms": 0.0})
            s["count"] += 1
            s["ms"] += e["dur"] / 1e3
    for s in syncs.values():
        s["ms"] = round(s["ms"], 3)

    # idle gaps between GPU activities over the GPU span, split at the launch-gap limit
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(merged)]
    short = sum(g for g in gaps if g <= SHORT_GAP_US)
    long_ = sum(g for g in gaps if g > SHORT_GAP_US)

    per_step = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        per_step.append(
            {
                "name": s["name"],
                "host_ms": round(s["dur"] / 1e3, 3),
                "gpu_busy_ms_in_host_window": round(_busy(merged, lo, hi) / 1e3, 3),
            }
        )

    return {
        "steps": len(steps),
        "kernels": len(kernels),
        "kernels_per_step": round(len(kernels) / len(steps), 1) if steps else None,
        "avg_kernel_us": round(ktime / len(kernels), 2) if kernels else None,
        "kernel_ms": round(ktime / 1e3, 3),
        "kernel_share_by_class": {c: round(t / ktime, 4) for c, t in sorted(by_class.items())},
        "kernel_ms_by_class": {c: round(t / 1e3, 3) for c, t in sorted(by_class.items())},
        "gpu_span_ms": round((span_hi - span_lo) / 1e3, 3),
        "gpu_busy_ms": round(busy_span / 1e3, 3),
        "gpu_busy_share_of_gpu_span": round(busy_span / (span_hi - span_lo), 4),
        "step_window_ms": round((step_hi - step_lo) / 1e3, 3),
        "gpu_busy_share_of_step_window": round(
            _busy(merged, step_lo, step_hi) / (step_hi - step_lo), 4
        ),
        "idle_ms_in_gpu_span": round((short + long_) / 1e3, 3),
        "idle_ms_in_gaps_le_50us": round(short / 1e3, 3),
        "idle_ms_in_gaps_gt_50us": round(long_ / 1e3, 3),
        "gaps_le_50us": sum(1 for g in gaps if g <= SHORT_GAP_US),
        "gaps_gt_50us": sum(1 for g in gaps if g > SHORT_GAP_US),
        "copies": copies,
        "host_calls": syncs,
        "per_step": per_step,
    }


def sync_gaps(path: str) -> list[dict[str, float]]:
    """For each cudaStreamSynchronize inside a ProfilerStep: how long the host waited, and the
    GPU idle gap around its return (from the end of the last GPU activity before the call
    returned to the start of the next one), split into the part before the return and the
    refill after it (the host queued nothing while it waited)."""
    ev = [e for e in _load(path) if e.get("ph") == "X"]
    steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    merged = _merge([(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in GPU_CATS])
    out = []
    for e in sorted(ev, key=lambda e: e["ts"]):
        if e.get("cat") != "cuda_runtime" or e["name"] != "cudaStreamSynchronize":
            continue
        end = e["ts"] + e["dur"]
        if not any(lo <= e["ts"] <= hi for lo, hi in steps):
            continue
        before = [iv for iv in merged if iv[0] < end]
        after = [iv for iv in merged if iv[0] >= end]
        if not before or not after:
            continue
        prev_end, next_start = before[-1][1], after[0][0]
        out.append(
            {
                "host_wait_us": round(e["dur"], 1),
                "gpu_idle_gap_us": round(max(0.0, next_start - prev_end), 1),
                "idle_before_return_us": round(max(0.0, end - prev_end), 1),
                "refill_after_return_us": round(max(0.0, next_start - max(end, prev_end)), 1),
            }
        )
    return out


def step_detail(path: str) -> list[dict[str, Any]]:
    """Per `ProfilerStep`: the GPU activities launched inside it (by the launch's correlation
    id), and where the GPU idled around them: `idle_before_first_ms`, the idle gap that the
    step's first GPU activity ends (the GPU waiting for the step to begin: the input pipeline,
    whatever runs between the previous step's last launch and this step's first), and
    `idle_inside_ms`, the idle between the step's first and last GPU activity (the GPU waiting
    inside the step). Also counts per step: kernels, `triton_*` kernels, memcpys, `cudaMalloc`
    and blocking sync calls made in it."""
    ev = [e for e in _load(path) if e.get("ph") == "X"]
    steps = sorted(
        (
            e
            for e in ev
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
        ),
        key=lambda e: e["ts"],
    )
    gpu = [e for e in ev if e.get("cat") in GPU_CATS]
    merged = _merge([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    runtime = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    launch_ts = {
        e["args"]["correlation"]: e["ts"] for e in runtime if "correlation" in e.get("args", {})
    }
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        mine = [
            e for e in gpu if lo <= launch_ts.get(e.get("args", {}).get("correlation"), -1.0) < hi
        ]
        calls = [e for e in runtime if lo <= e["ts"] < hi]
        row: dict[str, Any] = {
            "name": s["name"],
            "host_ms": round(s["dur"] / 1e3, 3),
            "kernels": sum(1 for e in mine if e["cat"] == "kernel"),
            "triton_kernels": sum(
                1 for e in mine if e["cat"] == "kernel" and e["name"].startswith("triton_")
            ),
            "memcpys": sum(1 for e in mine if e["cat"] == "gpu_memcpy"),
            "cuda_malloc": sum(1 for e in calls if e["name"] == "cudaMalloc"),
            "syncs": sum(1 for e in calls if e["name"] in SYNC_CALLS),
        }
        if mine:
            first = min(e["ts"] for e in mine)
            last = max(e["ts"] + e["dur"] for e in mine)
            prev = [iv[1] for iv in merged if iv[1] <= first]
            row["idle_before_first_ms"] = round((first - max(prev)) / 1e3, 3) if prev else None
            row["gpu_span_ms"] = round((last - first) / 1e3, 3)
            row["idle_inside_ms"] = round((last - first - _busy(merged, first, last)) / 1e3, 3)
        out.append(row)
    return out


def annotation_ms(path: str, prefix: str) -> list[float]:
    """Durations (ms) of the `user_annotation` ranges whose name starts with `prefix`, in order."""
    ev = [e for e in _load(path) if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    return [
        round(e["dur"] / 1e3, 3)
        for e in sorted(ev, key=lambda e: e["ts"])
        if e["name"].startswith(prefix)
    ]


def memory_steps(path: str) -> list[dict[str, Any]]:
    """Per `ProfilerStep`, from the profiler's `[memory]` instant events on the GPU (written with
    profile_memory=True): how many there are, the allocator's `Total Allocated` at the first and
    last of them and its peak inside the step (MiB)."""
    raw = _load(path)
    steps = sorted(
        (
            e
            for e in raw
            if e.get("ph") == "X"
            and e.get("cat") == "user_annotation"
            and e["name"].startswith("ProfilerStep#")
        ),
        key=lambda e: e["ts"],
    )
    mem = sorted(
        (
            e
            for e in raw
            if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == 1
        ),
        key=lambda e: e["ts"],
    )
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        mine = [e["args"]["Total Allocated"] for e in mem if lo <= e["ts"] <= hi]
        row: dict[str, Any] = {"name": s["name"], "memory_events": len(mine)}
        if mine:
            row["allocated_first_mib"] = round(mine[0] / 2**20, 1)
            row["allocated_last_mib"] = round(mine[-1] / 2**20, 1)
            row["allocated_peak_mib"] = round(max(mine) / 2**20, 1)
        out.append(row)
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(p)
        print(json.dumps(trace_facts(p), indent=1))
        print(json.dumps(sync_gaps(p)))
        print(json.dumps(step_detail(p), indent=1))
        if any(r["memory_events"] for r in memory_steps(p)):
            print(json.dumps(memory_steps(p), indent=1))
