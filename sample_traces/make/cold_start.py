"""cold_start: profiling from the very first iteration of the process.

The bf16 model is built and moved to the GPU, then profiled with
schedule(wait=0, warmup=0, active=6) with no warm-up step before: ProfilerStep#0 holds
cuBLAS/cuDNN handle creation, caching-allocator growth, lazy init of the fused AdamW state.
Otherwise a healthy loop (batches pre-made on the GPU, no sleep, no sync).
Expected: the first step is a warm-up outlier far longer than the rest.

usage: python3 cold_start.py OUT.json.gz
"""

import common as C
import torch

WAIT, WARMUP, ACTIVE = 0, 0, 6


def main() -> None:
    out = C.out_arg("cold_start.json.gz")
    C.seed_all(0)
    C.env_facts("cold_start")
    model, opt = C.make_model_and_opt()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(n)
    torch.cuda.synchronize()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[i]
            C.train_step(model, opt, x, y)
            clock.end_step()
            prof.step()
    clock.report("cold_start")


if __name__ == "__main__":
    main()
