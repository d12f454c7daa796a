"""compile_cold: torch.compile (default mode) profiled from the first iteration of the process.

The bf16 model of common.py wrapped in `torch.compile(model)` (default mode; optimizer and
loss eager, as compiled.py), built, moved to the GPU and straight into the profiler with
schedule(wait=0, warmup=0, active=6): no step runs before it, so ProfilerStep#0 holds
Dynamo's tracing, AOTAutograd and Inductor's compilation of the forward (at the first call)
and of the backward (at the first backward), the first launches of the new Triton kernels,
cuBLAS/cuDNN handle creation, allocator growth and the fused AdamW state init: seconds,
mostly without GPU work. Inductor's cache starts empty (a fresh machine). Steps 1-5 run the
compiled model: the steady state of compiled.json.gz (host-bound, ~25 ms per step).
Expected: the compile step(s) are warm-up, left out (or flagged) before the rest is judged;
torch_compile in use, so never "use torch.compile".

usage: python3 compile_cold.py OUT.json.gz
"""

import time

import common as C
import torch
import tracefacts

WAIT, WARMUP, ACTIVE = 0, 0, 6


def main() -> None:
    out = C.out_arg("compile_cold.json.gz")
    C.seed_all(0)
    C.env_facts("compile_cold")
    model, opt = C.make_model_and_opt()
    cmodel = torch.compile(model)
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(n)
    torch.cuda.synchronize()
    clock = C.StepClock()
    t0 = time.perf_counter()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[i]
            C.train_step(cmodel, opt, x, y)
            clock.end_step()
            prof.step()
    C.fact(scenario="compile_cold", profiled_loop_and_export_s=round(time.perf_counter() - t0, 1))
    clock.report("compile_cold")
    C.fact(scenario="compile_cold", trace=tracefacts.trace_facts(out))
    C.fact(scenario="compile_cold", steps=tracefacts.step_detail(out))


if __name__ == "__main__":
    main()
