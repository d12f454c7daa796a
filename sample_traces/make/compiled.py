"""compiled: the bf16 model under torch.compile (default mode).

torch.compile(model) is warmed up (compiled) with 3 training iterations before profiling;
then schedule(wait=1, warmup=2, active=4). The trace holds Triton kernels and
`Torch-Compiled Region` / `CompiledFunction` ranges. Expected: advice must not say
"use torch.compile".

usage: python3 compiled.py OUT.json.gz
"""

import time

import common as C
import torch

WAIT, WARMUP, ACTIVE = 1, 2, 4


def main() -> None:
    out = C.out_arg("compiled.json.gz")
    C.seed_all(0)
    C.env_facts("compiled")
    model, opt = C.make_model_and_opt()
    cmodel = torch.compile(model)
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(3 + n)
    t0 = time.perf_counter()
    for x, y in batches[:3]:
        C.train_step(cmodel, opt, x, y)
    torch.cuda.synchronize()
    C.fact(scenario="compiled", compile_and_3_warmup_steps_s=round(time.perf_counter() - t0, 1))
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[3 + i]
            C.train_step(cmodel, opt, x, y)
            clock.end_step()
            prof.step()
    clock.report("compiled")


if __name__ == "__main__":
    main()
