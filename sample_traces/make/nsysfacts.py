"""Facts read back from an Nsight Systems SQLite export, by plain SQL and loops over its rows
(no traceanalyzer code, no torch), for the nsys scenarios: per NVTX range `step_N`, its host
duration, the GPU activities launched in it (by the launching runtime call's correlation id),
where the GPU idled around them, the blocking calls made in it and the copies it launched;
for the whole capture, kernel time by a coarse name class (tracefacts.kernel_class) and the
copies by kind, inside and outside the step ranges.

run_nsys.sh prints these as `FACT` lines after each export, so that tests/data/gpu/README.md
can quote what the export holds without trusting the tool under test.

usage: python3 nsysfacts.py RUN.sqlite [RUN2.sqlite ...]   (gunzip a .sqlite.gz first)
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from typing import Any

from tracefacts import _busy, _merge, kernel_class

#: Runtime calls that block the host until the GPU (or a stream) is done. `cudaMemcpy` (not
#: Async) to or from pageable memory blocks too.
SYNC_CALLS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
)
_VERSION = re.compile(r"_v\d+$")
STEP = re.compile(r"^step_\d+$")


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("select name from sqlite_master where type='table'")}


def _strings(db: sqlite3.Connection) -> dict[int, str]:
    return dict(db.execute("select id, value from StringIds"))


def _enum(db: sqlite3.Connection, table: str) -> dict[int, str]:
    if table not in _tables(db):
        return {}
    return {i: label for i, _, label in db.execute(f"select id, name, label from {table}")}


def nsys_facts(path: str) -> dict[str, Any]:
    """The facts of one export (times in ms unless the key says otherwise)."""
    db = sqlite3.connect(path)
    have = _tables(db)
    names = _strings(db)
    copy_kind = _enum(db, "ENUM_CUDA_MEMCPY_OPER")
    mem_kind = _enum(db, "ENUM_CUDA_MEM_KIND")

    steps = sorted(
        (
            (start, end, text if text is not None else names.get(tid, ""))
            for start, end, text, tid in db.execute(
                "select start, end, text, textId from NVTX_EVENTS where eventType = 59"
            )
            if end is not None
        ),
        key=lambda r: r[0],
    )
    steps = [s for s in steps if STEP.match(s[2])]

    # GPU activities: (start, end, correlationId, what, row)
    gpu: list[tuple[int, int, int, str, dict[str, Any]]] = []
    kernels = []
    for start, end, corr, name_id in db.execute(
        "select start, end, correlationId, coalesce(demangledName, shortName) "
        "from CUPTI_ACTIVITY_KIND_KERNEL"
    ):
        name = names.get(name_id, str(name_id))
        gpu.append((start, end, corr, "kernel", {"name": name}))
        kernels.append((start, end, name))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in have:
        for start, end, corr, nbytes, ck, sk, dk in db.execute(
            "select start, end, correlationId, bytes, copyKind, srcKind, dstKind "
            "from CUPTI_ACTIVITY_KIND_MEMCPY"
        ):
            kind = f"{copy_kind.get(ck, ck)} ({mem_kind.get(sk, sk)} -> {mem_kind.get(dk, dk)})"
            gpu.append((start, end, corr, "memcpy", {"kind": kind, "bytes": nbytes}))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in have:
        for start, end, corr in db.execute(
            "select start, end, correlationId from CUPTI_ACTIVITY_KIND_MEMSET"
        ):
            gpu.append((start, end, corr, "memset", {}))
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in have:
        for start, end, corr in db.execute(
            "select start, end, correlationId from CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
        ):
            gpu.append((start, end, corr, "graph", {}))
    merged = _merge([(float(a[0]), float(a[1])) for a in gpu])

    runtime = [
        (start, end, corr, _VERSION.sub("", names.get(nid, str(nid))))
        for start, end, corr, nid in db.execute(
            "select start, end, correlationId, nameId from CUPTI_ACTIVITY_KIND_RUNTIME"
        )
    ]
    launch_ts = {corr: start for start, _, corr, _ in runtime}
    osrt = []
    if "OSRT_API" in have:
        osrt = [
            (start, end, names.get(nid, str(nid)))
            for start, end, nid in db.execute("select start, end, nameId from OSRT_API")
        ]

    def in_steps(ts: float) -> bool:
        return any(lo <= ts < hi for lo, hi, _ in steps)

    per_step = []
    for lo, hi, name in steps:
        mine = [a for a in gpu if lo <= launch_ts.get(a[2], -1) < hi]
        calls = [r for r in runtime if lo <= r[0] < hi]
        syncs: dict[str, dict[str, float]] = {}
        for start, end, _, call in calls:
            if call in SYNC_CALLS:
                s = syncs.setdefault(call, {"count": 0, "ms": 0.0})
                s["count"] += 1
                s["ms"] = round(s["ms"] + (end - start) / 1e6, 3)
        copies: dict[str, dict[str, float]] = {}
        for a in mine:
            if a[3] == "memcpy":
                c = copies.setdefault(a[4]["kind"], {"count": 0, "bytes": 0})
                c["count"] += 1
                c["bytes"] += a[4]["bytes"]
        row: dict[str, Any] = {
            "name": name,
            "host_ms": round((hi - lo) / 1e6, 3),
            "kernels": sum(1 for a in mine if a[3] == "kernel"),
            "graph_replays": sum(1 for a in mine if a[3] == "graph"),
            "memcpys": copies,
            "memsets": sum(1 for a in mine if a[3] == "memset"),
            "launch_calls": sum(1 for r in calls if "Launch" in r[3]),
            "cuda_malloc": sum(1 for r in calls if r[3] == "cudaMalloc"),
            "host_alloc": sum(1 for r in calls if r[3] in ("cudaHostAlloc", "cudaMallocHost")),
            "syncs": syncs,
            "osrt_sleep_ms": round(
                sum(e - s for s, e, n in osrt if lo <= s < hi and "sleep" in n) / 1e6, 3
            ),
            "gpu_busy_ms_in_host_window": round(_busy(merged, lo, hi) / 1e6, 3),
        }
        if mine:
            first = min(a[0] for a in mine)
            last = max(a[1] for a in mine)
            prev = [iv[1] for iv in merged if iv[1] <= first]
            row["idle_before_first_ms"] = round((first - max(prev)) / 1e6, 3) if prev else None
            row["gpu_span_ms"] = round((last - first) / 1e6, 3)
            row["gpu_busy_ms_in_span"] = round(_busy(merged, first, last) / 1e6, 3)
            row["idle_inside_ms"] = round((last - first - _busy(merged, first, last)) / 1e6, 3)
        per_step.append(row)

    by_class: dict[str, float] = {}
    for s, e, n in kernels:
        if in_steps(s):
            c = kernel_class(n)
            by_class[c] = by_class.get(c, 0.0) + (e - s)
    ktime = sum(by_class.values())
    copies_all: dict[str, dict[str, float]] = {}
    for a in gpu:
        if a[3] != "memcpy":
            continue
        where = "in_steps" if in_steps(launch_ts.get(a[2], -1)) else "outside_steps"
        c = copies_all.setdefault(f"{a[4]['kind']} {where}", {"count": 0, "bytes": 0, "ms": 0.0})
        c["count"] += 1
        c["bytes"] += a[4]["bytes"]
        c["ms"] = round(c["ms"] + (a[1] - a[0]) / 1e6, 3)
    return {
        "steps": [s[2] for s in steps],
        "kernels_total": len(kernels),
        "kernels_in_steps": sum(1 for s, _, _ in kernels if in_steps(s)),
        "kernel_ms_in_steps_by_class": {c: round(t / 1e6, 3) for c, t in sorted(by_class.items())},
        "kernel_share_in_steps_by_class": {
            c: round(t / ktime, 4) for c, t in sorted(by_class.items())
        }
        if ktime
        else {},
        "copies": copies_all,
        "per_step": per_step,
    }


def sync_gaps(path: str) -> list[dict[str, Any]]:
    """For each blocking call (SYNC_CALLS) made inside a step range: how long the host waited,
    and the GPU idle gap around its return (from the end of the last GPU activity before it
    returned to the start of the next), split into the part before the return and the refill
    after it (as tracefacts.sync_gaps)."""
    db = sqlite3.connect(path)
    names = _strings(db)
    steps = [
        (start, end, text if text is not None else names.get(tid, ""))
        for start, end, text, tid in db.execute(
            "select start, end, text, textId from NVTX_EVENTS where eventType = 59"
        )
        if end is not None
    ]
    steps = [s for s in steps if STEP.match(s[2])]
    have = _tables(db)
    iv = [
        (float(s), float(e))
        for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
        )
        if t in have
        for s, e in db.execute(f"select start, end from {t}")
    ]
    merged = _merge(iv)
    out = []
    for start, end, nid in db.execute(
        "select start, end, nameId from CUPTI_ACTIVITY_KIND_RUNTIME order by start"
    ):
        call = _VERSION.sub("", names.get(nid, ""))
        if call not in SYNC_CALLS:
            continue
        step = next((n for lo, hi, n in steps if lo <= start < hi), None)
        if step is None:
            continue
        before = [m for m in merged if m[0] < end]
        after = [m for m in merged if m[0] >= end]
        if not before or not after:
            continue
        prev_end, next_start = before[-1][1], after[0][0]
        out.append(
            {
                "step": step,
                "call": call,
                "host_wait_us": round((end - start) / 1e3, 1),
                "gpu_idle_gap_us": round(max(0.0, next_start - prev_end) / 1e3, 1),
                "idle_before_return_us": round(max(0.0, end - prev_end) / 1e3, 1),
                "refill_after_return_us": round(max(0.0, next_start - max(end, prev_end)) / 1e3, 1),
            }
        )
    return out


def fact_lines(path: str, scenario: str) -> None:
    f = nsys_facts(path)
    per = f.pop("per_step")
    print("FACT " + json.dumps({"scenario": scenario, "export": f}, sort_keys=True), flush=True)
    for row in per:
        print("FACT " + json.dumps({"scenario": scenario, "step": row}, sort_keys=True))
    gaps = sync_gaps(path)
    print("FACT " + json.dumps({"scenario": scenario, "sync_gaps": gaps}, sort_keys=True))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        name = p.rsplit("/", 1)[-1].split(".")[0]
        fact_lines(p, name)
