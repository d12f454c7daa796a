"""launch_bound_train: training of a tiny model: thousands of tiny kernels per step.

The GPT model of common.py shrunk to width 64, 4 heads, 12 layers, vocab 8192, batch
2 x 64 tokens, bf16 autocast (common.train_step), and a non-fused, per-tensor optimizer:
`AdamW(foreach=False, fused=False)` (a Python loop over the 149 parameter tensors, ~7 kernels
each). Every kernel runs a few microseconds, far less than the host takes to issue it, so
the GPU waits for each launch. Token batches made on the GPU up front; no sync and no copy
in the steps. 2 steps before the profiler, then schedule(wait=1, warmup=2, active=4).
Afterwards, profiler off, the step time by CUDA events.
Expected: launch/host-bound, GPU busy well under 30 %: TA003 launch-overhead; never TA004
(memory-bound share is high but faster kernels would save nothing) or TA005.

usage: python3 launch_bound_train.py OUT.json.gz
"""

import time

import common as C
import torch
import tracefacts

WAIT, WARMUP, ACTIVE = 1, 2, 4
WIDTH, HEADS, LAYERS, BATCH, SEQ = 64, 4, 12, 2, 64


def main() -> None:
    out = C.out_arg("launch_bound_train.json.gz")
    C.seed_all(0)
    C.env_facts("launch_bound_train")
    model = C.GPT(d=WIDTH, h=HEADS, layers=LAYERS, max_seq=SEQ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False, fused=False)
    C.fact(
        scenario="launch_bound_train",
        params=C.model_params(model),
        param_tensors=len(list(model.parameters())),
        width=WIDTH,
        layers=LAYERS,
        batch=BATCH,
        seq=SEQ,
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
    clock.report("launch_bound_train")
    C.fact(scenario="launch_bound_train", trace=tracefacts.trace_facts(out))

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
        scenario="launch_bound_train",
        unprofiled_step_ms_cuda_events=[
            round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(len(rest))
        ],
        unprofiled_step_ms_host_wall=[
            round((wall[i + 1] - wall[i]) * 1e3, 3) for i in range(len(rest))
        ],
    )


if __name__ == "__main__":
    main()
