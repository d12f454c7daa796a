"""cold_inference: the FIRST inference call of a small CNN in a fresh process (cuDNN and cuBLAS
set-up, lazy kernel loading inside the first conv and linear calls), and a warm call.

SmallCNN: 4 x [Conv2d 3x3 (3->32, 32->64 s2, 64->128 s2, 128->256 s2), BatchNorm2d, ReLU],
AdaptiveAvgPool2d(1), Linear(256, 10); eval(), torch.no_grad(), fp32 (torch's defaults:
cudnn.benchmark False, cuDNN TF32 allowed), input 16 x 3 x 128 x 128. Before the first call
the process has its CUDA context (model.cuda(), the input made by torch.randn on the GPU,
torch.cuda.synchronize()), but no conv, batch norm or GEMM has run.

usage: python3 cold_inference.py time          (a fresh process, no profiler: the first call,
                                                 synced and timed, then WARM = 20 calls after 3
                                                 warm-ups: mean ms per call; FACT lines)
       python3 cold_inference.py trace OUTDIR  (a fresh process: the first call profiled alone,
                                                 profile(activities=[CPU, CUDA],
                                                 schedule(wait=0, warmup=0, active=1),
                                                 record_shapes=True) -> ProfilerStep#0 ->
                                                 OUTDIR/cold_first_call.json.gz; then 5
                                                 un-profiled calls and a second profile of warm
                                                 calls, schedule(wait=1, warmup=2, active=3):
                                                 ProfilerStep#3..#5 -> OUTDIR/warm_call.json.gz)

Expected: cold_first_call: the one step is dominated by one-time library set-up (cuDNN/cuBLAS
handle creation, plan/heuristic queries, module loading: host time in the first conv call, the
GPU idle) - a library set-up / cold-start finding that names it as one-time, not a steady
host-bound step; its price is first_call_ms - warm_call_ms. warm_call: a small, fast inference
(21 kernels, under 1 ms a call, host/launch-bound) with no set-up finding.
"""

from __future__ import annotations

import os
import sys
import time

import common as C
import torch
import torch.nn as nn
import tracefacts

WARM = 20
INPUT = (16, 3, 128, 128)


def small_cnn() -> nn.Module:
    layers: list[nn.Module] = []
    chans = [(3, 32, 1), (32, 64, 2), (64, 128, 2), (128, 256, 2)]
    for cin, cout, stride in chans:
        layers += [
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        ]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)]
    return nn.Sequential(*layers)


def setup():
    C.seed_all(0)
    model = small_cnn().cuda().eval()
    x = torch.randn(*INPUT, device="cuda")
    torch.cuda.synchronize()
    return model, x


def call(model, x) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def run_time() -> None:
    C.env_facts("cold_inference")
    model, x = setup()
    t0 = time.perf_counter()
    call(model, x)
    torch.cuda.synchronize()
    first = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    call(model, x)
    torch.cuda.synchronize()
    second = (time.perf_counter() - t0) * 1e3
    for _ in range(3):
        call(model, x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(WARM):
        call(model, x)
    torch.cuda.synchronize()
    warm = (time.perf_counter() - t0) * 1e3 / WARM
    C.fact(
        scenario="cold_inference",
        first_call_ms=round(first, 3),
        second_call_ms=round(second, 3),
        warm_call_ms=round(warm, 4),
        cold_extra_ms=round(first - warm, 3),
        warm_calls=WARM,
        input=list(INPUT),
        cudnn_benchmark=torch.backends.cudnn.benchmark,
        cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
    )


def run_trace(outdir: str) -> None:
    os.makedirs(outdir, exist_ok=True)
    C.env_facts("cold_inference")
    model, x = setup()
    C.fact(
        scenario="cold_inference",
        truth={
            "cold_first_call.json.gz": "one-time library set-up (cuDNN/cuBLAS handles, plans, "
            "module loading) inside the first conv/linear calls dominates the single step; named "
            "as one-time, priced about first_call_ms - warm_call_ms; not a steady host-bound "
            "verdict",
            "warm_call.json.gz": "a fast warm inference (21 short kernels, under 1 ms a call, "
            "host/launch-bound): no library set-up finding",
        },
    )
    cold = os.path.join(outdir, "cold_first_call.json.gz")
    with C.make_profiler(cold, wait=0, warmup=0, active=1) as prof:
        call(model, x)
        torch.cuda.synchronize()
        prof.step()
    C.fact(scenario="cold_first_call", trace_facts=tracefacts.trace_facts(cold))
    for _ in range(5):
        call(model, x)
    torch.cuda.synchronize()
    warm = os.path.join(outdir, "warm_call.json.gz")
    with C.make_profiler(warm, wait=1, warmup=2, active=3) as prof:
        for _ in range(6):
            call(model, x)
            prof.step()
    torch.cuda.synchronize()
    C.fact(scenario="warm_call", trace_facts=tracefacts.trace_facts(warm))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "time"
    if mode == "time":
        run_time()
    elif mode == "trace":
        run_trace(sys.argv[2])
    else:
        raise SystemExit(__doc__)
