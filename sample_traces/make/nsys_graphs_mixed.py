"""nsys_graphs_mixed: eager steps, then torch.compile(mode="reduce-overhead") steps, for nsys.

Run under `nsys profile` with its default CUDA graph tracing (graph-level: one
CUPTI_ACTIVITY_KIND_GRAPH_TRACE row per replay), from process start (see run_nsys.sh).
The bf16 GPT model of common.py:
  step_0 .. step_2   eager training steps (step_0 cold: handles, allocator, AdamW state)
  compile_warmup     (NVTX range, not a step) torch.compile(model, mode="reduce-overhead"):
                     WARM_ITERS iterations that compile, run the graph trees' eager warm-up
                     and capture the forward and backward CUDA graphs
  step_3 .. step_8   compiled steps: per step one forward graph replay, the eager loss
                     (cross_entropy on logits.float()), one backward graph replay and the
                     eager fused AdamW kernels; each step starts with
                     torch.compiler.cudagraph_mark_step_begin()
So the replay steps hold graph-level activities AND ordinary kernels on the same stream.
Expected: CUDA graphs and torch.compile in use; the replay steps are GPU work, not idle;
advice must not say "use CUDA graphs" / "use torch.compile" / mode="reduce-overhead".

usage: nsys profile ... python3 nsys_graphs_mixed.py
"""

import time

import common as C
import torch

EAGER, COMPILED, WARM_ITERS = 3, 6, 4


def main() -> None:
    C.seed_all(0)
    C.env_facts("nsys_graphs_mixed")
    model, opt = C.make_model_and_opt()
    batches = C.gpu_batches(EAGER + WARM_ITERS + COMPILED)
    clock = C.StepClock()
    k = 0
    for i in range(EAGER):
        torch.cuda.nvtx.range_push(f"step_{i}")
        clock.start(f"eager step_{i}")
        C.train_step(model, opt, *batches[k])
        k += 1
        clock.end_step()
        torch.cuda.nvtx.range_pop()
    clock.report("nsys_graphs_mixed eager")  # syncs, outside every step range
    cmodel = torch.compile(model, mode="reduce-overhead")
    t0 = time.perf_counter()
    torch.cuda.nvtx.range_push("compile_warmup")
    for _ in range(WARM_ITERS):
        torch.compiler.cudagraph_mark_step_begin()
        C.train_step(cmodel, opt, *batches[k])
        k += 1
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    C.fact(scenario="nsys_graphs_mixed", compile_and_warmup_s=round(time.perf_counter() - t0, 1))
    clock2 = C.StepClock()
    for i in range(EAGER, EAGER + COMPILED):
        torch.cuda.nvtx.range_push(f"step_{i}")
        clock2.start(f"compiled step_{i}")
        torch.compiler.cudagraph_mark_step_begin()
        C.train_step(cmodel, opt, *batches[k])
        k += 1
        clock2.end_step()
        torch.cuda.nvtx.range_pop()
    clock2.report("nsys_graphs_mixed compiled")
    from torch._dynamo.utils import counters

    C.fact(
        scenario="nsys_graphs_mixed",
        inductor_cudagraph_counters={
            name: int(v) for name, v in counters["inductor"].items() if "cudagraph" in name
        },
    )


if __name__ == "__main__":
    main()
