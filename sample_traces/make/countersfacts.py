"""Facts read back from hardware-counter captures, by plain SQL / CSV loops (no traceanalyzer code,
no torch), for run_counters.sh and run_copies_cold.sh; and the two chores of those runners.

  python3 countersfacts.py metrics RUN.sqlite SCENARIO
      An Nsight Systems export with GPU metrics: for each NVTX range step_N, its host time, the
      kernels it launched (by correlation id), their GPU window, and the mean of every GPU metric
      (TARGET_INFO_GPU_METRICS names: "SMs Active [Throughput %]", "Tensor Active [Throughput %]",
      "DRAM Read Bandwidth [Throughput %]", "GPC Clock Frequency [MHz]", ...) over the samples in
      that window (the two clock metrics' rows hold Hz: converted to MHz here); the GPC clock
      over the whole capture (min / max / mean, and inside the steps); per kernel name its launch
      shape (grid, block, registers, shared memory) and time; the unified-memory tables
      (page-fault rows, migrations) per step where they exist. FACT lines.
  python3 countersfacts.py redact RUN.sqlite
      Replaces the host's identity in an export (TARGET_INFO_SYSTEM_ENV rows DeviceEnvironment,
      Hostname, SystemUID -> '<redacted>'; the PROCESS_*:ENVIRONMENT_VARIABLE rows of
      META_DATA_CAPTURE deleted: the process environment), then VACUUM. Nothing else changes: every
      CUPTI_*, GPU_METRICS, TARGET_INFO_* and NVTX table keeps all its rows.
  python3 countersfacts.py ncu RAW.csv
      `ncu --import K.ncu-rep --csv --page raw` output (row 1 names, row 2 units, numbers with
      thousands separators): kernel count, total gpu__time_duration, and per kernel its name,
      grid, block, registers, time, SM / DRAM / tensor throughput. Redacts a "Host Name" column
      in place first. FACT lines.
  python3 countersfacts.py merge LOGDIR OUT.json NAME ...
      Merges the FACT lines of LOGDIR/NAME.log (and LOGDIR/NAME.rc: "rc seconds") into OUT.json,
      in the form of tests/data/gpu/facts_pitfalls3.json: {"env", "tools", "scenarios": {NAME:
      {"rc", "process_wall_s", "truth", "facts"}}}; LOGDIR/tools.json (if any) becomes "tools".
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import json
import os
import re
import sqlite3
import sys
from typing import Any

STEP = re.compile(r"^step_\d+$")


def fact(**kw: Any) -> None:
    print("FACT " + json.dumps(kw, sort_keys=True), flush=True)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("select name from sqlite_master where type='table'")}


def _cols(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"pragma table_info({table})")]


def _steps(db: sqlite3.Connection, names: dict[int, str]) -> list[tuple[int, int, str]]:
    if "NVTX_EVENTS" not in _tables(db):
        return []
    rows = [
        (s, e, t if t is not None else names.get(tid, ""))
        for s, e, t, tid in db.execute(
            "select start, end, text, textId from NVTX_EVENTS where eventType = 59"
        )
        if e is not None
    ]
    return sorted((r for r in rows if STEP.match(r[2])), key=lambda r: r[0])


def _mean(vals: list[float]) -> float | None:
    return round(sum(vals) / len(vals), 2) if vals else None


def metrics(path: str, scenario: str) -> None:
    db = sqlite3.connect(path)
    have = _tables(db)
    names = dict(db.execute("select id, value from StringIds"))
    steps = _steps(db, names)
    kernels = []
    kcols = _cols(db, "CUPTI_ACTIVITY_KIND_KERNEL") if "CUPTI_ACTIVITY_KIND_KERNEL" in have else []
    if kcols:
        for row in db.execute(
            "select start, end, correlationId, coalesce(demangledName, shortName), gridX, gridY, "
            "gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory, "
            "dynamicSharedMemory from CUPTI_ACTIVITY_KIND_KERNEL"
        ):
            kernels.append(row)
    launch = {
        corr: start
        for start, corr in db.execute(
            "select start, correlationId from CUPTI_ACTIVITY_KIND_RUNTIME"
        )
    }
    series: dict[str, tuple[list[int], list[float]]] = {}
    if "GPU_METRICS" in have and "TARGET_INFO_GPU_METRICS" in have:
        mname = {
            mid: n
            for mid, n in db.execute("select metricId, metricName from TARGET_INFO_GPU_METRICS")
        }
        raw: dict[str, list[tuple[int, float]]] = {}
        for ts, mid, val in db.execute("select timestamp, metricId, value from GPU_METRICS"):
            raw.setdefault(mname.get(mid, str(mid)), []).append((ts, val))
        for n, rows in raw.items():
            rows.sort()
            # the clock rows hold Hz although their names say MHz: reported here in MHz
            scale = 1e-6 if "[MHz]" in n and rows and max(r[1] for r in rows) > 1e5 else 1.0
            series[n] = ([r[0] for r in rows], [float(r[1]) * scale for r in rows])
        ts_all = next(iter(series.values()), ([], []))[0]
        fact(
            scenario=scenario,
            gpu_metrics={
                "samples": sum(len(v[0]) for v in series.values()),
                "metrics": sorted(series),
                "sampling_frequency_hz": dict(
                    db.execute(
                        "select name, value from META_DATA_CAPTURE where name like "
                        "'GPU_METRICS_OPTIONS:SAMPLING_FREQUENCY'"
                    )
                ).get("GPU_METRICS_OPTIONS:SAMPLING_FREQUENCY"),
                "first_ts_ms": round(min(ts_all) / 1e6, 3) if ts_all else None,
                "last_ts_ms": round(max(ts_all) / 1e6, 3) if ts_all else None,
            },
        )

    def window(name: str, lo: int, hi: int) -> list[float]:
        ts, vals = series.get(name, ([], []))
        i, j = bisect.bisect_left(ts, lo), bisect.bisect_right(ts, hi)
        return vals[i:j]

    clock = "GPC Clock Frequency [MHz]"
    if clock in series:
        v = series[clock][1]
        fact(
            scenario=scenario,
            gpc_clock_mhz_capture={
                "min": round(min(v), 1),
                "max": round(max(v), 1),
                "mean": _mean(v),
            },
        )
    um = {
        t: _cols(db, t)
        for t in ("CUDA_UM_CPU_PAGE_FAULT_EVENTS", "CUDA_UM_GPU_PAGE_FAULT_EVENTS")
        if t in have
    }
    um_rows = {
        t: list(
            db.execute(
                f"select start{', numberOfPageFaults' * ('numberOfPageFaults' in c)} from {t}"
            )
        )
        for t, c in um.items()
    }
    memcpy_um: list[tuple[int, int, int, str]] = []
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in have:
        ops = (
            dict(db.execute("select id, label from ENUM_CUDA_MEMCPY_OPER"))
            if "ENUM_CUDA_MEMCPY_OPER" in have
            else {}
        )
        for s, e, b, k in db.execute(
            "select start, end, bytes, copyKind from CUPTI_ACTIVITY_KIND_MEMCPY"
        ):
            memcpy_um.append((s, e, b, str(ops.get(k, k))))
    if um:
        fact(
            scenario=scenario,
            unified_memory={
                t: {
                    "rows": len(r),
                    "page_faults": sum(x[1] for x in r) if r and len(r[0]) > 1 else None,
                }
                for t, r in um_rows.items()
            },
        )
    all_gpu_windows = []
    for lo, hi, name in steps:
        mine = [k for k in kernels if lo <= launch.get(k[2], -1) < hi]
        row: dict[str, Any] = {
            "name": name,
            "host_ms": round((hi - lo) / 1e6, 3),
            "kernels": len(mine),
        }
        if mine:
            g0, g1 = min(k[0] for k in mine), max(k[1] for k in mine)
            all_gpu_windows.append((g0, g1))
            busy = sum(k[1] - k[0] for k in mine)
            row.update(
                gpu_window_ms=round((g1 - g0) / 1e6, 3),
                kernel_ms=round(busy / 1e6, 3),
                kernel_busy_share_of_window=round(busy / (g1 - g0), 4) if g1 > g0 else None,
            )
            row["metrics_mean_in_window"] = {
                n: _mean(window(n, g0, g1))
                for n in sorted(series)
                if "[Throughput %]" in n or "[MHz]" in n
            }
            if clock in series:
                v = window(clock, g0, g1)
                row["gpc_clock_mhz_min_max"] = [round(min(v), 1), round(max(v), 1)] if v else None
        for t, r in um_rows.items():
            inside = [x for x in r if lo <= x[0] < hi]
            row[t] = {
                "rows": len(inside),
                "page_faults": sum(x[1] for x in inside) if inside and len(inside[0]) > 1 else None,
            }
        if memcpy_um:
            by: dict[str, dict[str, float]] = {}
            for s, e, b, k in memcpy_um:
                if lo <= s < hi:
                    d = by.setdefault(k, {"count": 0, "bytes": 0, "ms": 0.0})
                    d["count"] += 1
                    d["bytes"] += b
                    d["ms"] = round(d["ms"] + (e - s) / 1e6, 3)
            row["memcpy_by_kind"] = by
        fact(scenario=scenario, step=row)
    if all_gpu_windows and series:
        rest = all_gpu_windows[1:] or all_gpu_windows
        fact(
            scenario=scenario,
            metrics_mean_steps_1_on={
                n: _mean([x for g0, g1 in rest for x in window(n, g0, g1)])
                for n in sorted(series)
                if "[Throughput %]" in n or "[MHz]" in n
            },
        )
    shapes: dict[str, dict[str, Any]] = {}
    for s, e, _, nid, gx, gy, gz, bx, by_, bz, reg, ssm, dsm in kernels:
        n = names.get(nid, str(nid))
        d = shapes.setdefault(
            n,
            {
                "name": n[:160],
                "count": 0,
                "ms": 0.0,
                "grid": [gx, gy, gz],
                "block": [bx, by_, bz],
                "registers_per_thread": reg,
                "static_shared": ssm,
                "dynamic_shared": dsm,
            },
        )
        d["count"] += 1
        d["ms"] += (e - s) / 1e6
    top = sorted(shapes.values(), key=lambda d: -d["ms"])[:15]
    for d in top:
        d["ms"] = round(d["ms"], 3)
        d["blocks"] = d["grid"][0] * d["grid"][1] * d["grid"][2]
    fact(scenario=scenario, kernel_shapes_top=top, kernels_total=len(kernels))


def redact(path: str) -> None:
    db = sqlite3.connect(path)
    have = _tables(db)
    n_env = n_meta = 0
    if "TARGET_INFO_SYSTEM_ENV" in have:
        n_env = db.execute(
            "update TARGET_INFO_SYSTEM_ENV set value = '<redacted>' "
            "where name in ('DeviceEnvironment', 'Hostname', 'SystemUID')"
        ).rowcount
    if "META_DATA_CAPTURE" in have:
        n_meta = db.execute(
            "delete from META_DATA_CAPTURE where name like 'PROCESS_%:ENVIRONMENT_VARIABLE'"
        ).rowcount
    db.commit()
    db.execute("vacuum")
    db.close()
    fact(redacted=os.path.basename(path), system_env_rows=n_env, environment_rows_deleted=n_meta)


def _num(s: str) -> float | None:
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def ncu(path: str) -> None:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    if "Host Name" in head:
        i = head.index("Host Name")
        for r in rows[2:]:
            if i < len(r):
                r[i] = "<redacted>"
        with open(path, "w", newline="") as f:
            csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    units = dict(zip(head, rows[1], strict=False))
    data = [dict(zip(head, r, strict=False)) for r in rows[2:]]
    want = [
        "gpu__time_duration.sum",
        "launch__grid_size",
        "launch__block_size",
        "launch__registers_per_thread",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
    ]
    present = [w for w in want if w in head]
    t = "gpu__time_duration.sum"
    total = sum(_num(d.get(t, "")) or 0 for d in data)
    fact(
        ncu_csv=os.path.basename(path),
        kernels=len(data),
        columns=len(head),
        units={w: units.get(w) for w in present},
        missing=[w for w in want if w not in head],
        gpu_time_total=round(total, 1),
        gpu_time_unit=units.get(t),
    )
    per = []
    for d in data:
        r = {"id": d.get("ID"), "name": (d.get("Kernel Name") or "")[:120]}
        for w in present:
            r[w] = _num(d.get(w, ""))
        per.append(r)
    per.sort(key=lambda r: -(r.get(t) or 0))
    fact(ncu_top_kernels=per[:20])
    small = [r for r in per if (r.get("launch__grid_size") or 1e9) < 132]
    fact(
        ncu_grids_below_132=len(small),
        ncu_time_in_grids_below_132=round(sum(r.get(t) or 0 for r in small), 1),
    )


def merge(logdir: str, out: str, names: list[str]) -> None:
    res: dict[str, Any] = {"env": None, "tools": None, "scenarios": {}}
    tools = os.path.join(logdir, "tools.json")
    if os.path.exists(tools):
        with open(tools) as f:
            res["tools"] = json.load(f)
    for s in names:
        log = os.path.join(logdir, s + ".log")
        if not os.path.exists(log):
            continue
        facts = []
        with open(log, errors="replace") as f:
            for line in f:
                if line.startswith("FACT "):
                    with contextlib.suppress(ValueError):
                        facts.append(json.loads(line[5:]))
        st: dict[str, Any] = {}
        rcf = os.path.join(logdir, s + ".rc")
        if os.path.exists(rcf):
            with open(rcf) as f:
                rc, wall = f.read().split()
            st = {"rc": int(rc), "process_wall_s": int(wall)}
        truth = [f["truth"] for f in facts if f.get("truth")]
        if res["env"] is None:
            for f in facts:
                if "torch" in f and "gpu" in f:
                    res["env"] = {k: v for k, v in f.items() if k != "scenario"}
                    break
        res["scenarios"][s] = {**st, "truth": truth[-1] if truth else None, "facts": facts}
    with open(out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "metrics":
        metrics(sys.argv[2], sys.argv[3])
    elif cmd == "redact":
        redact(sys.argv[2])
    elif cmd == "ncu":
        ncu(sys.argv[2])
    elif cmd == "merge":
        merge(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        raise SystemExit(__doc__)
