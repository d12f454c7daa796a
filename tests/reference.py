"""Slow, obviously-correct loop implementations of the contract's numbers: test oracles only.

They read the JSON themselves (exact decimals, no shared code with the package) and follow
docs/definitions.md step by step.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
LAUNCH_CATS = {"cuda_runtime", "runtime", "cuda_driver"}
STEP_CATS = {"user_annotation", "cpu_op", "operator"}
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def load(path: Path) -> dict[str, Any]:
    """The whole trace, with every number parsed exactly."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=Decimal)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def ns(us: Any) -> int:
    """µs (int or exact Decimal) -> integer ns, rounding half away from zero."""
    return int((Decimal(us) * 1000).to_integral_value(rounding="ROUND_HALF_UP"))


def _int(v: Any) -> int:
    if isinstance(v, int):
        return v
    s = str(v).strip()
    if s.startswith("0x"):
        return int(s, 16)
    return int(re.search(r"-?\d+", s).group(0))  # type: ignore[union-attr]


def union_length(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [s, e) intervals."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s  # type: ignore[operator]
    return total


def in_window(s: int, e: int, lo: int, hi: int) -> bool:
    """The contract's 'inside the window' for one interval."""
    return (s < hi and e > lo) or (s == e and lo <= s <= hi)


def device_numbers(doc: dict[str, Any], rank: int = 0) -> dict[tuple[int, int], dict[str, Any]]:
    """Per (rank, device): window, busy_ns, idle_share, kernel_count, steps — by plain loops."""
    gpu: list[dict[str, Any]] = []
    launch_at: dict[int, int] = {}
    steps: dict[int, tuple[int, int]] = {}
    for ev in doc["traceEvents"]:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        if "ts" not in ev or "dur" not in ev or ev["ts"] <= 0 or ev["dur"] < 0:
            continue
        start = ns(ev["ts"])
        end = start + ns(ev["dur"])
        args = ev.get("args") or {}
        if cat in GPU_CATS:
            dev = _int(args["device"]) if "device" in args else _int(ev["pid"])
            gpu.append(
                {
                    "dev": dev,
                    "s": start,
                    "e": end,
                    "kernel": cat == "kernel",
                    "corr": args.get("correlation"),
                }
            )
        elif cat in LAUNCH_CATS and args.get("correlation") is not None:
            c = args["correlation"]
            launch_at[c] = min(launch_at.get(c, start), start)
        elif cat in STEP_CATS:
            m = STEP_RE.match(str(ev.get("name", "")))
            if m:
                n = int(m.group(1))
                lo, hi = steps.get(n, (start, end))
                steps[n] = (min(lo, start), max(hi, end))
    by_dev: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for op in gpu:
        by_dev[op["dev"]].append(op)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for dev, ops in by_dev.items():
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for op in ops:
            launched = launch_at.get(op["corr"]) if op["corr"] is not None else None
            if launched is None:
                continue
            for n, (lo, hi) in steps.items():
                if lo <= launched < hi:
                    first[n] = min(first.get(n, op["s"]), op["s"])
                    last[n] = max(last.get(n, op["e"]), op["e"])
        if steps and first:
            w_lo, w_hi = min(first.values()), max(last.values())
            order = sorted(first, key=lambda n: first[n])
            spans = []
            for i, n in enumerate(order):
                hi = first[order[i + 1]] if i + 1 < len(order) else w_hi
                spans.append((n, first[n], hi))
        else:
            w_lo = min(op["s"] for op in ops)
            w_hi = max(op["e"] for op in ops)
            spans = []
        clipped = [
            (max(op["s"], w_lo), min(op["e"], w_hi))
            for op in ops
            if in_window(op["s"], op["e"], w_lo, w_hi)
        ]
        busy = union_length([(s, e) for s, e in clipped if e > s])
        kernels = [op for op in ops if op["kernel"] and in_window(op["s"], op["e"], w_lo, w_hi)]
        step_rows = []
        for n, lo, hi in spans:
            part = [(max(op["s"], lo), min(op["e"], hi)) for op in ops]
            b = union_length([(s, e) for s, e in part if e > s])
            step_rows.append({"step": n, "start_ns": lo, "end_ns": hi, "busy_ns": b})
        window = w_hi - w_lo
        out[(rank, dev)] = {
            "start_ns": w_lo,
            "end_ns": w_hi,
            "window_ns": window,
            "busy_ns": busy,
            "idle_share": (window - busy) / window if window else None,
            "kernel_count": len(kernels),
            "kernel_ns": sum(min(k["e"], w_hi) - max(k["s"], w_lo) for k in kernels),
            "steps": step_rows,
            "basis": "steps" if spans else "trace",
        }
    return out


def rank_of(doc: dict[str, Any], path: Path) -> int:
    """distributedInfo.rank, else the number after 'rank'/'worker' in the name, else 0."""
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    m = re.search(r"(?:rank|worker)[-_]?(\d+)", path.name, re.IGNORECASE)
    return int(m.group(1)) if m else 0
