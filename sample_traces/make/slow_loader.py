"""slow_loader: bf16 training starved by a slow host input pipeline.

Before every step a Python generator sleeps 25 ms (a slow data pipeline), makes the batch on
the CPU with torch.randint, pins it and copies it to the GPU with non_blocking=True. The GPU
is idle during the sleep inside every ProfilerStep. Expected: TA001 gpu-starvation on top.

usage: python3 slow_loader.py OUT.json.gz
"""

import time

import common as C
import torch

SLEEP_S = 0.025
WAIT, WARMUP, ACTIVE = 1, 2, 4


def loader(n: int):
    g = torch.Generator()
    g.manual_seed(1234)
    for _ in range(n):
        time.sleep(SLEEP_S)  # the slow part of the input pipeline
        d = torch.randint(0, C.VOCAB, (C.BATCH, C.SEQ + 1), generator=g)
        d = d.pin_memory().cuda(non_blocking=True)
        yield d[:, :-1].contiguous(), d[:, 1:].contiguous()


def main() -> None:
    out = C.out_arg("slow_loader.json.gz")
    C.seed_all(0)
    C.env_facts("slow_loader")
    model, opt = C.make_model_and_opt()
    # warm-up outside the profiled window: handles, allocator, optimizer state
    for x, y in C.gpu_batches(2):
        C.train_step(model, opt, x, y)
    torch.cuda.synchronize()
    clock = C.StepClock()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        it = loader(n)
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = next(it)
            C.train_step(model, opt, x, y)
            clock.end_step()
            prof.step()
    clock.report("slow_loader")


if __name__ == "__main__":
    main()
