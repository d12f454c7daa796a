"""nsys_host_sync: GPU-bound bf16 training with two host syncs per step, for Nsight Systems.

Run under `nsys profile` (see run_nsys.sh), from process start. The GPU-bound GPT of
host_sync_gpu_bound.py (`MidSyncGPT`: width 2048, 16 heads, 6 layers, batch 32 x 512, bf16
autocast, AdamW(fused=True)) with, in every step:
  1. `if x.abs().max().item() > 1e6` after the 3rd of 6 blocks (mid-forward), and
  2. `loss.item()` between `backward()` and the optimizer step (as host_sync.py),
each a 4-byte device-to-host `cudaMemcpyAsync` followed by `cudaStreamSynchronize`.
8 steps, each inside an NVTX range step_N; no warm-up before step_0, so step_0 holds
cuBLAS/cuDNN handle creation, allocator growth and the lazy AdamW state. Token batches are
made on the GPU before step_0; `model.cuda()`'s pageable copies run before step_0 too.
Expected: step_0 a cold step to leave out; TA002 host-sync (2 syncs per step); GPU-bound
otherwise (the GPU works while the host waits); TA009 must not come from the start-up copies.

usage: nsys profile ... python3 nsys_host_sync.py
"""

import common as C
import torch
import torch.nn.functional as F
from host_sync_gpu_bound import BATCH, HEADS, LAYERS, WIDTH, MidSyncGPT

STEPS = 8


def step(model, opt, x, y) -> float:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)  # sync 1: MidSyncGPT.trunk's .item() after block 2
    loss = F.cross_entropy(logits.float().reshape(-1, C.VOCAB), y.reshape(-1))
    loss.backward()
    loss_value = loss.item()  # sync 2: before the optimizer
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss_value


def main() -> None:
    C.seed_all(0)
    C.env_facts("nsys_host_sync")
    model = MidSyncGPT(d=WIDTH, h=HEADS, layers=LAYERS).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    C.fact(
        scenario="nsys_host_sync",
        params=C.model_params(model),
        width=WIDTH,
        layers=LAYERS,
        batch=BATCH,
        seq=C.SEQ,
        syncs_per_step=2,
    )
    batches = C.gpu_batches(STEPS, batch=BATCH)
    clock = C.StepClock()
    losses = []
    for i in range(STEPS):
        torch.cuda.nvtx.range_push(f"step_{i}")
        clock.start(f"step_{i}")
        losses.append(round(step(model, opt, *batches[i]), 4))
        clock.end_step()
        torch.cuda.nvtx.range_pop()
    clock.report("nsys_host_sync")
    C.fact(scenario="nsys_host_sync", losses=losses)


if __name__ == "__main__":
    main()
