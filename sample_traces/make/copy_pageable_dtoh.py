"""copy_pageable_dtoh: every step computes on the GPU, then brings a large result to the host with
`.cpu()` into pageable memory (a fresh 256 MiB tensor each step), so the host waits for a slow
pageable device-to-host copy and the GPU idles meanwhile; the same trace also holds, each step,
a small copy into a pinned buffer, so it measures its own pinned link speed.

Each step: h = a; 6 x h = torch.mm(h, b) (bf16, 8192 x 8192, b scaled by 1/sqrt(8192) so the
values stay finite; ~8 ms of GEMMs), res = h.float() (256 MiB fp32), then
  pitfall  out = res.cpu()                      (pageable: cudaMemcpyAsync DtoH + a host wait)
           small_pinned.copy_(res[:1024], non_blocking=True)   (32 MiB into a pinned buffer)
  fixed    two result buffers and two pinned 256 MiB host buffers (torch.empty(pin_memory=True)),
           alternating: step i writes res_buf[i % 2] on the compute stream, then a copy stream
           waits for it and runs pinned[i % 2].copy_(res_buf[i % 2], non_blocking=True); step i+1
           computes while the copy runs; before buffer k is reused, the host waits for its copy
           event (the host gets every result). The same small pinned copy is made.
Timed WITHOUT the profiler (3 warm-up steps, synchronize, 10 steps, synchronize, mean ms per
step; 2 rounds interleaved), plus the bare copy speeds (one 256 MiB copy DtoH pageable and
pinned, 5 each). Then the pitfall is profiled: 2 un-profiled steps, profile(activities=[CPU,
CUDA], schedule(wait=1, warmup=2, active=3), record_shapes=True): ProfilerStep#3..#5.

Expected: a pageable-copy finding (Memcpy DtoH Device -> Pageable, 256 MiB per step, at a fraction
of the pinned speed the same trace shows); the copy itself is a GPU activity, so the timeline
looks busy while the SMs idle and the host waits in cudaMemcpyAsync; the fix (pinned +
non_blocking on a side stream, overlapped) saves about pitfall - fixed per step.

usage: python3 copy_pageable_dtoh.py OUTDIR   (writes OUTDIR/copy_pageable_dtoh.json.gz)
"""

from __future__ import annotations

import os
import sys
import time

import common as C
import torch
import tracefacts

N = 8192
GEMMS = 6
SMALL_ROWS = 1024
WARMUP, TIMED, ROUNDS = 3, 10, 2


class Work:
    def __init__(self) -> None:
        g = torch.Generator(device="cuda")
        g.manual_seed(0)
        self.a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16, generator=g)
        self.b = (torch.randn(N, N, device="cuda", dtype=torch.bfloat16, generator=g) / N**0.5).to(
            torch.bfloat16
        )
        self.small_pinned = torch.empty(SMALL_ROWS, N, dtype=torch.float32, pin_memory=True)
        self.res_buf = [torch.empty(N, N, device="cuda") for _ in range(2)]
        self.pinned = [torch.empty(N, N, dtype=torch.float32, pin_memory=True) for _ in range(2)]
        self.done = [None, None]
        self.copy_stream = torch.cuda.Stream()
        self.i = 0
        self.sink = 0.0

    def compute(self) -> torch.Tensor:
        h = self.a
        for _ in range(GEMMS):
            h = torch.mm(h, self.b)
        return h

    def pitfall(self) -> None:
        res = self.compute().float()
        out = res.cpu()
        self.small_pinned.copy_(res[:SMALL_ROWS], non_blocking=True)
        self.sink += float(out[0, 0])

    def fixed(self) -> None:
        k = self.i % 2
        self.i += 1
        if self.done[k] is not None:
            self.done[k].synchronize()  # the host has pinned[k] (the result of step i-2)
            self.sink += float(self.pinned[k][0, 0])
        h = self.compute()
        self.res_buf[k].copy_(h)  # the fp32 cast, into the buffer the copy stream reads
        self.small_pinned.copy_(self.res_buf[k][:SMALL_ROWS], non_blocking=True)
        self.copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copy_stream):
            self.pinned[k].copy_(self.res_buf[k], non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(self.copy_stream)
        self.done[k] = ev  # res_buf[k] is written again only after the host waited for ev

    def drain(self) -> None:
        for ev in self.done:
            if ev is not None:
                ev.synchronize()
        torch.cuda.synchronize()


def time_steps(fn, drain) -> float:
    for _ in range(WARMUP):
        fn()
    drain()
    t0 = time.perf_counter()
    for _ in range(TIMED):
        fn()
    drain()
    return (time.perf_counter() - t0) * 1e3 / TIMED


def copy_speeds(w: Work) -> dict:
    src = w.res_buf[0]
    nbytes = src.numel() * 4
    out = {}
    for kind in ("pageable", "pinned"):
        ms = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            if kind == "pageable":
                src.cpu()
            else:
                w.pinned[0].copy_(src)
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - t0) * 1e3)
        best = min(ms[1:])
        out[kind] = {
            "bytes": nbytes,
            "ms": [round(m, 3) for m in ms],
            "gbps_best": round(nbytes / (best * 1e-3) / 1e9, 2),
        }
    return out


def main() -> None:
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    out = os.path.join(outdir, "copy_pageable_dtoh.json.gz")
    scenario = "copy_pageable_dtoh"
    C.seed_all(0)
    C.env_facts(scenario)
    w = Work()
    C.fact(
        scenario=scenario,
        gemm=[N] * 3,
        gemms_per_step=GEMMS,
        result_bytes=N * N * 4,
        small_pinned_bytes=SMALL_ROWS * N * 4,
        truth={
            "expect": "pageable DtoH copy finding (256 MiB per step into pageable memory, "
            "the host blocked in cudaMemcpyAsync; the copy engine's slow Memcpy DtoH "
            "(Device -> Pageable) fills most of the step while the SMs idle), priced about "
            "pitfall_step_ms - fixed_step_ms; the trace's own pinned 32 MiB copies give the "
            "pinned link speed",
            "fix": "preallocated pinned buffer + copy_(non_blocking=True) on a side stream, "
            "overlapped with the next step's compute",
            "never": ["memory-bound", "no tensor cores"],
        },
    )
    C.fact(scenario=scenario, copy_speeds=copy_speeds(w))
    rounds = {"pitfall": [], "fixed": []}
    for _ in range(ROUNDS):
        rounds["pitfall"].append(round(time_steps(w.pitfall, torch.cuda.synchronize), 3))
        rounds["fixed"].append(round(time_steps(w.fixed, w.drain), 3))
    p = sum(rounds["pitfall"]) / ROUNDS
    f = sum(rounds["fixed"]) / ROUNDS
    compute_ms = time_steps(lambda: w.compute().float(), torch.cuda.synchronize)
    C.fact(
        scenario=scenario,
        pitfall_step_ms=round(p, 3),
        fixed_step_ms=round(f, 3),
        saving_ms=round(p - f, 3),
        saving_share=round((p - f) / p, 4),
        compute_only_step_ms=round(compute_ms, 3),
        pitfall_rounds_ms=rounds["pitfall"],
        fixed_rounds_ms=rounds["fixed"],
        warmup=WARMUP,
        timed=TIMED,
    )
    wait, warmup, active = 1, 2, 3
    for _ in range(2):
        w.pitfall()
    torch.cuda.synchronize()
    with C.make_profiler(out, wait, warmup, active) as prof:
        for _ in range(wait + warmup + active):
            w.pitfall()
            prof.step()
    torch.cuda.synchronize()
    C.fact(scenario=scenario, trace_facts=tracefacts.trace_facts(out))


if __name__ == "__main__":
    main()
