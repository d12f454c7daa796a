"""issue33: workloads whose memory traffic, fusion-fix savings and start-up cost are known by
construction, for pricing what a fix can reach (issue 33: "prices a fix can reach").

One script, one scenario per process:

    python3 issue33.py SCENARIO OUTDIR [FACTSDIR]
        writes OUTDIR/SCENARIO.json.gz (torch.profiler Chrome trace, gzipped; the *_truth
        scenarios write no trace) and FACTSDIR/facts_SCENARIO.json (FACTSDIR defaults to OUTDIR)
    python3 issue33.py --merge OUT.json IN.json [IN.json ...]
        merges per-scenario facts (or earlier merged files) into one facts file; the facts of
        `startup_*_truth*` processes go under their scenario's `truth_fresh_process`

Steady-state scenarios FIRST time their steps with the profiler off (3 warm-up steps,
`torch.cuda.synchronize()`, 10 timed steps, `torch.cuda.synchronize()`: mean ms/step by host
wall clock between the syncs, plus per-step CUDA-event times); where a fix is priced, the fixed
workload is timed the same way in the same process, in 3 alternating rounds (manual, fused,
manual, fused, ...). THEN they profile: `profile(activities=[CPU, CUDA], schedule(wait=1,
warmup=2, active=3), record_shapes=True)`, `prof.step()` once per step, `export_chrome_trace`,
gzip.

Scenarios (H100 SXM HBM3 peak bandwidth used for ratios: 3.35e12 bytes/s):
  elementwise_roof  4 independent elementwise ops per step on separate 1 GiB bf16 tensors
                    (2**29 elements): torch.add(a, b, out=c), torch.mul(d, 0.5, out=e),
                    torch.add(f, 1.0, out=g), torch.mul(h, k, out=m). No GEMM, no copy kernel.
                    Exact bytes per step = sum over ops of input + output bytes = 10 GiB.
  gelu_manual / gelu_fused
                    8 residual MLP blocks x = x + fc2(act(fc1(x))), Linear(2048, 8192) and
                    Linear(8192, 2048), bf16 weights (model.to(bfloat16), no autocast), 16384
                    tokens per step, MSE loss on out.float(), AdamW(fused=True); act is the
                    hand-written tanh GELU
                    0.5*x*(1+torch.tanh(math.sqrt(2/math.pi)*(x+0.044715*torch.pow(x,3))))
                    or F.gelu(x, approximate="tanh"); both timed in each process (same weights)
  layernorm_manual / layernorm_fused
                    16 residual blocks x = x + Linear(1024, 1024)(norm(x)), bf16 weights,
                    32768 tokens per step, MSE loss, AdamW(fused=True); norm is the hand-written
                    (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True,
                    unbiased=False) + 1e-5) * w + b or F.layer_norm(x, (d,), w, b, 1e-5) over
                    the same w, b; both timed in each process
  startup_steps     a FRESH process: a small conv net (7 conv + BN + ReLU, Linear head), batch
                    64 x 3x128x128, bf16 autocast, AdamW(fused=True), cross_entropy, training,
                    `torch.backends.cudnn.benchmark = True`; model, optimizer and batch are put
                    on the GPU and synchronized, then the profiler is entered with NO warm-up:
                    schedule(wait=0, warmup=0, active=5) (torch writes ProfilerStep# markers
                    only when a schedule is given; this one records from the first iteration),
                    prof.step() per iteration, 5 iterations. Iteration 1 holds cuDNN's
                    autotuning (cudnnFind for every conv shape), cuDNN/cuBLAS handle creation,
                    allocator growth, AdamW state init.
  startup_nosteps   the same net in inference (bf16 weights, eval, no_grad), a plain
                    `with profile(activities=[CPU, CUDA], record_shapes=True)` around 5
                    iterations and NO prof.step(): no ProfilerStep markers, one window.
  startup_steps_truth / startup_nosteps_truth (and *_truth2 .. *_truth9, repeats)
                    the same workloads in a FRESH process WITHOUT the profiler: 12 iterations,
                    each followed by torch.cuda.synchronize() and timed by the host clock;
                    start-up cost = iteration 1 - median(iterations 3..10); then the steady step
                    timed as above (3 warm-up, 10 timed).

The GELU / LayerNorm processes also time the activation / norm alone (forward + backward of one
layer's tensor, profiler off) and count the bytes its aten ops move (a TorchDispatchMode below
autograd: every op's tensor inputs read once + outputs written once), manual and fused.
The merge takes, per start-up scenario, the median over the truth processes, leaving out those
whose iteration 1 took over twice the fastest one's (the first cuDNN user on a fresh machine,
loading cuDNN's libraries from a cold page cache; kept in the facts, listed as cold).

ISSUE33_DRY=1 runs tiny sizes on the CPU (to check the script without a GPU).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

T_PROCESS0 = time.perf_counter()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracefacts  # noqa: E402

T_IMPORTED = time.perf_counter()

DRY = os.environ.get("ISSUE33_DRY") == "1"
DEV = "cpu" if DRY else "cuda"

#: H100 SXM (HBM3) peak memory bandwidth, NVIDIA datasheet.
PEAK_BW = 3.35e12

WARM_STEPS, TIMED_STEPS = 3, 10
WAIT, WARMUP, ACTIVE = 1, 2, 3


def sync() -> None:
    if not DRY:
        torch.cuda.synchronize()


def seed_all(seed: int = 0) -> None:
    torch.manual_seed(seed)
    if not DRY:
        torch.cuda.manual_seed_all(seed)


def env() -> dict[str, Any]:
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
    }
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception:  # pragma: no cover - triton absent
        out["triton"] = None
    if not DRY:
        p = torch.cuda.get_device_properties(0)
        out.update(
            gpu=p.name,
            sms=p.multi_processor_count,
            gpu_mem_gib=round(p.total_memory / 2**30, 1),
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            out["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except Exception:
            out["driver"] = None
    return out


def nbytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a kernel touches (broadcast dims, stride 0, count once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            n *= size
    return n * t.element_size()


# ---------------------------------------------------------------- timing and profiling


def time_steps(step: Callable[[], Any], warm: int = WARM_STEPS, n: int = TIMED_STEPS) -> dict:
    """Profiler off: `warm` steps, sync, `n` steps, sync. Mean by host wall clock between the
    syncs; per-step CUDA-event times as a check (no sync between steps)."""
    for _ in range(warm):
        step()
    sync()
    evs = []
    t0 = time.perf_counter()
    for _ in range(n):
        if not DRY:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            evs.append(e)
        step()
    if not DRY:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        evs.append(e)
    sync()
    t1 = time.perf_counter()
    per = [round(evs[i].elapsed_time(evs[i + 1]), 3) for i in range(len(evs) - 1)]
    res: dict[str, Any] = {
        "warmup_steps": warm,
        "timed_steps": n,
        "step_ms_mean": round((t1 - t0) * 1e3 / n, 3),
        "step_ms_cuda_events": per,
    }
    if per:
        res["step_ms_median_cuda_events"] = round(statistics.median(per), 3)
    print(f"  timed: {res['step_ms_mean']:.3f} ms/step (events {per})", flush=True)
    return res


def time_rounds(steps: dict[str, Callable[[], Any]], rounds: int = 3) -> dict[str, dict]:
    """Time the variants in alternating rounds (3 warm-up steps in the first round, 1 after)
    and pool them: step_ms_mean = mean of the rounds' means."""
    got: dict[str, list[dict]] = {k: [] for k in steps}
    for r in range(rounds):
        for k, fn in steps.items():
            if not DRY:
                torch.cuda.reset_peak_memory_stats()
            res = time_steps(fn, warm=3 if r == 0 else 1)
            if not DRY:
                res["max_mem_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
            got[k].append(res)
    out = {}
    for k, rs in got.items():
        ev = [x for r in rs for x in r["step_ms_cuda_events"]]
        out[k] = {
            "rounds": rs,
            "step_ms_mean": round(sum(r["step_ms_mean"] for r in rs) / len(rs), 3),
            "step_ms_mean_per_round": [r["step_ms_mean"] for r in rs],
            "step_ms_median_cuda_events": round(statistics.median(ev), 3) if ev else None,
            "timed_steps": sum(r["timed_steps"] for r in rs),
            "max_mem_allocated_mib": max((r.get("max_mem_allocated_mib") or 0) for r in rs),
        }
    return out


def export_gz(prof, out_path: str) -> dict[str, Any]:
    tmp = out_path[:-3] if out_path.endswith(".gz") else out_path + ".tmp.json"
    prof.export_chrome_trace(tmp)
    raw = os.path.getsize(tmp)
    with open(tmp, "rb") as src, gzip.open(out_path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(tmp)
    print(f"  trace {out_path}: {os.path.getsize(out_path)} bytes gz", flush=True)
    return {
        "file": os.path.basename(out_path),
        "bytes_json": raw,
        "bytes_gz": os.path.getsize(out_path),
    }


def activities() -> list:
    return [ProfilerActivity.CPU] + ([] if DRY else [ProfilerActivity.CUDA])


def profile_steps(
    step: Callable[[], Any],
    out_path: str,
    wait: int = WAIT,
    warmup: int = WARMUP,
    active: int = ACTIVE,
    **kw,
) -> dict:
    """Profile wait+warmup+active steps (one prof.step() per step); export, gzip."""
    kw.setdefault("record_shapes", True)
    evs, labels = [], []
    n = wait + warmup + active
    with profile(
        activities=activities(),
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        **kw,
    ) as prof:
        for i in range(n):
            if not DRY:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                evs.append(e)
            labels.append("wait" if i < wait else "warmup" if i < wait + warmup else "active")
            step()
            prof.step()
    if not DRY:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        evs.append(e)
    sync()
    res = export_gz(prof, out_path)
    res.update(
        {
            "schedule": {"wait": wait, "warmup": warmup, "active": active},
            "profiler_kwargs": {k: v for k, v in kw.items() if isinstance(v, bool)},
            "step_labels": labels,
            "profiled_step_ms_cuda_events": [
                round(evs[i].elapsed_time(evs[i + 1]), 3) for i in range(len(evs) - 1)
            ],
        }
    )
    return res


# ---------------------------------------------------------------- plain loops over a trace


def _events(path: str) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def top_kernels(path: str, k: int = 8) -> list[dict[str, Any]]:
    """The k kernels with the most total time in the trace (name cut to 120 chars)."""
    agg: dict[str, list[float]] = {}
    for e in _events(path):
        if e.get("cat") == "kernel":
            a = agg.setdefault(e["name"], [0, 0.0])
            a[0] += 1
            a[1] += e["dur"]
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])[:k]
    return [
        {"name": n[:120], "count": c, "ms": round(t / 1e3, 3), "avg_us": round(t / c, 2)}
        for n, (c, t) in rows
    ]


def _launch_ts(ev: list[dict[str, Any]]) -> dict[int, float]:
    return {
        e["args"]["correlation"]: e["ts"]
        for e in ev
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }


def step_kernels(path: str, keep_list: int = 16) -> dict[str, Any]:
    """Per ProfilerStep: the kernels LAUNCHED in it (by correlation id), their summed duration,
    split by tracefacts' coarse class; where a step has at most `keep_list` kernels, their
    durations (µs) in launch order. Plus the mean over the steps."""
    ev = _events(path)
    steps = sorted(
        (
            e
            for e in ev
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
        ),
        key=lambda e: e["ts"],
    )
    lts = _launch_ts(ev)
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    rows = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        mine = sorted(
            (k for k in kernels if lo <= lts.get(k.get("args", {}).get("correlation"), -1.0) < hi),
            key=lambda k: lts[k["args"]["correlation"]],
        )
        by: dict[str, float] = {}
        for k in mine:
            c = tracefacts.kernel_class(k["name"])
            by[c] = by.get(c, 0.0) + k["dur"]
        row: dict[str, Any] = {
            "name": s["name"],
            "host_ms": round(s["dur"] / 1e3, 3),
            "kernels": len(mine),
            "kernel_ms": round(sum(k["dur"] for k in mine) / 1e3, 3),
            "kernel_ms_by_class": {c: round(t / 1e3, 3) for c, t in sorted(by.items())},
        }
        if len(mine) <= keep_list:
            row["kernel_us_in_launch_order"] = [round(k["dur"], 1) for k in mine]
            row["kernel_names_in_launch_order"] = [k["name"][:100] for k in mine]
        rows.append(row)
    n = len(rows) or 1
    classes = sorted({c for r in rows for c in r["kernel_ms_by_class"]})
    return {
        "per_step": rows,
        "kernel_ms_per_step_mean": round(sum(r["kernel_ms"] for r in rows) / n, 3),
        "kernel_ms_per_step_mean_by_class": {
            c: round(sum(r["kernel_ms_by_class"].get(c, 0.0) for r in rows) / n, 3) for c in classes
        },
        "kernels_per_step_mean": round(sum(r["kernels"] for r in rows) / n, 1),
    }


def trace_summary(path: str, with_steps: bool = True) -> dict[str, Any]:
    if DRY:
        return {}
    out: dict[str, Any] = {"top_kernels": top_kernels(path)}
    if with_steps:
        out["tracefacts"] = tracefacts.trace_facts(path)
        out["step_detail"] = tracefacts.step_detail(path)
        out["step_kernels"] = step_kernels(path)
    return out


# ---------------------------------------------------------------- bytes by aten op

try:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
except Exception:  # pragma: no cover
    TorchDispatchMode = object  # type: ignore[assignment,misc]

_NO_TRAFFIC = {
    "view", "_unsafe_view", "t", "transpose", "expand", "detach", "alias", "as_strided",
    "reshape", "_reshape_alias", "squeeze", "unsqueeze", "permute", "select", "slice",
    "lift_fresh", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "split", "split_with_sizes", "unbind", "chunk", "narrow", "view_as", "expand_as",
}  # fmt: skip


class ByteCounter(TorchDispatchMode):  # type: ignore[misc,valid-type]
    """Below autograd: every aten op that runs (forward and backward), with the bytes of its
    tensor inputs (the `out=` destination not counted as read; an in-place op's self read and
    written) and outputs. View/alias/empty ops move nothing and are skipped. This is the traffic
    each op's kernel must move at least (every input read once, every output written once)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name.rstrip("_") in _NO_TRAFFIC or name in _NO_TRAFFIC:
            return out
        dst = kwargs.get("out")
        ins = [
            a
            for a in tree_flatten((args, {k: v for k, v in kwargs.items() if k != "out"}))[0]
            if isinstance(a, torch.Tensor)
        ]
        outs, seen = [], set()
        for o in tree_flatten(out)[0] + ([] if dst is None else tree_flatten(dst)[0]):
            if not isinstance(o, torch.Tensor):
                continue
            key = (o.data_ptr(), tuple(o.shape), tuple(o.stride()), o.dtype)
            if key not in seen:  # an out= op returns its destination: count it once
                seen.add(key)
                outs.append(o)
        self.ops.append((str(func), sum(nbytes(t) for t in ins), sum(nbytes(t) for t in outs)))
        return out

    def summary(self) -> dict[str, Any]:
        agg: dict[str, list[int]] = {}
        for n, bi, bo in self.ops:
            a = agg.setdefault(n, [0, 0, 0])
            a[0] += 1
            a[1] += bi
            a[2] += bo
        return {
            "aten_ops": len(self.ops),
            "bytes_read": sum(b for _, b, _ in self.ops),
            "bytes_written": sum(b for _, _, b in self.ops),
            "bytes_total": sum(bi + bo for _, bi, bo in self.ops),
            "by_op": {
                n: {"calls": c, "bytes_read": bi, "bytes_written": bo}
                for n, (c, bi, bo) in sorted(agg.items())
            },
        }


def count_bytes(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        with ByteCounter() as bc:
            fn()
        sync()
        return bc.summary()
    except Exception as e:  # the count is a check, not the scenario
        return {"error": f"{type(e).__name__}: {e}"}


# ---------------------------------------------------------------- 1. elementwise_roof

EW_NUMEL = 2**20 if DRY else 2**29  # 1 GiB of bf16 per tensor


def elementwise_roof(out: str) -> dict:
    n = EW_NUMEL
    g = torch.Generator(device=DEV)
    g.manual_seed(0)
    bf = torch.bfloat16

    def r():
        return torch.randn(n, device=DEV, dtype=bf, generator=g)

    a, b, d, f, h, k = r(), r(), r(), r(), r(), r()
    c, e, gg, m = (torch.empty(n, device=DEV, dtype=bf) for _ in range(4))
    el = 2  # bytes per bf16 element
    ops: list[tuple[str, Callable[[], Any], int]] = [
        ("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c), 3 * n * el),
        ("torch.mul(d, 0.5, out=e)", lambda: torch.mul(d, 0.5, out=e), 2 * n * el),
        ("torch.add(f, 1.0, out=g)", lambda: torch.add(f, 1.0, out=gg), 2 * n * el),
        ("torch.mul(h, k, out=m)", lambda: torch.mul(h, k, out=m), 3 * n * el),
    ]
    bytes_step = sum(x[2] for x in ops)

    def step():
        for _, fn, _ in ops:
            fn()

    unprof = time_steps(step)
    # each op alone, profiler off: 3 warm-up, 10 back to back between two events
    per_op = []
    for name, fn, nb in ops:
        for _ in range(3):
            fn()
        sync()
        t0 = time.perf_counter()
        if not DRY:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        for _ in range(10):
            fn()
        if not DRY:
            e1.record()
        sync()
        ms = (e0.elapsed_time(e1) if not DRY else (time.perf_counter() - t0) * 1e3) / 10
        per_op.append(
            {
                "op": name,
                "bytes": nb,
                "ms_cuda_events": round(ms, 4),
                "achieved_gbps": round(nb / (ms / 1e3) / 1e9, 1),
                "fraction_of_peak": round(nb / (ms / 1e3) / PEAK_BW, 4),
                "floor_ms_at_peak": round(nb / PEAK_BW * 1e3, 4),
            }
        )
        print(f"  {name}: {ms:.3f} ms, {nb / (ms / 1e3) / 1e9:.0f} GB/s", flush=True)
    counted = count_bytes(step)
    tr = profile_steps(step, out)
    floor_ms = bytes_step / PEAK_BW * 1e3
    step_ms = unprof["step_ms_mean"]
    derived: dict[str, Any] = {
        "bytes_per_step": bytes_step,
        "bytes_per_step_formula": "sum over the 4 ops of (inputs + output) x 2**29 elements x 2 "
        "bytes = (3 + 2 + 2 + 3) GiB",
        "bytes_per_step_by_dispatch_count": counted.get("bytes_total"),
        "floor_ms_at_peak": round(floor_ms, 4),
        "peak_bytes_per_s": PEAK_BW,
        "step_ms_unprofiled": step_ms,
        "achieved_gbps_unprofiled_step": round(bytes_step / (step_ms / 1e3) / 1e9, 1),
        "kernel_ms_sum_of_ops_alone": round(sum(p["ms_cuda_events"] for p in per_op), 4),
    }
    derived["max_saving_ms_unprofiled"] = round(step_ms - floor_ms, 4)
    derived["max_saving_fraction_of_step_unprofiled"] = round((step_ms - floor_ms) / step_ms, 4)
    res = {
        "config": {
            "tensors": "10 separate 1-D bf16 tensors of 2**29 elements (1 GiB each): a, b, d, f, h,"
            " k inputs (randn), c, e, g, m outputs (preallocated)",
            "numel_per_tensor": n,
            "ops_per_step": [x[0] for x in ops],
            "bytes_per_op": [x[2] for x in ops],
            "note": "no GEMM, no copy/cast kernel; the ops share no tensor so nothing can be "
            "fused; each is one vectorized elementwise kernel",
        },
        "unprofiled": unprof,
        "unprofiled_per_op": per_op,
        "bytes_dispatch_count": counted,
        "derived": derived,
        "trace": tr,
    }
    return res


def finish_elementwise(facts: dict[str, Any]) -> None:
    """After the trace summary: kernel time per step from the trace, achieved bandwidth."""
    d = facts["derived"]
    sk = facts["trace"].get("step_kernels")
    if sk:
        kms = sk["kernel_ms_per_step_mean"]
        d["kernel_ms_per_step_trace"] = kms
        d["achieved_gbps_trace"] = round(d["bytes_per_step"] / (kms / 1e3) / 1e9, 1)
        d["fraction_of_peak_trace"] = round(d["bytes_per_step"] / (kms / 1e3) / PEAK_BW, 4)
        d["max_saving_ms_trace"] = round(kms - d["floor_ms_at_peak"], 4)
        d["max_saving_fraction_of_kernel_time_trace"] = round(
            (kms - d["floor_ms_at_peak"]) / kms, 4
        )
    facts["expect"] = (
        "memory-bound (4 elementwise kernels, all the GPU time; achieved "
        f"{d.get('achieved_gbps_trace', d['achieved_gbps_unprofiled_step'])} GB/s of 3350) but "
        "NO meaningful saving: the ops are independent and each already runs near the HBM roof, "
        "so any price for a memory-bound / fusion finding must be at most kernel time - "
        f"bytes/peak: {d.get('max_saving_ms_trace')} ms per step in the trace "
        f"({d.get('kernel_ms_per_step_trace')} ms of kernels - {d['floor_ms_at_peak']} ms), "
        f"{d['max_saving_ms_unprofiled']} ms of the {d['step_ms_unprofiled']} ms unprofiled "
        f"step ({d['max_saving_fraction_of_step_unprofiled'] * 100:.1f} %), and a realistic "
        "fix reaches none of it (~3.0 TB/s is what H100 elementwise kernels attain); no GEMM / "
        "MFU / Tensor Core finding"
    )


# ---------------------------------------------------------------- 2. GELU


def gelu_manual_fn(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def gelu_fused_fn(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


class MLPBlock(nn.Module):
    def __init__(self, d: int, owner: MLPStack) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self._owner = [owner]  # not a submodule

    def forward(self, x):
        act = self._owner[0].act
        return x + self.fc2(act(self.fc1(x)))


class MLPStack(nn.Module):
    def __init__(self, layers: int, d: int) -> None:
        super().__init__()
        self.act: Callable[[torch.Tensor], torch.Tensor] = gelu_manual_fn
        self.blocks = nn.ModuleList([MLPBlock(d, self) for _ in range(layers)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def make_train(model: nn.Module, xs, ys):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not DRY)
    it = {"i": 0}

    def step():
        i = it["i"] % len(xs)
        it["i"] += 1
        loss = F.mse_loss(model(xs[i]).float(), ys[i])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def act_alone(fn, shape, dtype, w_shape=None) -> dict[str, Any]:
    """One activation/norm, forward + backward alone, profiler off: 3 warm-up, 10 timed between
    two CUDA events (synced before and after); plus its bytes by aten op (ByteCounter)."""
    g = torch.Generator(device=DEV)
    g.manual_seed(3)
    x = torch.randn(*shape, device=DEV, dtype=dtype, generator=g).requires_grad_(True)
    gy = torch.randn(*shape, device=DEV, dtype=dtype, generator=g)
    params = []
    if w_shape is not None:
        params = [
            torch.ones(w_shape, device=DEV, dtype=dtype).requires_grad_(True),
            torch.zeros(w_shape, device=DEV, dtype=dtype).requires_grad_(True),
        ]

    def once():
        y = fn(x, *params)
        y.backward(gy)
        x.grad = None
        for p in params:
            p.grad = None

    def fwd():
        with torch.no_grad():
            fn(x, *params)

    res: dict[str, Any] = {}
    for label, f in (("fwd_bwd", once), ("fwd", fwd)):
        for _ in range(3):
            f()
        sync()
        t0 = time.perf_counter()
        if not DRY:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        for _ in range(10):
            f()
        if not DRY:
            e1.record()
        sync()
        ms = (e0.elapsed_time(e1) if not DRY else (time.perf_counter() - t0) * 1e3) / 10
        res[label + "_ms"] = round(ms, 4)
    res["bytes_fwd_bwd"] = count_bytes(once)
    res["bytes_fwd"] = count_bytes(fwd)
    return res


def fusion_pair(
    kind: str, variant: str, out: str, model: nn.Module, set_variant, xs, ys, act_shape, fns,
    w_shape=None,
) -> dict:  # fmt: skip
    """Time manual and fused in alternating rounds (same weights), time the activation/norm
    alone, count its bytes, then profile `variant`."""
    step = make_train(model, xs, ys)

    def as_variant(v):
        def s():
            set_variant(v)
            return step()

        return s

    timings = time_rounds({"manual": as_variant("manual"), "fused": as_variant("fused")})
    alone = {v: act_alone(fns[v], act_shape, torch.bfloat16, w_shape) for v in ("manual", "fused")}
    set_variant(variant)
    tr = profile_steps(step, out)
    a, b = timings["manual"]["step_ms_mean"], timings["fused"]["step_ms_mean"]
    layers = len(model.blocks)
    derived: dict[str, Any] = {
        "step_ms_manual": a,
        "step_ms_fused": b,
        "fix_saves_ms_per_step": round(a - b, 3),
        "fix_saves_fraction_of_manual_step": round((a - b) / a, 4),
        "step_ms_median_manual": timings["manual"]["step_ms_median_cuda_events"],
        "step_ms_median_fused": timings["fused"]["step_ms_median_cuda_events"],
        "fix_saves_ms_per_step_medians": round(
            (timings["manual"]["step_ms_median_cuda_events"] or 0)
            - (timings["fused"]["step_ms_median_cuda_events"] or 0),
            3,
        ),
        "max_mem_allocated_mib_manual": timings["manual"]["max_mem_allocated_mib"],
        "max_mem_allocated_mib_fused": timings["fused"]["max_mem_allocated_mib"],
        "layers": layers,
        f"{kind}_tensor_shape": list(act_shape),
        f"{kind}_tensor_bytes_bf16": math.prod(act_shape) * 2,
    }
    bm = alone["manual"]["bytes_fwd_bwd"].get("bytes_total")
    bf = alone["fused"]["bytes_fwd_bwd"].get("bytes_total")
    if bm and bf:
        extra = (bm - bf) * layers
        derived.update(
            {
                f"{kind}_bytes_fwd_bwd_per_layer_manual": bm,
                f"{kind}_bytes_fwd_bwd_per_layer_fused": bf,
                f"{kind}_passes_fwd_bwd_manual": round(bm / (math.prod(act_shape) * 2), 2),
                f"{kind}_passes_fwd_bwd_fused": round(bf / (math.prod(act_shape) * 2), 2),
                "extra_bytes_per_step": extra,
                "extra_bytes_per_step_formula": f"layers x (bytes moved by the manual {kind}'s "
                "aten ops, forward + backward, minus the fused op's), counted per op as inputs "
                "read + outputs written (ByteCounter)",
                "extra_bytes_floor_ms_at_peak": round(extra / PEAK_BW * 1e3, 3),
            }
        )
    am, af = alone["manual"]["fwd_bwd_ms"], alone["fused"]["fwd_bwd_ms"]
    derived[f"{kind}_alone_fwd_bwd_ms_manual"] = am
    derived[f"{kind}_alone_fwd_bwd_ms_fused"] = af
    derived[f"{kind}_alone_saving_x_layers_ms"] = round((am - af) * layers, 3)
    print(f"  {kind}: manual {a:.2f} ms, fused {b:.2f} ms, saves {a - b:.2f}", flush=True)
    return {
        "unprofiled": timings[variant],
        "unprofiled_both": timings,
        f"{kind}_alone": alone,
        "derived": derived,
        "trace": tr,
    }


GELU_LAYERS, GELU_D, GELU_TOKENS = (2, 64, 256) if DRY else (8, 2048, 16384)


def gelu(variant: str, out: str) -> dict:
    seed_all(0)
    model = MLPStack(GELU_LAYERS, GELU_D).to(DEV).to(torch.bfloat16)
    g = torch.Generator(device=DEV)
    g.manual_seed(5)
    xs = [
        torch.randn(GELU_TOKENS, GELU_D, device=DEV, dtype=torch.bfloat16, generator=g)
        for _ in range(2)
    ]
    ys = [torch.randn(GELU_TOKENS, GELU_D, device=DEV, generator=g) for _ in range(2)]
    fns = {"manual": gelu_manual_fn, "fused": gelu_fused_fn}

    def set_variant(v):
        model.act = fns[v]

    res = fusion_pair(
        "gelu", variant, out, model, set_variant, xs, ys, (GELU_TOKENS, 4 * GELU_D), fns
    )
    res["config"] = {
        "model": f"{GELU_LAYERS} x [x = x + fc2(act(fc1(x)))], fc1 Linear({GELU_D}, "
        f"{4 * GELU_D}), fc2 Linear({4 * GELU_D}, {GELU_D})",
        "params": sum(p.numel() for p in model.parameters()),
        "tokens_per_step": GELU_TOKENS,
        "precision": "bf16 weights and activations (model.to(bfloat16)), no autocast; loss "
        "F.mse_loss(out.float(), y fp32)",
        "optimizer": "AdamW(lr=1e-4, fused=True)",
        "manual_code": "0.5*x*(1+torch.tanh(math.sqrt(2/math.pi)*(x+0.044715*torch.pow(x,3))))",
        "fused_code": 'F.gelu(x, approximate="tanh")',
        "this_trace_activation": variant,
        "note": "both variants timed in this process over the same weights, in alternating "
        "rounds; the trace holds only this_trace_activation",
    }
    return res


# ---------------------------------------------------------------- 3. LayerNorm


def ln_manual_fn(x, w, b):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(
        x.var(-1, keepdim=True, unbiased=False) + 1e-5
    ) * w + b


def ln_fused_fn(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


class NormBlock(nn.Module):
    def __init__(self, d: int, owner: NormStack) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        self.lin = nn.Linear(d, d)
        self._owner = [owner]

    def forward(self, x):
        return x + self.lin(self._owner[0].norm(x, self.w, self.b))


class NormStack(nn.Module):
    def __init__(self, layers: int, d: int) -> None:
        super().__init__()
        self.norm = ln_manual_fn
        self.blocks = nn.ModuleList([NormBlock(d, self) for _ in range(layers)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


LN_LAYERS, LN_D, LN_TOKENS = (2, 64, 256) if DRY else (16, 1024, 32768)


def layernorm(variant: str, out: str) -> dict:
    seed_all(0)
    model = NormStack(LN_LAYERS, LN_D).to(DEV).to(torch.bfloat16)
    g = torch.Generator(device=DEV)
    g.manual_seed(6)
    xs = [
        torch.randn(LN_TOKENS, LN_D, device=DEV, dtype=torch.bfloat16, generator=g)
        for _ in range(2)
    ]
    ys = [torch.randn(LN_TOKENS, LN_D, device=DEV, generator=g) for _ in range(2)]
    fns = {"manual": ln_manual_fn, "fused": ln_fused_fn}

    def set_variant(v):
        model.norm = fns[v]

    res = fusion_pair(
        "norm", variant, out, model, set_variant, xs, ys, (LN_TOKENS, LN_D), fns, w_shape=(LN_D,)
    )
    res["config"] = {
        "model": f"{LN_LAYERS} x [x = x + Linear({LN_D}, {LN_D})(norm(x, w, b))], w, b "
        f"parameters of shape ({LN_D},)",
        "params": sum(p.numel() for p in model.parameters()),
        "tokens_per_step": LN_TOKENS,
        "precision": "bf16 weights and activations (model.to(bfloat16)), no autocast; loss "
        "F.mse_loss(out.float(), y fp32)",
        "optimizer": "AdamW(lr=1e-4, fused=True)",
        "manual_code": "(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, "
        "unbiased=False) + 1e-5) * w + b",
        "fused_code": "F.layer_norm(x, (d,), w, b, 1e-5)",
        "this_trace_norm": variant,
        "note": "both variants timed in this process over the same weights, in alternating "
        "rounds; the trace holds only this_trace_norm",
    }
    return res


def finish_fusion(facts: dict[str, Any], kind: str, variant: str) -> None:
    d = facts["derived"]
    sk = facts["trace"].get("step_kernels")
    if sk:
        d["kernel_ms_per_step_trace"] = sk["kernel_ms_per_step_mean"]
        d["kernel_ms_per_step_trace_by_class"] = sk["kernel_ms_per_step_mean_by_class"]
        d["kernels_per_step_trace"] = sk["kernels_per_step_mean"]
    fix = "F.gelu(x, approximate='tanh')" if kind == "gelu" else "F.layer_norm"
    what = "hand-written tanh GELU" if kind == "gelu" else "hand-written LayerNorm"
    if variant == "manual":
        facts["expect"] = (
            f"memory-bound elementwise/reduction work from the {what} (many small-arithmetic "
            f"kernels over the {d[kind + '_tensor_shape']} bf16 tensor per layer, forward and "
            f"backward); a fusion finding priced near the measured saving of {fix}: "
            f"{d['fix_saves_ms_per_step']} ms per step ({d['step_ms_manual']} -> "
            f"{d['step_ms_fused']} ms unprofiled, "
            f"{d['fix_saves_fraction_of_manual_step'] * 100:.0f} % of the step)"
        )
    else:
        facts["expect"] = (
            f"the fixed variant ({fix}): no hand-written-{kind} fusion finding; any remaining "
            "memory-bound price must be small (the step is "
            f"{d['step_ms_fused']} ms vs {d['step_ms_manual']} ms with the {what})"
        )


# ---------------------------------------------------------------- 4/5. start-up

CONV_B, CONV_HW, CONV_C = (4, 32, 8) if DRY else (64, 128, 64)
STARTUP_ITERS = 5
TRUTH_ITERS = 12


class ConvNet(nn.Module):
    def __init__(self, c: int = CONV_C, classes: int = 100) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, c, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        ]
        for ci, co, s in ((1, 1, 1), (1, 2, 2), (2, 2, 1), (2, 4, 2), (4, 4, 1), (4, 8, 2)):
            layers += [
                nn.Conv2d(ci * c, co * c, 3, stride=s, padding=1, bias=False),
                nn.BatchNorm2d(co * c),
                nn.ReLU(inplace=True),
            ]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(8 * c, classes)

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def build_startup(train: bool):
    """Model, batch and one iteration on the device; nothing run yet."""
    torch.backends.cudnn.benchmark = True
    seed_all(0)
    model = ConvNet().to(DEV)
    g = torch.Generator(device=DEV)
    g.manual_seed(9)
    if train:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=not DRY)
        x = torch.randn(CONV_B, 3, CONV_HW, CONV_HW, device=DEV, generator=g)
        y = torch.randint(0, 100, (CONV_B,), device=DEV, generator=g)

        def step():
            with torch.autocast(DEV, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

    else:
        model = model.to(torch.bfloat16).eval()
        x = torch.randn(CONV_B, 3, CONV_HW, CONV_HW, device=DEV, generator=g).to(torch.bfloat16)

        @torch.no_grad()
        def step():
            return model(x).argmax(-1)

    cfg = {
        "model": "ConvNet: Conv2d(3, 64, 7, s2, p3) + BN + ReLU + MaxPool(3, s2, p1), then 6 x "
        "[Conv2d 3x3 + BN + ReLU] with channels 64->64->128 (s2)->128->256 (s2)->256->512 (s2), "
        "adaptive avg pool, Linear(512, 100)",
        "params": sum(p.numel() for p in model.parameters()),
        "input": [CONV_B, 3, CONV_HW, CONV_HW],
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "mode": "training: bf16 autocast, fp32 weights, cross_entropy, AdamW(lr=1e-3, fused=True)"
        if train
        else "inference: bf16 weights and input, eval(), torch.no_grad(), argmax",
        "before_the_profiler": "model built and moved to the GPU, optimizer built, batch made "
        "on the GPU, torch.cuda.synchronize(); no iteration run",
    }
    return step, cfg


def startup(with_steps: bool, out: str) -> dict:
    t_build0 = time.perf_counter()
    step, cfg = build_startup(train=with_steps)
    sync()
    t_built = time.perf_counter()
    n = STARTUP_ITERS
    evs, host_ms = [], []
    if with_steps:
        ctx = profile(
            activities=activities(),
            schedule=schedule(wait=0, warmup=0, active=n, repeat=1),
            record_shapes=True,
        )
    else:
        ctx = profile(activities=activities(), record_shapes=True)
    t_enter = time.perf_counter()
    with ctx as prof:
        t_entered = time.perf_counter()
        for _ in range(n):
            if not DRY:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                evs.append(e)
            t0 = time.perf_counter()
            step()
            host_ms.append(round((time.perf_counter() - t0) * 1e3, 3))
            if with_steps:
                prof.step()
        if not DRY:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            evs.append(e)
    t_exit = time.perf_counter()
    sync()
    tr = export_gz(prof, out)
    tr.update(
        {
            "schedule": {"wait": 0, "warmup": 0, "active": n} if with_steps else None,
            "prof_step_called": with_steps,
            "iterations": n,
            "profiled_iteration_ms_cuda_events": [
                round(evs[i].elapsed_time(evs[i + 1]), 3) for i in range(len(evs) - 1)
            ],
            "profiled_iteration_host_ms_no_sync": host_ms,
            "profiler_enter_ms": round((t_entered - t_enter) * 1e3, 3),
            "profiled_block_host_ms": round((t_exit - t_enter) * 1e3, 3),
            "process_ms_before_build": round((t_build0 - T_PROCESS0) * 1e3, 1),
            "build_and_upload_ms": round((t_built - t_build0) * 1e3, 1),
        }
    )
    print(f"  profiled iterations (events): {tr['profiled_iteration_ms_cuda_events']}", flush=True)
    cfg["profiler"] = (
        f"profile(activities=[CPU, CUDA], schedule=schedule(wait=0, warmup=0, active={n}, "
        "repeat=1), record_shapes=True), prof.step() after each iteration"
        if with_steps
        else "profile(activities=[CPU, CUDA], record_shapes=True) around the loop, no schedule, "
        "no prof.step(): no ProfilerStep markers"
    )
    return {"config": cfg, "trace": tr}


def startup_truth(with_steps: bool) -> dict:
    t_build0 = time.perf_counter()
    step, cfg = build_startup(train=with_steps)
    sync()
    t_built = time.perf_counter()
    iters = []
    for _ in range(TRUTH_ITERS):
        t0 = time.perf_counter()
        step()
        sync()
        iters.append(round((time.perf_counter() - t0) * 1e3, 3))
    med = statistics.median(iters[2:10])
    steady = time_steps(step)
    derived = {
        "iteration_ms_synced": iters,
        "iteration1_ms": iters[0],
        "iteration2_ms": iters[1],
        "median_iterations_3_10_ms": round(med, 3),
        "startup_ms": round(iters[0] - med, 3),
        "startup_ms_formula": "iteration 1 - median(iterations 3..10), each iteration followed "
        "by torch.cuda.synchronize(), host clock, no profiler",
        "steady_step_ms": steady["step_ms_mean"],
        "expected_window_ms_5_iterations": round(iters[0] + 4 * steady["step_ms_mean"], 3),
        "startup_share_of_5_iteration_window": round(
            (iters[0] - med) / (iters[0] + 4 * steady["step_ms_mean"]), 4
        ),
        "process_ms_before_build": round((t_build0 - T_PROCESS0) * 1e3, 1),
        "import_torch_ms": round((T_IMPORTED - T_PROCESS0) * 1e3, 1),
        "build_and_upload_ms": round((t_built - t_build0) * 1e3, 1),
    }
    print(
        f"  truth: iteration 1 {iters[0]} ms, median 3..10 {med:.3f} ms, start-up "
        f"{iters[0] - med:.1f} ms, steady {steady['step_ms_mean']} ms",
        flush=True,
    )
    return {"config": cfg, "unprofiled": steady, "derived": derived}


CONV_OPS = ("aten::cudnn_convolution", "aten::convolution_backward")


def startup_facts(path: str) -> dict[str, Any]:
    """Plain loops: iterations are delimited by the stem convolution (`aten::conv2d` whose first
    input is [B, 3, H, W]; nested autocast re-dispatches dropped). For each iteration: host span,
    runtime/driver calls (count, ms) by name, kernels launched in it (count, GPU ms),
    cudaMalloc/cudaFree calls; for iteration 1 the longest runtime/driver calls and CPU ops."""
    ev = sorted(_events(path), key=lambda e: e["ts"])
    stem_dims = [CONV_B, 3, CONV_HW, CONV_HW]
    stems: list[dict] = []
    for e in ev:
        if e.get("cat") != "cpu_op" or e["name"] != "aten::conv2d":
            continue
        dims = e.get("args", {}).get("Input Dims") or [[]]
        if dims and dims[0] == stem_dims:
            if stems and e["ts"] < stems[-1]["ts"] + stems[-1]["dur"]:
                continue  # nested (autocast re-dispatch)
            stems.append(e)
    end = max(e["ts"] + e["dur"] for e in ev)
    first_ts = min(e["ts"] for e in ev)
    bounds = [s["ts"] for s in stems] + [end]
    runtime = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    lts = _launch_ts(ev)
    gpu = [e for e in ev if e.get("cat") in tracefacts.GPU_CATS]
    cpu_ops = [e for e in ev if e.get("cat") == "cpu_op"]
    iters = []
    for i in range(len(stems)):
        lo, hi = bounds[i], bounds[i + 1]
        calls = [e for e in runtime if lo <= e["ts"] < hi]
        by: dict[str, list[float]] = {}
        for c in calls:
            a = by.setdefault(c["name"], [0, 0.0])
            a[0] += 1
            a[1] += c["dur"]
        mine = [g for g in gpu if lo <= lts.get(g.get("args", {}).get("correlation"), -1.0) < hi]
        row: dict[str, Any] = {
            "iteration": i + 1,
            "host_span_ms": round((hi - lo) / 1e3, 3),
            "runtime_calls": len(calls),
            "runtime_ms": round(sum(c["dur"] for c in calls) / 1e3, 3),
            "runtime_by_name": {
                n: {"count": c, "ms": round(t / 1e3, 3)}
                for n, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:12]
            },
            "kernels_launched": sum(1 for g in mine if g["cat"] == "kernel"),
            "gpu_ms_launched": round(sum(g["dur"] for g in mine) / 1e3, 3),
        }
        conv = [e for e in cpu_ops if lo <= e["ts"] < hi and e["name"] in CONV_OPS]
        row["cudnn_conv_ops"] = len(conv)
        row["cudnn_conv_ops_ms"] = round(sum(e["dur"] for e in conv) / 1e3, 3)
        if i == 0:
            row["longest_runtime_calls"] = [
                {
                    "name": c["name"],
                    "ms": round(c["dur"] / 1e3, 3),
                    "at_ms_into_iteration": round((c["ts"] - lo) / 1e3, 3),
                }
                for c in sorted(calls, key=lambda c: -c["dur"])[:15]
            ]
            ops1 = [e for e in cpu_ops if lo <= e["ts"] < hi]
            row["longest_cpu_ops"] = [
                {
                    "name": e["name"],
                    "ms": round(e["dur"] / 1e3, 3),
                    "input_dims": (e.get("args", {}).get("Input Dims") or [])[:2],
                }
                for e in sorted(ops1, key=lambda e: -e["dur"])[:15]
            ]
        iters.append(row)
    longest = sorted(runtime, key=lambda c: -c["dur"])[:15]

    def which(ts):
        for i in range(len(stems)):
            if bounds[i] <= ts < bounds[i + 1]:
                return i + 1
        return 0  # before the first iteration

    return {
        "iterations_found": len(stems),
        "iteration_delimiter": f"aten::conv2d with Input Dims[0] == {stem_dims}",
        "window_ms": round((end - first_ts) / 1e3, 3),
        "before_first_iteration_ms": round((bounds[0] - first_ts) / 1e3, 3) if stems else None,
        "per_iteration": iters,
        "longest_runtime_calls_in_trace": [
            {"name": c["name"], "ms": round(c["dur"] / 1e3, 3), "iteration": which(c["ts"])}
            for c in longest
        ],
        "profiler_steps": [
            {"name": e["name"], "ms": round(e["dur"] / 1e3, 3)}
            for e in ev
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
        ],
    }


# ---------------------------------------------------------------- main

SCENARIOS: dict[str, Callable[[str], dict]] = {
    "elementwise_roof": elementwise_roof,
    "gelu_manual": lambda o: gelu("manual", o),
    "gelu_fused": lambda o: gelu("fused", o),
    "layernorm_manual": lambda o: layernorm("manual", o),
    "layernorm_fused": lambda o: layernorm("fused", o),
    "startup_steps": lambda o: startup(True, o),
    "startup_nosteps": lambda o: startup(False, o),
    "startup_steps_truth": lambda o: startup_truth(True),
    "startup_nosteps_truth": lambda o: startup_truth(False),
}
# repeats of the truth processes: startup_steps_truth2, startup_nosteps_truth3, ...
for _i in range(2, 10):
    SCENARIOS[f"startup_steps_truth{_i}"] = SCENARIOS["startup_steps_truth"]
    SCENARIOS[f"startup_nosteps_truth{_i}"] = SCENARIOS["startup_nosteps_truth"]

NO_TRACE = {s for s in SCENARIOS if "_truth" in s}


def finish(name: str, facts: dict[str, Any], out: str) -> None:
    if name in NO_TRACE:
        return
    if not os.path.exists(out):
        return
    if name.startswith("startup_"):
        facts["trace"].update(trace_summary(out, with_steps=name == "startup_steps"))
        facts["trace"]["startup_facts"] = startup_facts(out)
        return
    facts["trace"].update(trace_summary(out))
    if name == "elementwise_roof":
        finish_elementwise(facts)
    elif name.startswith("gelu_"):
        finish_fusion(facts, "gelu", name.split("_")[1])
    elif name.startswith("layernorm_"):
        finish_fusion(facts, "norm", name.split("_")[1])


STARTUP_EXPECT = {
    "startup_steps": "the first ProfilerStep holds one-time start-up (cuDNN autotuning of every "
    "convolution under cudnn.benchmark: the first aten::cudnn_convolution / "
    "convolution_backward calls, many trial kernels, cudaMalloc of workspaces, cuDNN/cuBLAS "
    "handle creation, module loads); a correct analysis names it as start-up / warm-up "
    "(ProfilerStep#0 far longer than the rest), and steady-state per-step prices must NOT "
    "include it (judge the later steps, or say that the first is an outlier); the measured "
    "start-up cost is truth_fresh_process...startup_ms, the steady step steady_step_ms",
    "startup_nosteps": "no ProfilerStep markers: the trace is ONE window of 5 inference "
    "iterations whose first holds the start-up (cuDNN autotuning under cudnn.benchmark: the "
    "first aten::cudnn_convolution calls, trial kernels, cudaMalloc); a correct analysis names "
    "the start-up and states prices over the window (ms in the window, share of the window), "
    "NOT per step; steady-state prices must not include the start-up",
}


def merge(out_path: str, inputs: list[str]) -> None:
    merged: dict[str, Any] = {
        "issue": 33,
        "env": None,
        "peak_hbm_bytes_per_s_h100_sxm": PEAK_BW,
        "scenarios": {},
        "failed": {},
    }
    if os.path.exists(out_path):
        with open(out_path) as f:
            merged = json.load(f)
    truths = []
    for p in inputs:
        with open(p) as f:
            d = json.load(f)
        if "scenarios" in d:  # an earlier merged file
            merged["scenarios"].update(d["scenarios"])
            merged.setdefault("failed", {}).update(d.get("failed", {}))
            merged["env"] = merged.get("env") or d.get("env")
            continue
        name = d["scenario"]
        merged["env"] = merged.get("env") or d.get("env")
        if d.get("error"):
            merged.setdefault("failed", {})[name] = d["error"]
        elif "_truth" in name:
            truths.append(d)
        else:
            merged["scenarios"][name] = {k: v for k, v in d.items() if k not in ("env",)}
            merged.get("failed", {}).pop(name, None)
    for d in sorted(truths, key=lambda d: d["scenario"]):
        base = d["scenario"].split("_truth")[0]
        sc = merged["scenarios"].setdefault(base, {"scenario": base})
        sc.setdefault("truth_fresh_process", {})[d["scenario"]] = {
            k: v for k, v in d.items() if k not in ("env", "scenario")
        }
        merged.get("failed", {}).pop(d["scenario"], None)
    for base, sc in merged["scenarios"].items():
        tf = sc.get("truth_fresh_process")
        if not tf:
            continue
        names = sorted(tf, key=lambda k: tf[k].get("recorded_at_unix", 0))
        every = {k: tf[k]["derived"] for k in names}
        # A process whose iteration 1 took over twice the fastest one's loaded cuDNN's
        # libraries (~480 MB of .so) from a cold page cache: the first cuDNN user on a fresh
        # machine. Kept, but out of the start-up median (the traces were recorded warm).
        fastest = min(r["iteration1_ms"] for r in every.values())
        cold = [k for k, r in every.items() if r["iteration1_ms"] > 2 * fastest]
        warm = {k: r for k, r in every.items() if k not in cold}

        def med(key: str, runs: dict[str, dict]) -> float:
            return round(statistics.median(r[key] for r in runs.values()), 3)

        def each(key: str, every: dict[str, dict] = every) -> dict[str, float]:
            return {k: r[key] for k, r in every.items()}

        sc["derived"] = {
            "startup_ms": med("startup_ms", warm),
            "startup_ms_formula": "median over the warm fresh truth processes of (iteration 1 "
            "- median(iterations 3..10)), each iteration synchronized, no profiler",
            "startup_ms_per_truth_process": each("startup_ms"),
            "truth_processes_cold_page_cache": cold,
            "cold_rule": "iteration 1 over twice the fastest truth process's: the first process "
            "on a fresh machine to load cuDNN's libraries from disk; out of the medians",
            "iteration1_ms": med("iteration1_ms", warm),
            "iteration1_ms_per_truth_process": each("iteration1_ms"),
            "median_iterations_3_10_ms": med("median_iterations_3_10_ms", every),
            "steady_step_ms": med("steady_step_ms", every),
            "steady_step_ms_per_truth_process": each("steady_step_ms"),
            "truth_processes_in_run_order": names,
        }
        if cold:
            sc["derived"]["startup_ms_cold_page_cache"] = med(
                "startup_ms", {k: every[k] for k in cold}
            )
        d = sc["derived"]
        d["expected_window_ms_5_iterations"] = round(
            d["iteration1_ms"] + 4 * d["steady_step_ms"], 3
        )
        d["startup_share_of_5_iteration_window"] = round(
            d["startup_ms"] / d["expected_window_ms_5_iterations"], 4
        )
        if base in STARTUP_EXPECT:
            sc["expect"] = STARTUP_EXPECT[base] + (
                f"; measured (median of {len(warm)} warm fresh processes): start-up "
                f"{d['startup_ms']} ms, steady step {d['steady_step_ms']} ms"
            )
    with open(out_path, "w") as f:
        json.dump(merged, f, indent=1, sort_keys=True)
    print(f"merged {len(inputs)} file(s) into {out_path}: {sorted(merged['scenarios'])}")


def main() -> int:
    if sys.argv[1] == "--merge":
        merge(sys.argv[2], sys.argv[3:])
        return 0
    name, outdir = sys.argv[1], sys.argv[2]
    factsdir = sys.argv[3] if len(sys.argv) > 3 else outdir
    os.makedirs(outdir, exist_ok=True)
    os.makedirs(factsdir, exist_ok=True)
    out = os.path.join(outdir, name + ".json.gz")
    facts: dict[str, Any] = {"scenario": name, "env": env()}
    rc = 0
    t0 = time.perf_counter()
    try:
        facts.update(SCENARIOS[name](out))
        finish(name, facts, out)
    except Exception as e:  # keep a record of what failed; the driver goes on
        import traceback

        traceback.print_exc()
        facts["error"] = f"{type(e).__name__}: {e}"
        rc = 1
    facts["process_wall_s"] = round(time.perf_counter() - t0, 1)
    facts["recorded_at_unix"] = round(time.time(), 1)
    with open(os.path.join(factsdir, f"facts_{name}.json"), "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
    short = {k: facts.get(k) for k in ("derived", "error")}
    if isinstance(short.get("derived"), dict):
        short["derived"] = {
            k: v for k, v in short["derived"].items() if not isinstance(v, (list, dict))
        }
    print("FACT " + json.dumps({"scenario": name, **short}, sort_keys=True), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
