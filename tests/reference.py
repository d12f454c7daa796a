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
from itertools import pairwise
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


def _in_step(
    launch_at: dict[int, int], op: dict[str, Any], steps: dict[int, tuple[int, int]]
) -> bool:
    """Whether the op was launched inside a step's marker range."""
    launched = launch_at.get(op["corr"]) if op["corr"] is not None else None
    return launched is not None and any(lo <= launched < hi for lo, hi in steps.values())


def device_numbers(
    doc: dict[str, Any], rank: int = 0, iterations: dict[int, tuple[int, int]] | None = None
) -> dict[tuple[int, int], dict[str, Any]]:
    """Per (rank, device): window, busy_ns, idle_share, kernel_count, steps — by plain loops.
    `iterations`: the host ranges of the steps where the trace has no step markers (step ->
    (start_ns, end_ns)), in place of the markers."""
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
        elif cat in STEP_CATS and iterations is None:
            m = STEP_RE.match(str(ev.get("name", "")))
            if m:
                n = int(m.group(1))
                lo, hi = steps.get(n, (start, end))
                steps[n] = (min(lo, start), max(hi, end))
    if iterations:
        steps = dict(iterations)
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
            order = sorted(first, key=lambda n: first[n])
            # the first step opens at its marker, or once the work queued before it (not
            # launched in a step) is done, and never after its own first GPU operation
            d_first = first[order[0]]
            queued = [
                op["e"] for op in ops if op["s"] < d_first and not _in_step(launch_at, op, steps)
            ]
            pre_end = max(queued) if queued else None
            m_lo = steps[order[0]][0]
            opening = min(d_first, max(m_lo, pre_end) if pre_end is not None else m_lo)
            w_lo, w_hi = opening, max(last.values())
            spans = []
            done = None
            for n in order:
                lo = opening if done is None else done
                done = last[n] if done is None else max(done, last[n])
                spans.append((n, lo, done))
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
            "basis": ("iterations" if iterations else "steps") if spans else "trace",
        }
    return out


def rank_of(doc: dict[str, Any], path: Path) -> int:
    """distributedInfo.rank, else the number after 'rank'/'worker' in the name, else 0."""
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    m = re.search(r"(?:rank|worker)[-_]?(\d+)", path.name, re.IGNORECASE)
    return int(m.group(1)) if m else 0


SYNC_NAMES = re.compile(
    r"^(?:cuda|hip)(?:DeviceSynchronize|ThreadSynchronize|StreamSynchronize|EventSynchronize"
    r"|Memcpy|Memcpy2D|Memcpy3D|MemcpyToSymbol|MemcpyFromSymbol|Memset)(?:_v\d+)?$"
    r"|^cu(?:CtxSynchronize|StreamSynchronize|EventSynchronize|MemcpyDtoH|MemcpyHtoD)(?:_v\d+)?$"
)


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of [s, e) intervals as a sorted list of disjoint ones (touching ones merge)."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def idle_causes(
    doc: dict[str, Any],
    numbers: dict[tuple[int, int], dict[str, Any]],
    rank: int = 0,
    launch_gap_max_ns: int = 50_000,
) -> dict[tuple[int, int], dict[str, int]]:
    """Idle ns by cause per (rank, device), by a plain loop over the gaps of each window."""
    launch_at: dict[int, int] = {}
    syncs: list[tuple[int, int]] = []
    ops: dict[int, list[tuple[int, int, int | None]]] = defaultdict(list)
    # copies to or from pageable host memory: their async copy call blocks like a sync
    pageable = {
        (ev.get("args") or {}).get("correlation")
        for ev in doc["traceEvents"]
        if isinstance(ev, dict)
        and str(ev.get("cat", "")).lower() in ("gpu_memcpy", "memcpy")
        and re.search(
            r"DtoH \(Device -> Pageable\)|HtoD \(Pageable -> Device\)", str(ev.get("name"))
        )
    }
    for ev in doc["traceEvents"]:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or "ts" not in ev or "dur" not in ev:
            continue
        if ev["ts"] <= 0 or ev["dur"] < 0:
            continue
        cat = str(ev.get("cat", "")).lower()
        start = ns(ev["ts"])
        end = start + ns(ev["dur"])
        args = ev.get("args") or {}
        if cat in GPU_CATS:
            dev = _int(args["device"]) if "device" in args else _int(ev["pid"])
            ops[dev].append((start, end, args.get("correlation")))
        elif cat in LAUNCH_CATS:
            if args.get("correlation") is not None:
                c = args["correlation"]
                launch_at[c] = min(launch_at.get(c, start), start)
            if SYNC_NAMES.match(str(ev.get("name", ""))) or (
                ASYNC_COPY.match(str(ev.get("name", ""))) and args.get("correlation") in pageable
            ):
                syncs.append((start, end))
        elif cat == "cuda_sync":
            syncs.append((start, end))
    out: dict[tuple[int, int], dict[str, int]] = {}
    for dev, dev_ops in ops.items():
        num = numbers[(rank, dev)]
        lo, hi = num["start_ns"], num["end_ns"]
        busy = merge([(max(s, lo), min(e, hi)) for s, e, _c in dev_ops if min(e, hi) > max(s, lo)])
        causes = {"host_wait": 0, "sync": 0, "launch_overhead": 0, "other": 0}
        sync_union = merge(syncs)
        # the window's opening before its first GPU work is a gap too
        edges = [(lo, lo), *busy] if busy and busy[0][0] > lo else busy
        for (_s0, g0), (g1, _e1) in pairwise(edges):
            launches = [launch_at.get(c) for s, _e, c in dev_ops if s == g1 and c is not None]
            known = [t for t in launches if t is not None]
            launched = min(known) if known else None
            in_sync = sum(max(0, min(e, g1) - max(s, g0)) for s, e in sync_union)
            if launched is not None and launched < g0:
                in_sync = 0  # its work was queued before the gap: the sync is not why it idled
            rest = g1 - g0 - in_sync
            causes["sync"] += in_sync
            if launched is not None and launched >= g0:
                causes["launch_overhead" if rest <= launch_gap_max_ns else "host_wait"] += rest
            else:
                causes["other"] += rest
        out[(rank, dev)] = causes
    return out


#: Asynchronous copy calls (blocking when the host memory is pageable).
ASYNC_COPY = re.compile(r"^(?:cuda|hip)MemcpyAsync$")

#: Communication kernels: NCCL/RCCL/MSCCL/NVSHMEM, MoE all-to-all (DeepEP, DeepSeek's
#: `dpsk::ep`, pplx) and custom all-reduce kernels.
COMM = re.compile(
    r"nccl|rccl|msccl|nvshmem|rocshmem|multimem_all_?reduce|(?:one|two)_?shot_all_?reduce"
    r"|cross_device_reduce|custom_?all_?reduce|userbuffers|allreduce_fusion_kernel|lamport"
    r"|::internode::|::intranode::|::internode_ll::|\bdispatchKernel<|\bcombineKernel<",
    re.IGNORECASE,
)


def comm_overlap(
    doc: dict[str, Any], numbers: dict[tuple[int, int], dict[str, Any]], rank: int = 0
) -> dict[tuple[int, int], tuple[int, int]]:
    """(comm_ns, overlapped_comm_ns) per device: NCCL kernels vs other kernels, plain loops."""
    kernels: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)
    for ev in doc["traceEvents"]:
        if (
            not isinstance(ev, dict)
            or ev.get("ph") != "X"
            or str(ev.get("cat", "")).lower() != "kernel"
        ):
            continue
        if "ts" not in ev or "dur" not in ev or ev["ts"] <= 0 or ev["dur"] < 0:
            continue
        args = ev.get("args") or {}
        dev = _int(args["device"]) if "device" in args else _int(ev["pid"])
        start = ns(ev["ts"])
        kernels[dev].append(
            (start, start + ns(ev["dur"]), bool(COMM.search(str(ev.get("name", "")))))
        )
    out = {}
    for dev, ks in kernels.items():
        num = numbers[(rank, dev)]
        lo, hi = num["start_ns"], num["end_ns"]
        cut = [(max(s, lo), min(e, hi), c) for s, e, c in ks if min(e, hi) > max(s, lo)]
        comm = merge([(s, e) for s, e, c in cut if c])
        compute = merge([(s, e) for s, e, c in cut if not c])
        both = 0
        for s1, e1 in comm:
            for s2, e2 in compute:
                both += max(0, min(e1, e2) - max(s1, s2))
        out[(rank, dev)] = (sum(e - s for s, e in comm), both)
    return out


def sample_figures(
    samples: list[dict[str, Any]],
    work: list[tuple[int, int]],
    lo: int,
    hi: int,
    columns: list[str],
    min_share: float = 0.9,
) -> dict[str, Any]:
    """GPU-metric samples over the span [lo, hi), one by one: the samples whose whole period
    lies inside it, those at least `min_share` covered by `work` (the busy ones), and each
    column's mean over both (None where no sample has a value)."""
    merged = merge(work)

    def covered(s: dict[str, Any]) -> int:
        return sum(max(0, min(e, s["end_ns"]) - max(b, s["start_ns"])) for b, e in merged)

    def mean(rows: list[dict[str, Any]], col: str) -> float | None:
        values = [r[col] for r in rows if r[col] is not None]
        return sum(values) / len(values) if values else None

    inside = [s for s in samples if s["start_ns"] >= lo and s["end_ns"] <= hi]
    busy = [s for s in inside if covered(s) >= min_share * (s["end_ns"] - s["start_ns"])]
    out: dict[str, Any] = {"samples": len(inside), "busy_samples": len(busy)}
    for col in columns:
        out[col] = mean(inside, col)
        out[f"busy_{col}"] = mean(busy, col)
    return out
