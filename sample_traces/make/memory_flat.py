"""memory_flat: bf16 training whose memory grows only while it starts, then stays flat.

The bf16 GPT of common.py (16 x 512, AdamW(fused=True)), NO leak, profiled with
profile_memory=True from the process's first iteration: schedule(wait=0, warmup=0,
active=6), no step before it (model built, batches made on the GPU, then straight into the
profiler; as cold_start.py). So ProfilerStep#0 holds the caching allocator's growth (the
first activations and gradients) and the lazy creation of the AdamW state (exp_avg and
exp_avg_sq: 2 x 4 bytes per parameter, ~710 MiB), and allocated memory rises through it;
from ProfilerStep#1 on the same tensors are freed and made again every step: memory flat.
Per step, the allocator's allocated memory after the step and its peak inside the step
(reset_peak_memory_stats at each step start; no sync) are printed, and read back from the
trace's `[memory]` events by tracefacts.memory_steps.
Expected (negative control for TA011): no memory-growth finding; ProfilerStep#0 a cold step
to leave out (as in cold_start.json.gz); the steady steps host-bound as cold_start's.

usage: python3 memory_flat.py OUT.json.gz
"""

import common as C
import torch
import tracefacts

WAIT, WARMUP, ACTIVE = 0, 0, 6


def main() -> None:
    out = C.out_arg("memory_flat.json.gz")
    C.seed_all(0)
    C.env_facts("memory_flat")
    model, opt = C.make_model_and_opt()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(n)
    torch.cuda.synchronize()
    C.fact(
        scenario="memory_flat",
        params=C.model_params(model),
        mem_allocated_mib_before_first_step=round(torch.cuda.memory_allocated() / 2**20, 1),
    )
    clock = C.StepClock()
    peaks = []
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE, profile_memory=True) as prof:
        for i in range(n):
            torch.cuda.reset_peak_memory_stats()
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[i]
            C.train_step(model, opt, x, y)
            clock.end_step()
            peaks.append(round(torch.cuda.max_memory_allocated() / 2**20, 1))
            prof.step()
    clock.report("memory_flat")
    C.fact(scenario="memory_flat", peak_mem_allocated_mib_in_step=peaks)
    C.fact(scenario="memory_flat", memory_steps=tracefacts.memory_steps(out))
    C.fact(scenario="memory_flat", trace=tracefacts.trace_facts(out))
    C.fact(scenario="memory_flat", steps=tracefacts.step_detail(out))


if __name__ == "__main__":
    main()
