"""nsys_launch_bound: the tiny-model training of launch_bound_train.py, for Nsight Systems.

Run under `nsys profile` (see run_nsys.sh), from process start. The GPT of common.py shrunk
to width 64, 4 heads, 12 layers, vocab 8192, batch 2 x 64 tokens, bf16 autocast
(common.train_step), `AdamW(foreach=False, fused=False)` (a Python loop over the 149
parameter tensors). ~1900 kernels per step of a few microseconds each: the GPU waits for
every launch. 8 steps, each inside an NVTX range step_N; no warm-up before step_0 (cold:
handles, allocator, the lazy AdamW state). Token batches made on the GPU before step_0; no
sync and no copy in the steps.
Expected: step_0 a cold step to leave out; then TA003 launch-overhead on top; never TA004
(memory-bound share is high but faster kernels would save nothing) or TA005.

usage: nsys profile ... python3 nsys_launch_bound.py
"""

import common as C
import torch
from launch_bound_train import BATCH, HEADS, LAYERS, SEQ, WIDTH

STEPS = 8


def main() -> None:
    C.seed_all(0)
    C.env_facts("nsys_launch_bound")
    model = C.GPT(d=WIDTH, h=HEADS, layers=LAYERS, max_seq=SEQ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False, fused=False)
    C.fact(
        scenario="nsys_launch_bound",
        params=C.model_params(model),
        param_tensors=len(list(model.parameters())),
        width=WIDTH,
        layers=LAYERS,
        batch=BATCH,
        seq=SEQ,
    )
    batches = C.gpu_batches(STEPS, batch=BATCH, seq=SEQ)
    clock = C.StepClock()
    for i in range(STEPS):
        torch.cuda.nvtx.range_push(f"step_{i}")
        clock.start(f"step_{i}")
        C.train_step(model, opt, *batches[i])
        clock.end_step()
        torch.cuda.nvtx.range_pop()
    clock.report("nsys_launch_bound")


if __name__ == "__main__":
    main()
