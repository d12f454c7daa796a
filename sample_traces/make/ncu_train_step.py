"""ncu_train_step: a small GPT training loop whose step_1 Nsight Compute profiles kernel by kernel
(run_counters.sh: `ncu --nvtx --nvtx-include "step_1/" --section SpeedOfLight --section
LaunchStats --section Occupancy --metrics ... -o /tmp/k python3 ncu_train_step.py`), and the
SAME loop under torch.profiler (--kineto), so that both views of one step can be joined.

The GPT of common.py at a small width: vocab 8192, width 256, 4 heads, 2 layers, batch 8 x 128
tokens, bf16 autocast, `cross_entropy(logits.float())` (common.train_step), AdamW(fused=True),
zero_grad(set_to_none=True); seed 0; token batches made on the GPU up front (common.gpu_batches,
generator seed 1234). STEPS = 6 steps, each inside an NVTX range step_N, no warm-up before
step_0 (step_0 holds cuBLAS/cuDNN set-up and AdamW's lazy state: the cold step). A step is 142
kernels (54 of them launched by the main thread, see below); ncu profiles those of step_1 (its
timings are ncu's: each kernel replayed, clocks locked to base, caches flushed; not the job's).

--kineto OUT: the same process structure (same seed, model, batches, 6 steps under NVTX),
under `profile(activities=[CPU, CUDA], schedule(wait=0, warmup=1, active=3),
record_shapes=True)` with prof.step() after each step: ProfilerStep#1..#3 are recorded, and
ProfilerStep#1 is the step that ncu profiled as step_1 (same data, same optimizer state).
--time: no profiler; 3 warm-up steps, synchronize, 10 steps, synchronize, mean ms per step.

Expected (both views): a small model: many short kernels, the step host/launch-bound on the
H200 (GPU idle between kernels in the Kineto trace); per kernel (ncu) the GEMMs are small
(grids of 32 to 132 blocks), the SM and DRAM throughputs of most kernels low, which is the
launch-bound truth seen from the counters: nothing to gain from faster kernels.

NVTX push/pop ranges are per thread, and autograd runs the backward on a thread of its own:
under `--nvtx-include "step_1/"` ncu profiles the kernels launched by the main thread in step_1
only (embedding, forward, loss, the backward's seed fill, the optimizer), none of the backward's.
--startend marks each step with a process-wide start/end range instead
(torch.cuda.nvtx.range_start / range_end, same names step_N), which ncu selects with
`--nvtx-include "step_1"` (no slash): every kernel of the step, the backward's too.

usage: python3 ncu_train_step.py            (the ncu workload: 6 steps under NVTX push/pop)
       python3 ncu_train_step.py --startend (the same, start/end ranges)
       python3 ncu_train_step.py --kineto OUT.json.gz
       python3 ncu_train_step.py --time
"""

from __future__ import annotations

import sys
import time

import common as C
import torch

WIDTH, HEADS, LAYERS, BATCH, SEQ, VOCAB = 256, 4, 2, 8, 128, 8192
STEPS = 6


def setup():
    C.seed_all(0)
    model = C.GPT(vocab=VOCAB, d=WIDTH, h=HEADS, layers=LAYERS, max_seq=SEQ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    return model, opt


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    C.env_facts("ncu_train_step")
    model, opt = setup()
    C.fact(
        scenario="ncu_train_step",
        width=WIDTH,
        heads=HEADS,
        layers=LAYERS,
        batch=BATCH,
        seq=SEQ,
        vocab=VOCAB,
        params=C.model_params(model),
        steps=STEPS,
        mode=mode or "ncu",
    )
    if mode == "--time":
        batches = C.gpu_batches(4, batch=BATCH, seq=SEQ, vocab=VOCAB)
        for i in range(3):
            C.train_step(model, opt, *batches[i % 4])
        torch.cuda.synchronize()
        n = 10
        t0 = time.perf_counter()
        for i in range(n):
            C.train_step(model, opt, *batches[i % 4])
        torch.cuda.synchronize()
        C.fact(
            scenario="ncu_train_step",
            step_ms=round((time.perf_counter() - t0) * 1e3 / n, 3),
            warmup=3,
            timed=n,
        )
        return
    batches = C.gpu_batches(STEPS, batch=BATCH, seq=SEQ, vocab=VOCAB)
    prof = None
    if mode == "--kineto":
        out = sys.argv[2]
        prof = C.make_profiler(out, wait=0, warmup=1, active=3)
        prof.__enter__()
    host_ms = []
    for i in range(STEPS):
        if mode == "--startend":
            rid = torch.cuda.nvtx.range_start(f"step_{i}")
        else:
            torch.cuda.nvtx.range_push(f"step_{i}")
        t0 = time.perf_counter()
        loss = C.train_step(model, opt, *batches[i])
        host_ms.append(round((time.perf_counter() - t0) * 1e3, 3))
        if mode == "--startend":
            torch.cuda.nvtx.range_end(rid)
        else:
            torch.cuda.nvtx.range_pop()
        if prof is not None:
            prof.step()
    torch.cuda.synchronize()
    if prof is not None:
        prof.__exit__(None, None, None)
    C.fact(scenario="ncu_train_step", step_host_ms=host_ms, final_loss=round(float(loss), 4))


if __name__ == "__main__":
    main()
