"""leak: bf16 training that keeps 128 MiB more GPU memory alive every step.

Each step appends torch.empty(32 * 1024 * 1024, dtype=float32, device='cuda').fill_(1.0)
(128 MiB) to a module-level list that is never cleared. torch.profiler with
profile_memory=True, schedule(wait=1, warmup=2, active=6). Expected: TA011 memory-growth
(allocated memory grows ~128 MiB per step).

usage: python3 leak.py OUT.json.gz
"""

import common as C
import torch

WAIT, WARMUP, ACTIVE = 1, 2, 6
KEEP: list[torch.Tensor] = []  # the leak


def remember_something() -> None:
    KEEP.append(torch.empty(32 * 1024 * 1024, dtype=torch.float32, device="cuda").fill_(1.0))


def main() -> None:
    out = C.out_arg("leak.json.gz")
    C.seed_all(0)
    C.env_facts("leak")
    model, opt = C.make_model_and_opt()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(2 + n)
    for x, y in batches[:2]:
        C.train_step(model, opt, x, y)
    torch.cuda.synchronize()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE, profile_memory=True) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[2 + i]
            C.train_step(model, opt, x, y)
            remember_something()
            clock.end_step()
            prof.step()
    clock.report("leak")


if __name__ == "__main__":
    main()
