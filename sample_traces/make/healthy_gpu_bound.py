"""healthy_gpu_bound: a negative control: bf16 GPT training that keeps the GPU busy.

The GPT model of common.py (vocabulary 8192, width 1024, 16 heads, 6 layers) at a large
batch: 32 sequences x 1024 tokens (32,768 tokens per step; `max_seq=1024`), bf16 autocast,
AdamW(fused=True), common.train_step. Token batches made on the GPU up front: no input
pipeline, no sync, no copy in the steps; every GEMM dimension a multiple of 64. Each step's
GPU work (~4x the 16 x 512 run's tokens, attention over 1024) far outlasts the host's
launches, so the host runs ahead and the GPU works back to back. 2 steps before the profiler,
then schedule(wait=1, warmup=2, active=4).
Afterwards, profiler off, the step time by CUDA events and the host wall per step.
Expected: nothing serious (no finding above info); never TA001, TA002, TA003, TA005, TA006,
TA009; GPU-compute-bound.

usage: python3 healthy_gpu_bound.py OUT.json.gz
"""

import time

import common as C
import torch
import tracefacts

WAIT, WARMUP, ACTIVE = 1, 2, 4
BATCH, SEQ = 32, 1024


def main() -> None:
    out = C.out_arg("healthy_gpu_bound.json.gz")
    C.seed_all(0)
    C.env_facts("healthy_gpu_bound")
    model = C.GPT(max_seq=SEQ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    C.fact(
        scenario="healthy_gpu_bound",
        params=C.model_params(model),
        width=C.WIDTH,
        layers=C.LAYERS,
        batch=BATCH,
        seq=SEQ,
        tokens_per_step=BATCH * SEQ,
    )
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(2 + n + 6, batch=BATCH, seq=SEQ)
    for x, y in batches[:2]:
        C.train_step(model, opt, x, y)
    torch.cuda.synchronize()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[2 + i]
            C.train_step(model, opt, x, y)
            clock.end_step()
            prof.step()
    clock.report("healthy_gpu_bound")
    C.fact(scenario="healthy_gpu_bound", trace=tracefacts.trace_facts(out))
    C.fact(scenario="healthy_gpu_bound", steps=tracefacts.step_detail(out))

    rest = batches[2 + n :]
    torch.cuda.synchronize()
    ev, wall = [], []
    for x, y in rest:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        ev.append(e)
        wall.append(time.perf_counter())
        C.train_step(model, opt, x, y)
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    ev.append(e)
    wall.append(time.perf_counter())
    torch.cuda.synchronize()
    C.fact(
        scenario="healthy_gpu_bound",
        unprofiled_step_ms_cuda_events=[
            round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(len(rest))
        ],
        unprofiled_step_ms_host_wall=[
            round((wall[i + 1] - wall[i]) * 1e3, 3) for i in range(len(rest))
        ],
    )


if __name__ == "__main__":
    main()
