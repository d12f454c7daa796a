"""compiled_reduce_overhead: the bf16 model under torch.compile(mode="reduce-overhead").

torch.compile(model, mode="reduce-overhead") turns on Inductor's CUDA graph trees: the
compiled forward and backward are each captured in a CUDA graph and replayed
(`cudaGraphLaunch`); the loss (`cross_entropy(logits.float())`) and the fused AdamW step stay
eager, outside the graphs. 5 training iterations compile and warm it up before the profiler
(compilation, the graph trees' eager warm-up run, then the capture); then
schedule(wait=1, warmup=2, active=4). torch.compiler.cudagraph_mark_step_begin() starts every
iteration. Expected: torch.compile AND CUDA graphs in use; advice must not say
"use torch.compile" nor "use CUDA graphs" / mode="reduce-overhead".

usage: python3 compiled_reduce_overhead.py OUT.json.gz
"""

import time

import common as C
import torch

WAIT, WARMUP, ACTIVE = 1, 2, 4
WARM_ITERS = 5


def counters() -> dict[str, int]:
    """Inductor's counters that say whether CUDA graphs were skipped."""
    from torch._dynamo.utils import counters as cnt

    return {k: int(v) for k, v in cnt["inductor"].items() if "cudagraph" in k}


def compiled_step(cmodel, opt, x, y) -> torch.Tensor:
    torch.compiler.cudagraph_mark_step_begin()
    return C.train_step(cmodel, opt, x, y)


def main() -> None:
    out = C.out_arg("compiled_reduce_overhead.json.gz")
    C.seed_all(0)
    C.env_facts("compiled_reduce_overhead")
    model, opt = C.make_model_and_opt()
    cmodel = torch.compile(model, mode="reduce-overhead")
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(WARM_ITERS + n)
    t0 = time.perf_counter()
    warm_s = []
    for x, y in batches[:WARM_ITERS]:
        t1 = time.perf_counter()
        compiled_step(cmodel, opt, x, y)
        torch.cuda.synchronize()
        warm_s.append(round(time.perf_counter() - t1, 3))
    C.fact(
        scenario="compiled_reduce_overhead",
        compile_and_warmup_s=round(time.perf_counter() - t0, 1),
        warmup_iters_s=warm_s,
        inductor_cudagraph_counters=counters(),
    )
    clock = C.StepClock()
    losses = []
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[WARM_ITERS + i]
            losses.append(compiled_step(cmodel, opt, x, y).detach())
            clock.end_step()
            prof.step()
    clock.report("compiled_reduce_overhead")
    C.fact(
        scenario="compiled_reduce_overhead",
        losses=[round(float(v), 4) for v in losses],
        inductor_cudagraph_counters=counters(),
    )


if __name__ == "__main__":
    main()
